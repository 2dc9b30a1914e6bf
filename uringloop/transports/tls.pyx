# TLS over the ring's stream transports: asyncio's own SSLProtocol, with
# the path every record of an established connection takes compiled here.
# Included by core.pyx.
#
# The stdlib's SSLProtocol is Python: a 1 KiB TLS echo ran some 30 of its
# functions per request (buffer_updated, _do_read, _do_read__copied, two
# SSLObject.read()s, the second only to be told SSLWantReadError, which
# _ssl builds with a formatted message, _write_appdata, _do_write,
# _process_outgoing twice, the flow-control checks, ...), and 57% of the
# server's user CPU was the interpreter (perf record -e cpu-clock:u,
# bench/run_tls.py's 1 KiB cell; uvloop, whose SSL protocol is compiled,
# spent 0.56x our user CPU per request).
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
#     them, and Python turns read-ahead off).
# The steps call each other as C functions, and what the stdlib never
# replaces after __init__ (the two memory BIOs, the SSL object, the write
# backlog) is held in C fields of a TlsPath; the rest of the state stays in
# the stdlib's attributes, which its own methods read and write.  (With the
# steps as methods, attribute and method lookups on the protocol were a
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


cdef object tls_engine(object sslobj):
    """What to call read/write/pending on: the _ssl object behind a plain
    ssl.SSLObject, or the object itself when its class overrides them."""
    if type(sslobj) is SSL_OBJECT:
        return sslobj._sslobj
    return sslobj


@cython.final
cdef class TlsPath:
    """The parts of an SSLProtocol fixed from its __init__ on."""
    cdef object incoming        # ssl.MemoryBIO: records from the peer
    cdef object outgoing        # ssl.MemoryBIO: records for the peer
    cdef object engine          # what reads and writes (tls_engine)
    cdef object backlog         # the deque of application data to encrypt


cdef TlsPath new_tls_path(object protocol):
    cdef TlsPath path = TlsPath.__new__(TlsPath)
    path.incoming = protocol._incoming
    path.outgoing = protocol._outgoing
    path.engine = tls_engine(protocol._sslobj)
    path.backlog = protocol._write_backlog
    return path


cdef int tls_do_read(object self, TlsPath path) except -1:
    state = self._state
    if state is not TLS_WRAPPED and state is not TLS_FLUSHING:
        return 0
    try:
        if not self._app_reading_paused:
            if self._app_protocol_is_buffer:
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
    engine = path.engine
    incoming = path.incoming
    size = self.max_size
    chunk = b'1'
    first = None
    chunks = None
    try:
        while True:
            chunk = engine.read(size)
            if not chunk:
                break
            if first is None:
                first = chunk
            elif chunks is None:
                chunks = [first, chunk]
            else:
                chunks.append(chunk)
            if not incoming.pending and not engine.pending():
                break       # a further read could only want more input
    except TLS_AGAIN:
        pass
    if chunks is not None:
        self._app_protocol.data_received(b''.join(chunks))
    elif first is not None:
        self._app_protocol.data_received(first)
    if not chunk:
        self._call_eof_received()
        self._start_shutdown()
    return 0


cdef int tls_control_ssl_reading(object self, TlsPath path) except -1:
    cdef Py_ssize_t size = path.incoming.pending
    if size >= self._incoming_high_water and not self._ssl_reading_paused:
        self._ssl_reading_paused = True
        self._transport.pause_reading()
    elif size <= self._incoming_low_water and self._ssl_reading_paused:
        self._ssl_reading_paused = False
        self._transport.resume_reading()
    return 0


cdef int tls_write_appdata(object self, TlsPath path, object list_of_data) except -1:
    state = self._state
    if state is TLS_FLUSHING or state is TLS_SHUTDOWN or state is TLS_UNWRAPPED:
        if self._conn_lost >= constants.LOG_THRESHOLD_FOR_CONNLOST_WRITES:
            logger.warning('SSL connection is closed')
        self._conn_lost += 1
        return 0
    for data in list_of_data:
        path.backlog.append(data)
        self._write_buffer_size += len(data)
    try:
        if state is TLS_WRAPPED:
            tls_do_write(self, path)
    except Exception as ex:
        self._fatal_error(ex, 'Fatal error on SSL protocol')
    return 0


cdef int tls_do_write(object self, TlsPath path) except -1:
    cdef Py_ssize_t count, length
    engine = path.engine
    backlog = path.backlog
    try:
        while backlog:
            data = backlog[0]
            count = engine.write(data)
            length = len(data)
            if count < length:
                backlog[0] = data[count:]
                self._write_buffer_size -= count
            else:
                backlog.popleft()
                self._write_buffer_size -= length
    except TLS_AGAIN:
        pass
    return tls_process_outgoing(self, path)


cdef int tls_process_outgoing(object self, TlsPath path) except -1:
    if path.outgoing.pending and not self._ssl_writing_paused:
        self._transport.write(path.outgoing.read())
    return tls_control_app_writing(self, path)


cdef int tls_control_app_writing(object self, TlsPath path) except -1:
    cdef Py_ssize_t size = path.outgoing.pending + self._write_buffer_size
    if self._app_writing_paused:
        if size <= self._outgoing_low_water:
            sslproto.SSLProtocol._control_app_writing(self)     # resume_writing()
    elif size >= self._outgoing_high_water:
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
        sslproto.SSLProtocol.__init__(self, *args, **kwargs)
        self._ul_path = new_tls_path(self)

    def _get_app_transport(self):
        if self._app_transport is None:
            if self._app_transport_created:
                raise RuntimeError('Creating _SSLProtocolTransport twice')
            self._app_transport = RingSSLTransport(self._loop, self)
            self._app_transport_created = True
        return self._app_transport

    def get_buffer(self, n):
        cdef Py_ssize_t want = n
        if want <= 0 or want > self.max_size:
            want = self.max_size
        if len(self._ssl_buffer) < want:
            self._ssl_buffer = bytearray(want)
            self._ssl_buffer_view = memoryview(self._ssl_buffer)
        return self._ssl_buffer_view

    def buffer_updated(self, nbytes):
        cdef TlsPath path = self._ul_path
        path.incoming.write(self._ssl_buffer_view[:nbytes])
        state = self._state
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
