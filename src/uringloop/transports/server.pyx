# Listening sockets: the loop waits for a connection with a POLL_ADD on the
# socket, then takes the connections that are queued with accept4(2), as
# the selector loop does on a readiness event; each becomes a fresh
# protocol and stream transport.
#
# Why not IORING_OP_ACCEPT: a listening socket shared by several processes
# (gunicorn -w N, forking servers, a socket passed by systemd) must spread
# its connections over them, and a process that is busy must leave them to
# one that is not.  The loop cannot tell whether a socket is shared, so it
# always behaves as if it were.  ACCEPT waits on the socket as an
# *exclusive* waiter (its opdef is poll_exclusive): a new connection wakes
# one waiter only, and under DEFER_TASKRUN that waiter's process accepts
# only when it next enters the ring.  So:
# - backlog-many ACCEPTs in flight filled the head of the wait queue: 64
#   simultaneous connections all went to one of two gunicorn workers, and
#   a worker took connections however busy it was (bench/run_gunicorn.py);
#   a multishot ACCEPT keeps the head for good;
# - even one ACCEPT in flight, armed again after each connection (the
#   processes take turns), fails when a worker's loop is held by a blocking
#   handler: the next connection wakes that worker's ACCEPT, nobody else,
#   and waits in the queue until the worker runs again (tests/
#   test_ecosystem.py, ..._a_blocked_worker_leaves_new_connections_...).
# A POLL_ADD waits as a plain waiter: every process waiting on the socket
# is woken, as with epoll, and whichever runs first takes the connection;
# the others find the queue empty (EAGAIN) and wait again.
#
# After a wake-up the loop takes up to `burst` connections with accept4(2)
# -- the backlog, as the selector loop does -- and then arms the poll
# again, or, when the whole burst was taken and more may be queued,
# accepts again in the next iteration as the selector loop does (a poll
# would complete at once, but post behind every completion waiting).  For
# the same reason, when the completion queue has overflowed the loop has
# each armed listener take its queued connections before it dispatches
# anything (take_overflowed()).  The burst
# is what keeps a burst of connects alive: a full accept queue makes the
# kernel answer further SYNs with SYN cookies, and a cookie's connection is
# reset when its ACK finds the queue still full.  300 clients connecting
# at once to a backlog of 100, each echoing 30 messages of up to 100 KB
# (tests/test_contract_edges.py, the burst test): 4 accepts per wake-up
# left 4-62 of 300 reset in every run (TcpExtSyncookiesFailed equal to the
# resets); the backlog per wake-up, 0 in every run, as on the selector
# loop.  An earlier limit of 4 had been chosen to spread a burst over
# processes that share a socket; that is the job of SO_REUSEPORT
# (gunicorn --reuse-port, uringloop/gunicorn.py), and never worth a reset.
# On one shared socket, whichever process runs first takes a burst, as
# with epoll and the selector loop.

# What an accepted connection costs the loop is kept out of Python where
# asyncio's helpers would run (docs/benchmarks.md, "Behind the comments"):
# the listener's family and type are read once, TCP_NODELAY is set with
# setsockopt(2), whether the peer is local is decided with inet_pton(3)
# instead of the ipaddress module, and the sockname tuple is reused while
# getsockname(2) returns the same address.
#
# Stopping (Server.close(), loop.close()) cancels the poll by user_data
# and hands the cancel to the kernel at once; the same io_uring_enter runs
# the deferred completion, which drops the request's reference to the
# listening file, and then the socket is closed, before close() returns, as
# the stdlib does: a connect() right after server.close() is refused.  The
# socket is never shut down: shutdown(SHUT_RD) on a listening socket tears
# down its accept queue for every process that shares it (gunicorn -w N, a
# socket passed by systemd), and they would refuse connections too.


@cython.final
cdef class ServerAccept(Operation):
    # One POLL_ADD in flight at most (in_flight).
    cdef object sock
    cdef int fd
    cdef int family, type, proto      # the listening socket's, as ints
    # the sockname of the last connection, raw and as Python has it: the
    # connections of one listener mostly share it (see names_of)
    cdef sockaddr_storage local_raw
    cdef socklen_t local_len
    cdef object local_name
    # the host of the last IPv4 peer, raw and as Python has it: most
    # connections come from few hosts (see names_of)
    cdef uint32_t peer_addr
    # the peer's address as accept4(2) gave it, for the connection being
    # served (names_of); peer_len 0 when it gave none
    cdef sockaddr_storage peer_raw
    cdef socklen_t peer_len
    cdef object peer_host
    cdef object protocol_factory
    cdef object sslcontext
    cdef object server
    cdef object ssl_handshake_timeout
    cdef object ssl_shutdown_timeout
    cdef bint active
    cdef int burst                   # accept4() calls per wake-up, at most:
                                     # the backlog, as the selector loop's
    cdef bint backing_off            # out of fds: waiting to try again
    cdef bint again                  # a burst ended with connections left:
                                     # the next is a callback, not a poll

    cdef int arm(self) except -1:
        cdef io_uring_sqe *sqe
        if self.active and not self.backing_off and self.life == OP_IDLE and not self.again:
            sqe = self.loop.sqe_for(self)
            ul_prep_poll_add(sqe, self.fd, POLLIN)
        return 0

    cdef int stop(self) except -1:
        """Cancel the poll in flight and close the listening socket now
        (see the top of this file)."""
        self.active = False
        if self.life != OP_IDLE and not self.loop.draining:
            self.loop.cancel_op(self)
            # The cancelled poll holds the listening file until its
            # deferred completion has run (its CQE waits in the CQ for the
            # next reap).
            self.loop.hand_over_now()
        self.sock.close()
        return 0

    cdef int complete(self, int32_t res, uint32_t flags) except -1:
        try:
            if res < 0:
                if res != -ECANCELED:
                    self.accept_failed(res)
                return 0
            self.take_burst()
        finally:
            self.arm()      # whatever accepted() raised, the server goes on
        return 0

    cdef int take_burst(self) except -1:
        cdef int fd
        cdef int n
        for n in range(self.burst):
            if not self.active or self.backing_off:
                break
            self.peer_len = sizeof(self.peer_raw)
            fd = accept4(self.fd, <sockaddr *>&self.peer_raw, &self.peer_len,
                         SOCK_NONBLOCK | SOCK_CLOEXEC)
            if fd < 0:
                if errno == EINTR:
                    continue
                if errno != EAGAIN:
                    self.accept_failed(-errno)
                break       # EAGAIN: another process took it, or none left
            self.accepted(fd)
        else:
            # The whole burst taken and the queue perhaps not empty:
            # accept again in the next iteration, as the selector loop
            # does for a socket still readable.  A poll armed now would
            # complete at once but post behind every completion already
            # waiting; with a completion queue of a few entries those
            # are many, and connections answered with SYN cookies meet
            # a full accept queue meanwhile and are reset (issue #58,
            # item 7).
            if self.active and not self.backing_off:
                self.again = True
                self.loop.call_soon(self._accept_again, context=self.context)
        return 0

    cdef int take_overflowed(self) except -1:
        """The completion queue overflowed: this listener's readiness may
        wait in the kernel's overflow list behind many others, while its
        accept queue fills.  Take what is queued now, in the server's
        context, as a completion would (the poll stays armed)."""
        cdef bint entered
        if not self.active or self.backing_off or self.again or self.life == OP_IDLE:
            return 0
        context = self.context
        entered = enter_context(context)
        try:
            self.take_burst()
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self.loop.completion_failed(self, exc)
        finally:
            if entered:
                PyContext_Exit(context)
        return 0

    def _accept_again(self):
        self.again = False
        if self.active and not self.backing_off and self.life == OP_IDLE:
            self.complete(POLLIN, 0)

    cdef int accept_failed(self, int res) except -1:
        if not self.active or self.backing_off:
            return 0
        if res in (-ECONNABORTED, -EPROTO, -EPERM, -ENETDOWN, -ENETUNREACH,
                   -EHOSTDOWN, -EHOSTUNREACH, -ENOPROTOOPT, -EOPNOTSUPP, -ENONET):
            return 0        # that connection's own error (accept(2)): go on
        if res in (-EMFILE, -ENFILE, -ENOBUFS, -ENOMEM):
            # Out of descriptors or memory: as the selector loop does,
            # say so and try again a little later.
            message = 'socket.accept() out of system resource'
        else:
            # (EINVAL: no longer listening...) the selector loop's reader
            # would fail again at each iteration; say so once a second
            message = 'Error on accepting connections'
        self.loop.call_exception_handler({
            'message': message,
            'exception': convert_error(res),
            'socket': trsock.TransportSocket(self.sock),
        })
        self.backing_off = True
        self.loop.call_later(constants.ACCEPT_RETRY_DELAY, self._rearm)
        return 0

    def _rearm(self):
        self.backing_off = False
        if self.active and self.loop.ring.open:
            self.arm()

    cdef int accepted(self, int fd) except -1:
        try:
            conn = new_socket_object(self.family, self.type, self.proto, fd)
        except OSError:
            close(fd)
            raise
        return serve_accepted(self.loop, self, conn, fd)

    cdef tuple names_of(self, int fd, object conn):
        """(sockname, peername) of an accepted connection.  Its sockname is
        most often the last one's (one local address): then the tuple made
        for that one is used again, and only getsockname(2) runs.  An IPv4
        peer's host string is reused while the host is the last one's (the
        socket module formats it with inet_ntop(3), a printf, each time)."""
        cdef sockaddr_storage raw
        cdef socklen_t n = sizeof(raw)
        cdef sockaddr_in *peer
        if getsockname(fd, <sockaddr *>&raw, &n) < 0:
            sockname = None
        elif (self.local_name is not None and n == self.local_len
                and memcmp(&raw, &self.local_raw, n) == 0):
            sockname = self.local_name
        else:
            try:
                sockname = conn.getsockname()
            except OSError:
                sockname = None
            else:
                memcpy(&self.local_raw, &raw, n)
                self.local_len = n
                self.local_name = sockname
        # an IPv4 peer's name from the address accept4(2) gave, as the
        # stdlib's accept() gives it (no getpeername(2)); others as before
        if self.peer_len == sizeof(sockaddr_in) and self.peer_raw.ss_family == AF_INET:
            peer = <sockaddr_in *>&self.peer_raw
            if self.peer_host is not None and peer.sin_addr.s_addr == self.peer_addr:
                peername = (self.peer_host, ntohs(peer.sin_port))
            else:
                peername = peer_name(conn)
                if peername is not None:
                    self.peer_host = peername[0]
                    self.peer_addr = peer.sin_addr.s_addr
        else:
            peername = peer_name(conn)
        return (sockname, peername)


cdef int serve_accepted(RingLoop loop, ServerAccept op, object conn, int fd) except -1:
    """A new protocol and transport for an accepted connection (conn, whose
    fd is fd), made in a copy of the server's context (dispatch() entered
    that): the connection's own, as the selector loop gives each one (its
    accept task's context; on 3.15 the copy it hands the transport), so
    what protocol_factory() sets is seen by that connection's callbacks
    and not by the next connection's."""
    names = op.names_of(fd, conn)
    context = PyContext_CopyCurrent()
    if op.sslcontext is not None:
        loop.create_task(loop._accept_connection2(
            op.protocol_factory, conn, {'peername': names[1]}, op.sslcontext, op.server,
            op.ssl_handshake_timeout, op.ssl_shutdown_timeout, listener=op.sock,
            context=context), context=context)
        return 0
    try:
        PyContext_Enter(context)
        try:
            protocol = op.protocol_factory()
        finally:
            PyContext_Exit(context)
        new_stream_transport(loop, conn, protocol, None, None, op.server, op.sock,
                             op.family, op.type, names, fd, op.proto, context)
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as exc:
        conn.close()
        if loop._debug:
            loop.call_exception_handler({
                'message': 'Error on transport creation for incoming connection',
                'exception': exc,
            })
    return 0


# ---- the loop's methods for servers (RingLoop takes them as they are) ----

def _start_serving(RingLoop self, protocol_factory, sock, sslcontext=None,
                   server=None, backlog=100,
                   ssl_handshake_timeout=constants.SSL_HANDSHAKE_TIMEOUT,
                   ssl_shutdown_timeout=constants.SSL_SHUTDOWN_TIMEOUT, context=None):
    cdef ServerAccept op
    fd = sock.fileno()
    if fd in self.accepting:
        return
    op = ServerAccept.__new__(ServerAccept)
    op.loop = self
    # accepted connections are made -- protocol_factory() called, the
    # transport's context copied -- in copies of the server's context
    # (CPython 3.15 passes it: the one current when the Server was made) or
    # else of the context current here, as by the selector loop's reader
    # handle
    op.context = context if context is not None else PyContext_CopyCurrent()
    op.sock = sock
    op.fd = fd
    op.family = socket_family(sock)
    op.type = socket_type(sock)
    op.proto = sock.proto
    op.protocol_factory = protocol_factory
    op.sslcontext = sslcontext
    op.server = server
    op.ssl_handshake_timeout = ssl_handshake_timeout
    op.ssl_shutdown_timeout = ssl_shutdown_timeout
    op.active = True
    # as many accepts per wake-up as the backlog (transports/server.pyx)
    op.burst = max(1, min(backlog, 0x7fffffff))
    self.accepting[fd] = op
    op.arm()


def _stop_serving(RingLoop self, sock):
    """Stop accepting on sock and close it now (ServerAccept.stop); a Unix
    socket's file goes too where create_unix_server() was asked
    (cleanup_socket)."""
    path = None
    if sock in self.__dict__.get('_unix_server_sockets', ()):
        path = sock.getsockname()
    try:
        stop_serving(self, sock)
    finally:
        if path is not None:
            unlink_unix_server_socket(self, sock, path)


cdef int stop_serving(RingLoop self, object sock) except -1:
    cdef ServerAccept op = self.accepting.pop(sock.fileno(), None)
    if op is None:
        self.remove_reader(sock)
        sock.close()
        return 0
    op.stop()
    return 0


async def _accept_connection2(RingLoop self, protocol_factory, conn, extra,
                              sslcontext=None, server=None,
                              ssl_handshake_timeout=constants.SSL_HANDSHAKE_TIMEOUT,
                              ssl_shutdown_timeout=constants.SSL_SHUTDOWN_TIMEOUT,
                              listener=None, context=None):
    protocol = None
    transport = None
    try:
        protocol = protocol_factory()
        waiter = self.create_future()
        transport = self._make_ssl_transport(
            conn, protocol, sslcontext, waiter=waiter, server_side=True,
            extra=extra, server=server,
            ssl_handshake_timeout=ssl_handshake_timeout,
            ssl_shutdown_timeout=ssl_shutdown_timeout, listener=listener,
            context=context)
        try:
            await waiter
        except BaseException:
            transport.close()
            raise
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as exc:
        if self._debug:
            report = {
                'message': 'Error on transport creation for incoming connection',
                'exception': exc,
            }
            if protocol is not None:
                report['protocol'] = protocol
            if transport is not None:
                report['transport'] = transport
            self.call_exception_handler(report)
