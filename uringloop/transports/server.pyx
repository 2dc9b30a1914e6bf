# Listening sockets: an ACCEPT request per socket, each completion a new
# connection handed to a fresh protocol and stream transport.
#
# A listening socket shared by several processes (gunicorn -w N, forking
# servers) must spread its connections over them.  A multishot ACCEPT keeps
# its place at the head of the socket's wait queue, so one process would take
# every connection (seen: gunicorn -w 2, 300 requests, all to one worker).
# A single-shot ACCEPT, armed again after each connection, goes to the tail
# and the processes take turns.  The loop cannot tell whether a socket is
# shared (create_server(sock=...), or made before a fork), so it always uses
# single-shot ACCEPTs, as many in flight as the listen backlog, so that a
# burst of connections is taken in one iteration as the selector loop does
# (it accepts up to `backlog` per readiness event); with fewer, 300
# simultaneous connects to a backlog of 100 overflowed the accept queue and
# some clients were reset.
#
# Stopping (Server.close(), loop.close()) cancels the ACCEPTs by user_data
# and hands the cancel to the kernel at once; the same io_uring_enter runs
# the deferred completions, which drop the requests' references to the
# listening file, and then the socket is closed, before close() returns, as
# the stdlib does: a connect() right after server.close() is refused.  The
# socket is never shut down: shutdown(SHUT_RD) on a listening socket tears
# down its accept queue for every process that shares it (gunicorn -w N, a
# socket passed by systemd), and they would refuse connections too.


cdef int MAX_ACCEPT_DEPTH = 256  # single-shot ACCEPTs in flight per socket, at most


@cython.final
cdef class ServerAccept(Operation):
    # `depth` requests (the listen backlog, at most MAX_ACCEPT_DEPTH) share
    # this object as their user_data: `pending` counts them
    # (Operation.in_flight only says "at least one").
    cdef object sock
    cdef int fd
    cdef object protocol_factory
    cdef object sslcontext
    cdef object server
    cdef object ssl_handshake_timeout
    cdef object ssl_shutdown_timeout
    cdef bint active
    cdef int pending
    cdef int depth
    cdef bint backing_off            # out of fds: waiting to try again

    cdef int arm(self) except -1:
        cdef io_uring_sqe *sqe
        while self.active and not self.backing_off and self.pending < self.depth:
            sqe = self.loop.sqe_for(self)
            ul_prep_accept(sqe, self.fd, NULL, NULL,
                           socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC)
            self.pending += 1
        return 0

    cdef int stop(self) except -1:
        """Cancel the ACCEPTs in flight and close the listening socket now
        (see the top of this file)."""
        cdef io_uring_sqe *sqe
        self.active = False
        if self.pending and self.loop.ring_open and not self.loop.draining:
            sqe = self.loop.sqe_for(None)
            ul_prep_cancel(sqe, <uint64_t><uintptr_t><PyObject *>self,
                           IORING_ASYNC_CANCEL_ALL)
            ul_sqe_set_flags(sqe, IOSQE_CQE_SKIP_SUCCESS)
            try:
                # An enter runs a bounded batch of deferred completions
                # (DEFER_TASKRUN: about 20 since Linux 6.13), and each
                # cancelled ACCEPT holds the listening file until its own
                # has run: enter until the kernel has none left (bounded;
                # the CQEs wait in the CQ for the next reap).
                for _ in range(2 + self.depth // 8):
                    self.loop.submit_pending()
                    if not ul_sq_taskrun(&self.loop.ring):
                        break
            except (RuntimeError, OSError):
                pass    # another thread owns the ring: the next enter does it
        self.sock.close()
        return 0

    cdef int complete(self, int32_t res, uint32_t flags) except -1:
        self.pending -= 1
        if res >= 0:
            # (also after stop(): a connection the kernel accepted as the
            # cancel went in is served, not dropped -- with a shared socket
            # no other process could have it any more)
            self.loop._accepted(self, res)
        elif res != -ECANCELED and self.active and not self.backing_off:
            if res in (-EMFILE, -ENFILE, -ENOBUFS, -ENOMEM):
                # Out of descriptors or memory: as the selector loop does,
                # say so and try again a little later.
                self.loop.call_exception_handler({
                    'message': 'socket.accept() out of system resource',
                    'exception': convert_error(res),
                    'socket': trsock.TransportSocket(self.sock),
                })
                self.backing_off = True
                self.loop.call_later(constants.ACCEPT_RETRY_DELAY, self._rearm)
        self.arm()
        return 0

    cdef int drained(self, int32_t res, uint32_t flags) except -1:
        self.pending -= 1
        if res >= 0:
            close(res)          # accepted as the loop closed: nobody serves it
        return 0

    def _rearm(self):
        self.backing_off = False
        if self.active and self.loop.ring_open:
            self.arm()

    def _accepted_conn(self, int fd):
        sock = self.sock
        return socket.socket(sock.family, sock.type, sock.proto, fileno=fd)
