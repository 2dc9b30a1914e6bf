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
# The class is what loop.create_connection/create_server(ssl=...) use
# (_make_ssl_transport).  start_tls() keeps the stdlib's class: it is
# BaseEventLoop's and names sslproto.SSLProtocol itself.

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


class RingSSLTransport(sslproto._SSLProtocolTransport):
    """The application's transport; write() compiled."""

    def write(self, data):
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"data: expecting a bytes-like instance, "
                            f"got {type(data).__name__}")
        if data:
            self._ssl_protocol._write_appdata((data,))


class RingSSLProtocol(sslproto.SSLProtocol):
    """asyncio's SSLProtocol with its data path compiled (see above)."""

    def _get_app_transport(self):
        if self._app_transport is None:
            if self._app_transport_created:
                raise RuntimeError('Creating _SSLProtocolTransport twice')
            self._app_transport = RingSSLTransport(self._loop, self)
            self._app_transport_created = True
        return self._app_transport

    # -- records arriving

    def get_buffer(self, n):
        cdef Py_ssize_t want = n
        if want <= 0 or want > self.max_size:
            want = self.max_size
        if len(self._ssl_buffer) < want:
            self._ssl_buffer = bytearray(want)
            self._ssl_buffer_view = memoryview(self._ssl_buffer)
        return self._ssl_buffer_view

    def buffer_updated(self, nbytes):
        self._incoming.write(self._ssl_buffer_view[:nbytes])
        state = self._state
        if state is TLS_WRAPPED:
            self._do_read()
        elif state is TLS_DO_HANDSHAKE:
            self._do_handshake()
        elif state is TLS_FLUSHING:
            self._do_flush()
        elif state is TLS_SHUTDOWN:
            self._do_shutdown()

    def _do_read(self):
        state = self._state
        if state is not TLS_WRAPPED and state is not TLS_FLUSHING:
            return
        try:
            if not self._app_reading_paused:
                if self._app_protocol_is_buffer:
                    self._do_read__buffered()
                else:
                    self._do_read__copied()
                if self._write_backlog:
                    self._do_write()
                else:
                    self._process_outgoing()
            self._control_ssl_reading()
        except Exception as ex:
            self._fatal_error(ex, 'Fatal error on SSL protocol')

    def _do_read__copied(self):
        """Decrypt what the incoming BIO holds and hand it over in one
        data_received(); an empty read is the peer's close_notify."""
        engine = tls_engine(self._sslobj)
        incoming = self._incoming
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

    def _control_ssl_reading(self):
        cdef Py_ssize_t size = self._incoming.pending
        if size >= self._incoming_high_water and not self._ssl_reading_paused:
            self._ssl_reading_paused = True
            self._transport.pause_reading()
        elif size <= self._incoming_low_water and self._ssl_reading_paused:
            self._ssl_reading_paused = False
            self._transport.resume_reading()

    # -- application data leaving

    def _write_appdata(self, list_of_data):
        state = self._state
        if state is TLS_FLUSHING or state is TLS_SHUTDOWN or state is TLS_UNWRAPPED:
            if self._conn_lost >= constants.LOG_THRESHOLD_FOR_CONNLOST_WRITES:
                logger.warning('SSL connection is closed')
            self._conn_lost += 1
            return
        backlog = self._write_backlog
        for data in list_of_data:
            backlog.append(data)
            self._write_buffer_size += len(data)
        try:
            if state is TLS_WRAPPED:
                self._do_write()
        except Exception as ex:
            self._fatal_error(ex, 'Fatal error on SSL protocol')

    def _do_write(self):
        cdef Py_ssize_t count, length, left = self._write_buffer_size
        engine = tls_engine(self._sslobj)
        backlog = self._write_backlog
        try:
            while backlog:
                data = backlog[0]
                count = engine.write(data)
                length = len(data)
                if count < length:
                    backlog[0] = data[count:]
                    left -= count
                else:
                    backlog.popleft()
                    left -= length
                self._write_buffer_size = left
        except TLS_AGAIN:
            pass
        self._process_outgoing()

    def _process_outgoing(self):
        if not self._ssl_writing_paused:
            data = self._outgoing.read()
            if data:
                self._transport.write(data)
        self._control_app_writing()

    def _control_app_writing(self):
        cdef Py_ssize_t size = self._outgoing.pending + self._write_buffer_size
        if ((size >= self._outgoing_high_water and not self._app_writing_paused)
                or (size <= self._outgoing_low_water and self._app_writing_paused)):
            # a pause or resume to call: the stdlib's, with its error handling
            sslproto.SSLProtocol._control_app_writing(self)
