# The sock_* operations: one Operation subclass per io_uring request kind.
# Included by core.pyx.
#
# Receives, accepts and connects are not requests of their own: the loop
# makes the socket module's call, and only when it would block waits for
# readiness with a SocketPoll, then calls again (sock_recv and the
# others).  A RECV or ACCEPT in the ring takes the bytes or the connection
# before the task that asked for them resumes; if that task is cancelled
# meanwhile, they exist only in the loop, and nobody else using the socket
# -- a plain recv(), ssl.wrap_socket(), another process -- gets them (0 of
# 200 streams intact, where the stdlib leaves every byte in the socket).
# A poll takes nothing: a cancel at any await leaves the socket as it was.

cdef extern from "<sys/socket.h>":
    int MSG_NOSIGNAL
    int MSG_TRUNC
    int MSG_DONTWAIT
    ssize_t c_send "send" (int fd, const void *buf, size_t len, int flags)
    ssize_t c_sendto "sendto" (int fd, const void *buf, size_t len, int flags,
                               const sockaddr *addr, socklen_t addrlen)


cdef int sockaddr_from_py(int family, object address, sockaddr_storage *out) except -1:
    """Fill `out` from a Python socket address; return its length.  Hosts
    must be numeric (resolve first)."""
    cdef int n
    cdef bytes path, host
    if family == socket.AF_UNIX:
        if isinstance(address, str):
            path = os.fsencode(address)
        elif isinstance(address, (bytes, bytearray, memoryview)):
            path = bytes(address)
        else:
            raise TypeError(f"a bytes-like object or str is required for an "
                            f"AF_UNIX address, not {type(address).__name__}")
        n = ul_sockaddr_unix(out, path, len(path))
        if n < 0:
            raise OSError(_errno.EINVAL, "AF_UNIX path too long")
        return n
    if family == socket.AF_INET or family == socket.AF_INET6:
        if not isinstance(address, tuple):
            raise TypeError(f"{'AF_INET' if family == socket.AF_INET else 'AF_INET6'}"
                            f" address must be tuple, not {type(address).__name__}")
        if family == socket.AF_INET and len(address) != 2:
            raise TypeError("AF_INET address must be a pair (host, port)")
        if family == socket.AF_INET6 and not 2 <= len(address) <= 4:
            raise TypeError("AF_INET6 address must be a tuple (host, port[, flowinfo[, scopeid]])")
        host_obj, port = address[0], address[1]
        if not isinstance(host_obj, str):
            raise TypeError(f"str, bytes or bytearray expected, not {type(host_obj).__name__}")
        port = PyNumber_Index(port)
        if not 0 <= port <= 65535:
            raise OverflowError("port must be 0-65535.")
        host = host_obj.encode('idna')
        if family == socket.AF_INET:
            n = ul_sockaddr_inet4(out, host, port)
        else:
            flowinfo = address[2] if len(address) > 2 else 0
            scope_id = address[3] if len(address) > 3 else 0
            if '%' in host_obj:
                # "fe80::1%eth0": the zone names the scope
                host_obj, zone = host_obj.split('%', 1)
                host = host_obj.encode('idna')
                scope_id = socket.if_nametoindex(zone) if not zone.isdigit() else int(zone)
            n = ul_sockaddr_inet6(out, host, port, flowinfo, scope_id)
        if n < 0:
            raise socket.gaierror(socket.EAI_NONAME, f"not a numeric address: {host_obj!r}")
        return n
    raw = other_sockaddr_from_py(family, address)
    memcpy(out, <char *>raw, len(raw))
    return len(raw)


# Netlink and packet sockets are datagram families people drive from
# asyncio (pyroute2-style netlink clients, raw packet tools); their
# addresses are encoded here as the socket module encodes them.  Other
# families are left to the socket module's own calls (sock_sendto and
# sock_recvfrom* fall back to them; see RingLoop._sock_call_fallback).
AF_NETLINK = getattr(socket, 'AF_NETLINK', 16)
AF_PACKET = getattr(socket, 'AF_PACKET', 17)
ENCODED_FAMILIES = frozenset((socket.AF_INET, socket.AF_INET6, socket.AF_UNIX,
                              AF_NETLINK, AF_PACKET))


cdef bytes other_sockaddr_from_py(int family, object address):
    if family == AF_NETLINK:
        if not isinstance(address, tuple) or len(address) != 2:
            raise TypeError("AF_NETLINK address must be tuple, not "
                            f"{type(address).__name__}")
        return struct.pack('=HHII', family, 0, address[0], address[1])
    if family == AF_PACKET:
        if not isinstance(address, tuple) or not 2 <= len(address) <= 5:
            raise TypeError("AF_PACKET address must be a tuple of two to five elements")
        ifname, proto = address[0], address[1]
        pkttype = address[2] if len(address) > 2 else 0
        hatype = address[3] if len(address) > 3 else 0
        haddr = bytes(address[4]) if len(address) > 4 else b''
        if len(haddr) > 8:
            raise ValueError("Hardware address must be 8 bytes or less")
        if not 0 <= proto <= 0xffff:
            raise OverflowError("protoNumber must be 0-65535.")
        return struct.pack('=HHiHBB8s', family, socket.htons(proto),
                           socket.if_nametoindex(ifname), hatype, pkttype,
                           len(haddr), haddr)
    raise OSError(_errno.EAFNOSUPPORT, f"address family {family} is not supported")


cdef object other_sockaddr_to_py(int family, bytes raw):
    if family == AF_NETLINK and len(raw) >= 12:
        _, _, pid, groups = struct.unpack_from('=HHII', raw)
        return (pid, groups)
    if family == AF_PACKET and len(raw) >= 12:
        raw = raw.ljust(20, b'\0')
        _, proto, ifindex, hatype, pkttype, halen, haddr = struct.unpack_from(
            '=HHiHBB8s', raw)
        try:
            ifname = socket.if_indextoname(ifindex)
        except OSError:
            ifname = ''
        return (ifname, socket.ntohs(proto), pkttype, hatype, haddr[:halen])
    return None


cdef object sockaddr_to_py(sockaddr_storage *ss, socklen_t addrlen):
    """The Python form of a kernel socket address, as the socket module
    gives it."""
    cdef char host[64]
    cdef unsigned port = 0, flowinfo = 0, scope_id = 0
    cdef size_t n
    cdef const char *path
    if addrlen == 0:
        return None
    family = ul_sockaddr_family(ss)
    if family == socket.AF_INET or family == socket.AF_INET6:
        ul_sockaddr_inet_parts(ss, host, &port, &flowinfo, &scope_id)
        if family == socket.AF_INET:
            return (host.decode(), port)
        return (host.decode(), port, flowinfo, scope_id)
    if family == socket.AF_UNIX:
        path = ul_sockaddr_unix_path(ss, addrlen, &n)
        if n > 0 and path[0] == 0:
            return path[:n]
        return os.fsdecode(path[:n])
    return other_sockaddr_to_py(family, (<char *>ss)[:addrlen])


cdef class SocketOperation(Operation):

    cdef int hold_buffer(self, object buf, int flags) except -1:
        try:
            hold_view(buf, &self.view, flags)
        except BufferError:
            if flags & PyBUF_WRITABLE:
                raise TypeError(f"a read-write bytes-like object is required, "
                                f"not '{type(buf).__name__}'") from None
            raise
        self.has_view = True
        return 0

    cdef int release_buffer(self) except -1:
        if self.has_view:
            self.has_view = False
            drop_view(&self.view)
        return 0

    cdef int release(self) except -1:
        return self.release_buffer()

    def __dealloc__(self):
        if self.has_view:
            self.has_view = False
            drop_view(&self.view)

    cdef int arm(self) except -1:
        return 0

    cdef int finish_with_count(self, int32_t res) except -1:
        """Last CQE of a request whose result is a byte count."""
        if self.should_retry(res):
            return self.arm()
        self.release_buffer()
        if res < 0:
            return self.fail(res)
        if not self.waiter_gone():
            self.future.set_result(res)
        return 0

    cdef bint should_retry(self, int32_t res):
        # io_uring waits for readiness itself; -EAGAIN only comes back in
        # corner cases (a request punted to a worker on an O_NONBLOCK socket).
        return res == -EAGAIN and not self.waiter_gone()


@cython.final
cdef class SendAllOp(SocketOperation):
    # While one is in flight the loop's sock_sendall() does not try send(2)
    # first: those bytes could overtake the ones the kernel still holds
    # (a sendall cancelled while it waited for room).

    cdef int release_buffer(self) except -1:
        if self.counted:
            self.counted = False
            self.loop.sendalls_in_flight -= 1
        return SocketOperation.release_buffer(self)

    cdef int arm(self) except -1:
        cdef io_uring_sqe *sqe = self.loop.sqe_for(self)
        ul_prep_send(sqe, self.fd, <char *>self.view.buf + self.offset,
                     <size_t>(self.view.len - self.offset), MSG_NOSIGNAL)
        return 0

    cdef int complete(self, int32_t res, uint32_t flags) except -1:
        if self.should_retry(res):
            return self.arm()
        if res < 0:
            self.release_buffer()
            return self.fail(res)
        self.offset += res
        if self.offset < self.view.len and not self.waiter_gone():
            return self.arm()
        self.release_buffer()
        if not self.waiter_gone():
            self.future.set_result(None)
        return 0


@cython.final
cdef class SocketPoll(SocketOperation):
    """One single-shot POLL_ADD: the socket is ready for `mask`.  The sock_*
    call waiting on it then makes the system call itself, so a cancelled
    wait consumes nothing."""

    cdef int arm(self) except -1:
        cdef io_uring_sqe *sqe = self.loop.sqe_for(self)
        ul_prep_poll_add(sqe, self.fd, self.mask)
        return 0

    cdef int complete(self, int32_t res, uint32_t flags) except -1:
        if res < 0:
            return self.fail(res)
        if not self.waiter_gone():
            self.future.set_result(None)
        return 0


cdef object wait_ready(RingLoop loop, object sock, unsigned mask, bint made_one=False):
    """A future resolved once sock is ready for mask (POLLIN, POLLOUT);
    cancelling it cancels the poll.  As the selector loop does before it
    waits, refuses a socket a transport uses (RuntimeError)."""
    cdef SocketPoll op = SocketPoll.__new__(SocketPoll)
    fd = sock.fileno()
    if loop._transports:
        loop._ensure_fd_no_transport(fd)
    op.mask = mask
    return start(loop, op, sock, fd, made_one)


@cython.final
cdef class SendMsgOp(SocketOperation):
    """sendto: SENDMSG with a destination address."""

    cdef int arm(self) except -1:
        cdef io_uring_sqe *sqe = self.loop.sqe_for(self)
        self.iov.iov_base = self.view.buf
        self.iov.iov_len = <size_t>self.view.len
        self.msg.msg_name = &self.addr if self.addrlen else NULL
        self.msg.msg_namelen = self.addrlen
        self.msg.msg_iov = &self.iov
        self.msg.msg_iovlen = 1
        self.msg.msg_control = NULL
        self.msg.msg_controllen = 0
        self.msg.msg_flags = 0
        ul_prep_sendmsg(sqe, self.fd, &self.msg, MSG_NOSIGNAL)
        return 0

    cdef int complete(self, int32_t res, uint32_t flags) except -1:
        return self.finish_with_count(res)


cdef object start(RingLoop loop, SocketOperation op, object sock, int fd,
                  bint made_one=False):
    """Queue `op`'s first request and return the future it resolves."""
    # (made_one: the caller called loop.create_future() already, where the
    # selector loop makes its one future: through_future())
    fut = _Future(loop=loop) if made_one else new_future(loop)
    op.loop = loop
    op.sock = sock
    op.fd = fd
    op.arm()
    op.watch_future(fut)
    return fut


cdef inline int check_sock(RingLoop loop, object sock) except -1:
    base_events._check_ssl_socket(sock)
    if loop._debug and sock.gettimeout() != 0:
        raise ValueError("the socket must be non-blocking")
    return 0


# ---- the loop's sock_* methods ---------------------------------------------
# RingLoop takes them as they are (sock_recv = sock_recv in its body): each
# is a coroutine function whose first argument, self, is the loop.
#
# Receives, accepts and connects are made as the selector loop makes
# them: the socket module's call at once, and, only when it would
# block, a wait for readiness (one single-shot POLL_ADD on the ring,
# sockops.pyx's SocketPoll) and the call again.  The ring never takes
# bytes or a connection on behalf of a task: cancelling one at any
# await leaves everything in the socket, for a plain recv(), another
# process, ssl.wrap_socket() or the next sock_* call (docs/
# cancellation.md).  Sends go through the ring.


async def sock_recv(RingLoop self, sock, n):
    """Receive up to n bytes from sock.  Raises OSError on socket
    errors, as socket.recv() does; cancelling leaves the bytes in the
    socket."""
    cdef Py_ssize_t size, res
    check_sock(self, sock)
    if type(sock) is not socket.socket:
        return await call_when_ready(self, sock, POLLIN, 'recv', n)
    # A plain socket: recv(2) from C, as socket.recv() would make it,
    # without raising BlockingIOError each time it would block.
    size = PyNumber_Index(n)
    if size < 0:
        raise ValueError("negative buffersize in recv")
    if size == 0:
        return b''                  # (socket.recv(0) makes no call)
    if size > UL_MAX_IO_LEN:
        size = UL_MAX_IO_LEN        # the most one recv(2) returns
    while True:
        data = ul_recv_bytes(sock.fileno(), size, &res)
        if data is not None:
            return data
        if res == 0:
            return b''
        if res != -EAGAIN:
            raise convert_error(<int>res)
        await wait_ready(self, sock, POLLIN)


async def sock_recv_into(RingLoop self, sock, buf):
    """Receive into the writable buffer buf; return the byte count.
    Cancelling leaves the bytes in the socket."""
    check_sock(self, sock)
    return await call_when_ready(self, sock, POLLIN, 'recv_into', buf)


async def sock_recvfrom(RingLoop self, sock, bufsize):
    """Receive a datagram of up to bufsize bytes: (data, address).
    Cancelling leaves the datagram in the socket."""
    check_sock(self, sock)
    return await call_when_ready(self, sock, POLLIN, 'recvfrom', bufsize)


async def sock_recvfrom_into(RingLoop self, sock, buf, nbytes=0):
    """Receive a datagram into buf: (nbytes, address).  Cancelling
    leaves the datagram in the socket."""
    check_sock(self, sock)
    if not nbytes:
        nbytes = len(buf)
    return await call_when_ready(self, sock, POLLIN, 'recvfrom_into',
                                            buf, nbytes)


async def sock_accept(RingLoop self, sock):
    """Accept a connection: (conn, address), conn non-blocking.
    Cancelling leaves the connection in the listening socket's queue."""
    check_sock(self, sock)
    if not futures_are_ours(self):
        return await through_future(self, accept_when_ready(self, sock, True))
    return await accept_when_ready(self, sock)


async def accept_when_ready(RingLoop self, sock, bint made_one=False):
    conn, address = await call_when_ready(self, sock, POLLIN, 'accept', made_one=made_one)
    conn.setblocking(False)
    return conn, address


async def sock_sendall(RingLoop self, sock, data):
    """Send all of data. Raises OSError on socket errors; after a
    cancellation an unknown part may have been sent."""
    cdef SendAllOp op
    cdef Py_ssize_t sent
    check_sock(self, sock)
    op = SendAllOp.__new__(SendAllOp)
    op.hold_buffer(data, PyBUF_SIMPLE)
    if op.view.len == 0:
        op.release_buffer()
        return
    fd = sock.fileno()
    if self.sendalls_in_flight == 0:
        # As the stdlib and uvloop do: send(2) at once, and return
        # without yielding to the loop when the socket took it all
        # (code that cancels a receive right after a sendall counts on
        # the loop not running in between).
        sent = ul_send_now(fd, <char *>op.view.buf, op.view.len)
        if sent == op.view.len:
            op.release_buffer()
            return
        if sent < 0:
            if sent != -EAGAIN:
                op.release_buffer()
                raise convert_error(<int>sent)
        else:
            op.offset = sent
    fut = start(self, op, sock, fd)
    op.counted = True
    self.sendalls_in_flight += 1
    return await fut


async def sock_sendto(RingLoop self, sock, data, address):
    """Send data to address; return the number of bytes sent."""
    cdef SendMsgOp op
    check_sock(self, sock)
    if sock.family not in ENCODED_FAMILIES:
        return await call_when_ready(self, sock, POLLOUT, 'sendto', data, address)
    op = SendMsgOp.__new__(SendMsgOp)
    try:
        op.addrlen = sockaddr_from_py(sock.family, address, &op.addr)
    except socket.gaierror:
        resolved = await self._ensure_resolved(
            address, family=sock.family, type=sock.type, proto=sock.proto,
            loop=self)
        op.addrlen = sockaddr_from_py(sock.family, resolved[0][4], &op.addr)
    op.hold_buffer(data, PyBUF_SIMPLE)
    return await start(self, op, sock, sock.fileno())


async def sock_connect(RingLoop self, sock, address):
    """Connect sock to address (names are resolved first).  Raises what
    connect(2) raises at once, as socket.connect() does, or -- for a
    connection that completes later -- OSError(err, 'Connect call
    failed ...') with the error the socket then holds."""
    check_sock(self, sock)
    if not futures_are_ours(self):
        return await through_future(self, connect_when_ready(self, sock, address, True))
    return await connect_when_ready(self, sock, address)


async def connect_when_ready(RingLoop self, sock, address, bint made_one=False):
    if sock.family == socket.AF_INET or (
            base_events._HAS_IPv6 and sock.family == socket.AF_INET6):
        resolved = await self._ensure_resolved(
            address, family=sock.family, type=sock.type, proto=sock.proto,
            loop=self)
        address = resolved[0][4]
    try:
        # the handshake starts inside this call, as on the selector
        # loop: a peer may wait for it synchronously
        sock.connect(address)
        return
    except (BlockingIOError, InterruptedError):
        pass
    await wait_ready(self, sock, POLLOUT, made_one)
    err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if err != 0:
        raise OSError(err, f'Connect call failed {address}')


async def through_future(RingLoop loop, coro):
    """coro's outcome, handed on through a future of loop.create_future():
    sock_accept() and sock_connect() of the selector loop make their
    future before their first try, so a create_future() that replaced the
    loop's (instrumentation) is called there, and its future carries
    the outcome.  Only then: the loop's own future would be a cost
    nobody sees."""
    fut = loop.create_future()
    try:
        result = await coro
    except Exception as exc:
        fut.set_exception(exc)
    else:
        fut.set_result(result)
    finally:
        if not fut.done():
            fut.cancel()            # (cancelled, or SystemExit...)
    return await fut


async def call_when_ready(RingLoop loop, sock, unsigned mask, str name, *args,
                          bint made_one=False):
    """sock.<name>(*args) -- the socket's own method -- now and again each
    time sock is ready for mask, until it no longer raises
    BlockingIOError; its result.  The method is looked up for each try,
    as the selector loop does: one replaced meanwhile is the one called
    (CPython's test_sendto_blocking).  Waiting takes nothing from the
    socket."""
    while True:
        try:
            return getattr(sock, name)(*args)
        except (BlockingIOError, InterruptedError):
            pass
        await wait_ready(loop, sock, mask, made_one)


async def sendall_counted(RingLoop self, sock, data, list progress):
    # sock_sendall that records in progress[0] how much was sent, also
    # when it fails half-way (sendfile reports the file position).
    cdef SendAllOp op = SendAllOp.__new__(SendAllOp)
    op.hold_buffer(data, PyBUF_SIMPLE)
    try:
        return await start(self, op, sock, sock.fileno())
    finally:
        progress[0] = op.offset
