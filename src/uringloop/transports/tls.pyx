# TLS over the ring's stream transports: asyncio's own SSLProtocol, with
# the path every record of an established connection takes compiled here.
# Included by core.pyx.
#
# The stdlib's SSLProtocol is Python: a 1 KiB TLS echo ran some 30 of its
# functions per request (buffer_updated, _do_read, _do_read__copied, two
# SSLObject.read()s, the second only to be told SSLWantReadError, which
# _ssl builds with a formatted message, _write_appdata, _do_write,
# _process_outgoing twice, the flow-control checks, ...), and most of the
# server's user CPU was the interpreter's (docs/benchmarks.md, "Behind the comments").
#
# RingSSLProtocol subclasses it and replaces only those methods, with the
# same effects in every state; the handshake, the shutdown, the timeouts,
# errors and BufferedProtocol applications stay the stdlib's code, so what
# a user or a test can observe is the stdlib's.  Two differences inside:
#   - reads and writes go to ssl.SSLObject's _ssl object directly (the
#     public methods are one-line Python wrappers of it), unless the
#     context's sslobject_class is a subclass, whose overrides are called;
#   - after a read, when the incoming BIO is empty and nothing decrypted is
#     pending, the next read is not tried: it could only raise
#     SSLWantReadError (OpenSSL reads records from the BIO as it needs
#     them: its read-ahead is off by default, and Python never sets it).
# The steps call each other as C functions on a TlsPath, which holds in C
# fields what the stdlib never replaces after __init__ (the two memory BIOs,
# the SSL object's methods, the write backlog, max_size) and the state those steps
# read and write: _state, _transport, _app_protocol, the four paused flags,
# the write buffer size, the four water marks, _conn_lost, the read
# buffer.  Each of those attributes is a TlsField on the class, a data
# descriptor over the TlsPath field, so the stdlib's own methods read and
# set the same state by its usual name.  (With the steps as methods, and
# the state in the instance's dict, attribute and method lookups were a
# fifth of the 1 KiB TLS echo's user CPU.)
# The class is what loop.create_connection/create_server(ssl=...) use
# (_make_ssl_transport) and what loop.start_tls() makes (start_tls below,
# the loop's method in place of BaseEventLoop's, which names the stdlib's
# class itself).

cdef object TLS_WRAPPED = sslproto.SSLProtocolState.WRAPPED
cdef object TLS_FLUSHING = sslproto.SSLProtocolState.FLUSHING
cdef object TLS_SHUTDOWN = sslproto.SSLProtocolState.SHUTDOWN
cdef object TLS_UNWRAPPED = sslproto.SSLProtocolState.UNWRAPPED
cdef object TLS_DO_HANDSHAKE = sslproto.SSLProtocolState.DO_HANDSHAKE
# (a Python without ssl: sslproto has neither, and no TLS is made)
cdef object TLS_AGAIN = getattr(sslproto, 'SSLAgainErrors', ())
cdef object SSL_OBJECT = getattr(sslproto.ssl, 'SSLObject', None)


# the largest plaintext of one TLS record; the most one read asks for
# (_ssl takes an int)
cdef enum:
    TLS_RECORD_MAX = 16384
    TLS_READ_MAX = 1 << 30

cdef extern from "Python.h":
    object PyMemoryView_FromMemory(char *mem, Py_ssize_t size, int flags)
    int PyBUF_WRITE
    void Py_XDECREF(PyObject *)
    # a new bytes as a reference of ours, to resize in place
    PyObject *tls_bytes_new "PyBytes_FromStringAndSize"(const char *v, Py_ssize_t n) except NULL


cdef object tls_engine(object sslobj):
    """What to call read/write/pending on: the _ssl object behind a plain
    ssl.SSLObject, or the object itself when its class overrides them."""
    if type(sslobj) is SSL_OBJECT:
        return sslobj._sslobj
    return sslobj


# TlsPath fields behind the stdlib's attribute names (TlsField.which)
cdef enum:
    F_STATE, F_TRANSPORT, F_APP_PROTOCOL, F_APP_IS_BUFFER, F_APP_READING_PAUSED,
    F_APP_WRITING_PAUSED, F_SSL_READING_PAUSED, F_SSL_WRITING_PAUSED,
    F_WRITE_BUFFER_SIZE, F_INCOMING_HIGH, F_INCOMING_LOW, F_OUTGOING_HIGH,
    F_OUTGOING_LOW, F_CONN_LOST, F_SSL_BUFFER, F_SSL_BUFFER_VIEW

TLS_FIELDS = {
    '_state': F_STATE, '_transport': F_TRANSPORT, '_app_protocol': F_APP_PROTOCOL,
    '_app_protocol_is_buffer': F_APP_IS_BUFFER,
    '_app_reading_paused': F_APP_READING_PAUSED,
    '_app_writing_paused': F_APP_WRITING_PAUSED,
    '_ssl_reading_paused': F_SSL_READING_PAUSED,
    '_ssl_writing_paused': F_SSL_WRITING_PAUSED,
    '_write_buffer_size': F_WRITE_BUFFER_SIZE,
    '_incoming_high_water': F_INCOMING_HIGH, '_incoming_low_water': F_INCOMING_LOW,
    '_outgoing_high_water': F_OUTGOING_HIGH, '_outgoing_low_water': F_OUTGOING_LOW,
    '_conn_lost': F_CONN_LOST, '_ssl_buffer': F_SSL_BUFFER,
    '_ssl_buffer_view': F_SSL_BUFFER_VIEW,
}


@cython.final
cdef class TlsPath:
    """What the compiled steps of one RingSSLProtocol use (see above)."""
    cdef object incoming        # ssl.MemoryBIO: records from the peer
    cdef object outgoing        # ssl.MemoryBIO: records for the peer
    cdef object backlog         # the deque of application data to encrypt
    # their methods the steps call, bound once (not looked up per call);
    # engine_*: of what reads and writes (tls_engine)
    cdef object engine_read, engine_write, engine_pending
    cdef bint engine_raw        # the engine is _ssl's, whose read() takes a buffer
    cdef object incoming_write, outgoing_read
    cdef object backlog_append, backlog_popleft
    cdef Py_ssize_t max_size    # the size of one read
    cdef object state           # an SSLProtocolState
    cdef object transport
    cdef object app_protocol
    cdef bint app_is_buffer
    cdef bint app_reading_paused, app_writing_paused
    cdef bint ssl_reading_paused, ssl_writing_paused
    cdef Py_ssize_t write_buffer_size
    cdef Py_ssize_t conn_lost
    cdef object ssl_buffer, ssl_buffer_view
    # the water marks as set (ints, or floats a caller gave), and as
    # doubles to compare with: Python compares int and float exactly
    cdef object incoming_high_set, incoming_low_set, outgoing_high_set, outgoing_low_set
    cdef double incoming_high, incoming_low, outgoing_high, outgoing_low


@cython.final
cdef class TlsField:
    """One of the stdlib's SSLProtocol attributes, kept in the protocol's
    TlsPath: a data descriptor, so it is found before the instance dict."""
    cdef int which
    cdef str name

    def __get__(self, obj, owner):
        cdef TlsPath p
        if obj is None:
            return self
        p = tls_path_of(obj, self.name)
        if self.which == F_STATE:
            return p.state
        if self.which == F_TRANSPORT:
            return p.transport
        if self.which == F_APP_PROTOCOL:
            return p.app_protocol
        if self.which == F_APP_IS_BUFFER:
            return p.app_is_buffer
        if self.which == F_APP_READING_PAUSED:
            return p.app_reading_paused
        if self.which == F_APP_WRITING_PAUSED:
            return p.app_writing_paused
        if self.which == F_SSL_READING_PAUSED:
            return p.ssl_reading_paused
        if self.which == F_SSL_WRITING_PAUSED:
            return p.ssl_writing_paused
        if self.which == F_WRITE_BUFFER_SIZE:
            return p.write_buffer_size
        if self.which == F_CONN_LOST:
            return p.conn_lost
        if self.which == F_SSL_BUFFER:
            return p.ssl_buffer
        if self.which == F_SSL_BUFFER_VIEW:
            return p.ssl_buffer_view
        if self.which == F_INCOMING_HIGH:
            return p.incoming_high_set
        if self.which == F_INCOMING_LOW:
            return p.incoming_low_set
        if self.which == F_OUTGOING_HIGH:
            return p.outgoing_high_set
        return p.outgoing_low_set

    def __set__(self, obj, value):
        cdef TlsPath p = tls_path_of(obj, self.name)
        if self.which == F_STATE:
            p.state = value
        elif self.which == F_TRANSPORT:
            p.transport = value
        elif self.which == F_APP_PROTOCOL:
            p.app_protocol = value
        elif self.which == F_APP_IS_BUFFER:
            p.app_is_buffer = value
        elif self.which == F_APP_READING_PAUSED:
            p.app_reading_paused = value
        elif self.which == F_APP_WRITING_PAUSED:
            p.app_writing_paused = value
        elif self.which == F_SSL_READING_PAUSED:
            p.ssl_reading_paused = value
        elif self.which == F_SSL_WRITING_PAUSED:
            p.ssl_writing_paused = value
        elif self.which == F_WRITE_BUFFER_SIZE:
            p.write_buffer_size = value
        elif self.which == F_CONN_LOST:
            p.conn_lost = value
        elif self.which == F_SSL_BUFFER:
            p.ssl_buffer = value
        elif self.which == F_SSL_BUFFER_VIEW:
            p.ssl_buffer_view = value
        elif self.which == F_INCOMING_HIGH:
            p.incoming_high = value
            p.incoming_high_set = value
        elif self.which == F_INCOMING_LOW:
            p.incoming_low = value
            p.incoming_low_set = value
        elif self.which == F_OUTGOING_HIGH:
            p.outgoing_high = value
            p.outgoing_high_set = value
        else:
            p.outgoing_low = value
            p.outgoing_low_set = value


cdef TlsPath tls_path_of(object protocol, str name):
    """The TlsPath of a RingSSLProtocol; one made with __new__ alone has
    none, and has none of its attributes either."""
    path = getattr(protocol, '_ul_path', None)
    if path is None:
        raise AttributeError(f'{type(protocol).__name__!r} object has no attribute {name!r}')
    return <TlsPath>path


cdef TlsField tls_field(str name, int which):
    cdef TlsField field = TlsField.__new__(TlsField)
    field.name = name
    field.which = which
    return field


cdef int tls_do_read(object self, TlsPath path) except -1:
    if path.state is not TLS_WRAPPED and path.state is not TLS_FLUSHING:
        return 0
    try:
        if not path.app_reading_paused:
            if path.app_is_buffer:
                self._do_read__buffered()
            else:
                tls_read_copied(self, path)
            if path.backlog:
                tls_do_write(self, path)
            else:
                tls_process_outgoing(self, path)
        tls_control_ssl_reading(self, path)
    except Exception as ex:
        self._fatal_error(ex, 'Fatal error on SSL protocol')
    return 0


cdef int tls_read_copied(object self, TlsPath path) except -1:
    """Decrypt what the incoming BIO holds and hand it over in one
    data_received(); an empty read is the peer's close_notify."""
    if path.engine_raw:
        return tls_read_into_one(self, path)
    read = path.engine_read
    incoming = path.incoming
    cdef Py_ssize_t size = path.max_size
    chunk = b'1'
    first = None
    chunks = None
    try:
        while True:
            chunk = read(size)
            if not chunk:
                break
            if first is None:
                first = chunk
            elif chunks is None:
                chunks = [first, chunk]
            else:
                chunks.append(chunk)
            if not incoming.pending and not path.engine_pending():
                break       # a further read could only want more input
    except TLS_AGAIN:
        pass
    if chunks is not None:
        path.app_protocol.data_received(b''.join(chunks))
    elif first is not None:
        path.app_protocol.data_received(first)
    if not chunk:
        self._call_eof_received()
        self._start_shutdown()
    return 0


cdef int tls_read_into_one(object self, TlsPath path) except -1:
    """tls_read_copied() for a plain ssl.SSLObject, with no max_size bytes
    per record shrunk to what came and no join of them (a join per large
    read).  The first read asks
    for what can be there: the incoming BIO's records, and a record's
    worth (or max_size if less) for what OpenSSL holds that the BIO no
    longer counts -- the plaintext left of a record it decrypted, or else
    the first part of a record begun in an earlier read (it reads no
    further ahead: read-ahead is off).  A message of one record is that
    bytes.  When more is pending, the rest is decrypted straight into one
    bytes sized the same way, grown if that was short."""
    read = path.engine_read
    incoming = path.incoming
    cdef Py_ssize_t got = 0, n
    cdef Py_ssize_t margin = min(<Py_ssize_t>TLS_RECORD_MAX, path.max_size)
    if margin < 1:
        margin = 1
    cdef Py_ssize_t size = incoming.pending + margin
    cdef PyObject *raw = NULL
    cdef bint ended = False
    cdef object data = None
    try:
        data = read(min(size, <Py_ssize_t>TLS_READ_MAX))
        got = len(data)
        if got == 0:
            ended = True
        elif incoming.pending or path.engine_pending():
            size = got + incoming.pending + path.engine_pending() + margin
            raw = tls_bytes_new(NULL, size)
            memcpy(PyBytes_AS_STRING(<object>raw), PyBytes_AS_STRING(data), got)
            data = None
            while True:
                if got == size:
                    n = incoming.pending + path.engine_pending()
                    if n == 0:
                        break       # a further read could only want more input
                    size = got + n + margin
                    _PyBytes_Resize(&raw, size)
                n = min(size - got, <Py_ssize_t>TLS_READ_MAX)
                # the SSL object writes into the bytes, which nothing else
                # refers to yet; the view over its memory goes with the call
                n = read(n, PyMemoryView_FromMemory(PyBytes_AS_STRING(<object>raw) + got,
                                                    n, PyBUF_WRITE))
                if n == 0:
                    ended = True
                    break
                got += n
                if got < size and not incoming.pending and not path.engine_pending():
                    break           # as above
    except TLS_AGAIN:
        pass
    except BaseException:
        Py_XDECREF(raw)
        raise
    if raw != NULL:
        if got:
            ul_shrink_bytes(&raw, got, size)
            data = <object>raw
        Py_XDECREF(raw)
    if got:
        path.app_protocol.data_received(data)
    if ended:
        self._call_eof_received()
        self._start_shutdown()
    return 0


cdef int tls_control_ssl_reading(object self, TlsPath path) except -1:
    cdef Py_ssize_t size = path.incoming.pending
    if size >= path.incoming_high and not path.ssl_reading_paused:
        path.ssl_reading_paused = True
        path.transport.pause_reading()
    elif size <= path.incoming_low and path.ssl_reading_paused:
        path.ssl_reading_paused = False
        path.transport.resume_reading()
    return 0


cdef int tls_write_appdata(object self, TlsPath path, object list_of_data) except -1:
    state = path.state
    if state is TLS_FLUSHING or state is TLS_SHUTDOWN or state is TLS_UNWRAPPED:
        if path.conn_lost >= constants.LOG_THRESHOLD_FOR_CONNLOST_WRITES:
            logger.warning('SSL connection is closed')
        path.conn_lost += 1
        return 0
    for data in list_of_data:
        path.backlog_append(data)
        path.write_buffer_size += len(data)
    try:
        if state is TLS_WRAPPED:
            tls_do_write(self, path)
    except Exception as ex:
        self._fatal_error(ex, 'Fatal error on SSL protocol')
    return 0


cdef int tls_do_write(object self, TlsPath path) except -1:
    cdef Py_ssize_t count, length
    write = path.engine_write
    backlog = path.backlog
    try:
        while backlog:
            data = backlog[0]
            count = write(data)
            length = len(data)
            if count < length:
                backlog[0] = data[count:]
                path.write_buffer_size -= count
            else:
                path.backlog_popleft()
                path.write_buffer_size -= length
    except TLS_AGAIN:
        pass
    return tls_process_outgoing(self, path)


cdef int tls_process_outgoing(object self, TlsPath path) except -1:
    if path.outgoing.pending and not path.ssl_writing_paused:
        path.transport.write(path.outgoing_read())
    return tls_control_app_writing(self, path)


cdef int tls_control_app_writing(object self, TlsPath path) except -1:
    cdef Py_ssize_t size = path.outgoing.pending + path.write_buffer_size
    if path.app_writing_paused:
        if size <= path.outgoing_low:
            sslproto.SSLProtocol._control_app_writing(self)     # resume_writing()
    elif size >= path.outgoing_high:
        sslproto.SSLProtocol._control_app_writing(self)         # pause_writing()
    return 0


class RingSSLTransport(sslproto._SSLProtocolTransport):
    """The application's transport; write() compiled."""

    def write(self, data):
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"data: expecting a bytes-like instance, "
                            f"got {type(data).__name__}")
        if data:
            protocol = self._ssl_protocol
            path = getattr(protocol, '_ul_path', None)
            if path is None:
                # (None after a second close(): the stdlib's AttributeError)
                protocol._write_appdata((data,))
            else:
                tls_write_appdata(protocol, <TlsPath>path, (data,))


class RingSSLProtocol(sslproto.SSLProtocol):
    """asyncio's SSLProtocol with its data path compiled (see above).  The
    methods below are the stdlib's entries into that path, for its own
    code (handshake, shutdown, resume_reading) to call."""

    def __init__(self, *args, **kwargs):
        cdef TlsPath path = TlsPath.__new__(TlsPath)
        self._ul_path = path        # first: the stdlib's __init__ sets its fields
        sslproto.SSLProtocol.__init__(self, *args, **kwargs)
        path.incoming = self._incoming
        path.outgoing = self._outgoing
        engine = tls_engine(self._sslobj)
        path.backlog = self._write_backlog
        path.engine_read = engine.read
        path.engine_write = engine.write
        path.engine_pending = engine.pending
        path.engine_raw = engine is not self._sslobj
        path.incoming_write = path.incoming.write
        path.outgoing_read = path.outgoing.read
        path.backlog_append = path.backlog.append
        path.backlog_popleft = path.backlog.popleft
        path.max_size = self.max_size

    def _get_app_transport(self):
        if self._app_transport is None:
            if self._app_transport_created:
                raise RuntimeError('Creating _SSLProtocolTransport twice')
            self._app_transport = RingSSLTransport(self._loop, self)
            self._app_transport_created = True
        return self._app_transport

    def get_buffer(self, n):
        cdef TlsPath path = self._ul_path
        cdef Py_ssize_t want = n
        if want <= 0 or want > path.max_size:
            want = path.max_size
        if len(path.ssl_buffer) < want:
            path.ssl_buffer = bytearray(want)
            path.ssl_buffer_view = memoryview(path.ssl_buffer)
        return path.ssl_buffer_view

    def buffer_updated(self, nbytes):
        cdef TlsPath path = self._ul_path
        path.incoming_write(path.ssl_buffer_view[:nbytes])
        state = path.state
        if state is TLS_WRAPPED:
            tls_do_read(self, path)
        elif state is TLS_DO_HANDSHAKE:
            self._do_handshake()
        elif state is TLS_FLUSHING:
            self._do_flush()
        elif state is TLS_SHUTDOWN:
            self._do_shutdown()

    def _do_read(self):
        tls_do_read(self, self._ul_path)

    def _do_read__copied(self):
        tls_read_copied(self, self._ul_path)

    def _control_ssl_reading(self):
        tls_control_ssl_reading(self, self._ul_path)

    def _write_appdata(self, list_of_data):
        tls_write_appdata(self, self._ul_path, list_of_data)

    def _do_write(self):
        tls_do_write(self, self._ul_path)

    def _process_outgoing(self):
        tls_process_outgoing(self, self._ul_path)

    def _control_app_writing(self):
        tls_control_app_writing(self, self._ul_path)


for _name, _which in TLS_FIELDS.items():
    setattr(RingSSLProtocol, _name, tls_field(_name, _which))
del _name, _which


# The stdlib's start_tls() moves a server StreamReader's buffered bytes to
# the TLS protocol where it has the fix of gh-142352 (Debian's 3.14 and
# 3.15 have it; a bug fix that may reach other versions' later releases,
# so the code itself is asked).
cdef bint STDLIB_TLS_TAKES_STREAM_BUFFER = (
    '_stream_reader' in base_events.BaseEventLoop.start_tls.__code__.co_consts)


async def start_tls(self, transport, protocol, sslcontext, *, server_side=False,
                    server_hostname=None, ssl_handshake_timeout=None,
                    ssl_shutdown_timeout=None):
    """Upgrade transport to TLS and return the transport protocol should
    use from now on: BaseEventLoop.start_tls() (its checks, errors and
    steps, in its order) with RingSSLProtocol.  RingLoop takes it as its
    method."""
    if sslproto.ssl is None:
        raise RuntimeError('Python ssl module is not available')
    if not isinstance(sslcontext, sslproto.ssl.SSLContext):
        raise TypeError(f'sslcontext is expected to be an instance of '
                        f'ssl.SSLContext, got {sslcontext!r}')
    if not getattr(transport, '_start_tls_compatible', False):
        raise TypeError(f'transport {transport!r} is not supported by start_tls()')
    waiter = self.create_future()
    tls = RingSSLProtocol(self, protocol, sslcontext, waiter, server_side, server_hostname,
                          ssl_handshake_timeout=ssl_handshake_timeout,
                          ssl_shutdown_timeout=ssl_shutdown_timeout,
                          call_connection_made=False)
    # nothing may reach the TLS protocol before its connection_made()
    transport.pause_reading()
    if server_side and STDLIB_TLS_TAKES_STREAM_BUFFER:
        # what a server's StreamReader buffered (a ClientHello that came
        # with the plain data) goes to the TLS protocol, as there
        reader = (getattr(protocol, '_stream_reader', None)
                  if isinstance(protocol, asyncio.StreamReaderProtocol) else None)
        if reader is not None and reader._buffer:
            tls._incoming.write(reader._buffer)
            reader._buffer.clear()
    transport.set_protocol(tls)
    made = self.call_soon(tls.connection_made, transport)
    resumed = self.call_soon(transport.resume_reading)
    try:
        await waiter
    except BaseException:
        transport.close()
        made.cancel()
        resumed.cancel()
        raise
    return tls._app_transport
