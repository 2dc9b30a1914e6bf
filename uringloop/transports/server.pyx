# Listening sockets: one multishot ACCEPT per socket (5.19), each completion
# a new connection handed to a fresh protocol and stream transport.


@cython.final
cdef class ServerAccept(Operation):
    cdef object sock
    cdef int fd
    cdef object protocol_factory
    cdef object sslcontext
    cdef object server
    cdef object ssl_handshake_timeout
    cdef object ssl_shutdown_timeout
    cdef bint active
    cdef bint close_when_done

    cdef int arm(self) except -1:
        cdef io_uring_sqe *sqe
        if self.in_flight or not self.active:
            return 0
        sqe = self.loop.sqe_for(self)
        ul_prep_multishot_accept(sqe, self.fd, NULL, NULL,
                                 socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC)
        return 0

    cdef int stop(self) except -1:
        self.active = False
        if self.in_flight:
            self.close_when_done = True
            self.loop.cancel_op(self)
        else:
            self.sock.close()
        return 0

    cdef int complete(self, int32_t res, uint32_t flags) except -1:
        cdef bint final = (flags & IORING_CQE_F_MORE) == 0
        if res >= 0:
            if self.active:
                self.loop._accepted(self, res)
            else:
                close(res)
        elif res != -ECANCELED and self.active:
            if res in (-EMFILE, -ENFILE, -ENOBUFS, -ENOMEM):
                # Out of descriptors or memory: as the selector loop does,
                # say so and try again a little later.
                self.loop.call_exception_handler({
                    'message': 'socket.accept() out of system resource',
                    'exception': convert_error(res),
                    'socket': trsock.TransportSocket(self.sock),
                })
                if final:
                    self.loop.call_later(constants.ACCEPT_RETRY_DELAY, self._rearm)
                    return 0
        if final:
            if self.close_when_done:
                self.close_when_done = False
                self.sock.close()
            else:
                self.arm()
        return 0

    def _rearm(self):
        if self.active and self.loop.ring_open:
            self.arm()

    def _accepted_conn(self, int fd):
        sock = self.sock
        return socket.socket(sock.family, sock.type, sock.proto, fileno=fd)
