# The sock_* operations: one Operation subclass per io_uring request kind.
# Included by core.pyx.

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
    cdef unsigned port, flowinfo, scope_id
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


cdef class LeftOver:
    """What arrived for a receive or accept whose waiter went away, kept for
    whoever uses the same socket next: the next sock_* call, or a transport
    or server made from the socket (they deliver it first, in order).

    Two ways a result lands here: the future was already cancelled when the
    kernel's completion was reaped (Operation.waiter_gone), or the future
    held the result but its task was cancelled before it resumed
    (asyncio.wait_for, TaskGroup, gather cancelling a sibling): the sock_*
    coroutine catches that CancelledError and puts the result back."""


def _forget_leftover(dict store, int fd, object ref):
    # The socket object is gone: drop what was kept for it, and close the
    # connections nobody can accept any more.
    cdef LeftOver lo = store.get(fd)
    if lo is not None and lo.sock_ref is ref:
        del store[fd]
        for conn, _ in lo.conns:
            conn.close()


cdef inline LeftOver kept_for(RingLoop loop, int fd, object sock):
    """What is kept for sock (under its fd), or None: an entry left under
    the same fd number by another, closed socket is not sock's."""
    cdef LeftOver lo = loop.recv_leftover.get(fd)
    if lo is not None and lo.sock_ref() is not sock:
        return None
    return lo


cdef LeftOver leftover_for(RingLoop loop, int fd, object sock):
    cdef LeftOver lo = kept_for(loop, fd, sock)
    if lo is None:
        lo = LeftOver.__new__(LeftOver)
        store = loop.recv_leftover
        lo.sock_ref = weakref.ref(sock, lambda ref: _forget_leftover(store, fd, ref))
        lo.data = bytearray()
        lo.conns = []
        lo.datagrams = []
        loop.recv_leftover[fd] = lo
    return lo


cdef inline void drop_if_empty(RingLoop loop, int fd, LeftOver lo):
    if not lo.data and not lo.conns and not lo.datagrams:
        del loop.recv_leftover[fd]


cdef object take_leftover_datagram(RingLoop loop, int fd, object sock):
    """(data, address) of a datagram kept from a cancelled receive, or None."""
    cdef LeftOver lo = kept_for(loop, fd, sock)
    if lo is None or not lo.datagrams:
        return None
    item = lo.datagrams.pop(0)
    drop_if_empty(loop, fd, lo)
    return item


cdef object take_leftover_conn(RingLoop loop, int fd, object sock):
    """(conn, address) of a connection kept from a cancelled accept, or None."""
    cdef LeftOver lo = kept_for(loop, fd, sock)
    if lo is None or not lo.conns:
        return None
    item = lo.conns.pop(0)
    drop_if_empty(loop, fd, lo)
    return item


cdef object take_leftover_data(RingLoop loop, int fd, object sock, Py_ssize_t n):
    cdef LeftOver lo = kept_for(loop, fd, sock)
    if lo is None or not lo.data:
        return None
    data = bytes(lo.data[:n])
    del lo.data[:n]
    drop_if_empty(loop, fd, lo)
    return data


cdef LeftOver take_all_leftover(RingLoop loop, object sock):
    """Everything kept for sock (a transport or server made from it takes
    it over), or None."""
    cdef LeftOver lo
    if not loop.recv_leftover:
        return None
    fd = sock.fileno()
    lo = kept_for(loop, fd, sock)
    if lo is None:
        return None
    del loop.recv_leftover[fd]
    return lo


cdef inline bint result_unclaimed(RingLoop loop, int fd):
    """The latest receive on fd has its result, and its task has not
    resumed yet: if that task was cancelled meanwhile, it keeps the result
    for the next receive when it resumes (keep_cancelled_result).  A
    receive started now waits one iteration for that, or it would be armed
    in the kernel behind a result that never reaches it (uvloop's
    test_sock_send_before_cancel, once the byte reached the first receive;
    the stdlib loses the result here)."""
    if not loop.recv_waiting:
        return False
    fut = loop.recv_waiting.get(fd)
    return fut is not None and fut.done()


cdef int take_kept_after_claims(RingLoop loop, int fd, object take,
                                tuple args) except -1:
    """take(*args) takes what cancelled receives kept for fd (a transport
    or server made from the socket): now, or -- while a cancelled task has
    yet to keep what its receive got -- in a callback queued behind that
    task's wake-up."""
    if result_unclaimed(loop, fd):
        loop.call_soon(take, *args)
    else:
        take(*args)
    return 0


cdef inline int forget_waiting(RingLoop loop, int fd, object fut) except -1:
    """fut's task has resumed: its receive is no longer the one to wait for."""
    if loop.recv_waiting.get(fd) is fut:
        del loop.recv_waiting[fd]
    return 0


_asyncio_sleep = asyncio.sleep     # (taken at import: test suites patch it)


async def sleep0():
    """Let the callbacks already scheduled run first: one iteration."""
    await _asyncio_sleep(0)


cdef int keep_cancelled_result(RingLoop loop, object sock, int fd, object fut,
                               int kind, object buf) except -1:
    """The task awaiting fut was cancelled after the kernel had delivered
    fut's result: put the result back in front of what is kept for sock.
    kind: KEEP_DATA (bytes), KEEP_INTO (a count of bytes in buf),
    KEEP_DATAGRAM ((bytes, address)), KEEP_DATAGRAM_INTO ((count, address)
    in buf), KEEP_CONN ((conn, address))."""
    if not fut.done() or fut.cancelled():
        # its request may have completed in the ring meanwhile: what it
        # took is kept (in order) before this task's next receive
        loop.dispatch_ahead(fd)
        return 0
    if fut.exception() is not None:
        return 0
    result = fut.result()
    if kind == KEEP_INTO:
        result = bytes(memoryview(buf).cast('B')[:result])
    elif kind == KEEP_DATAGRAM_INTO:
        result = (bytes(memoryview(buf).cast('B')[:result[0]]), result[1])
    if kind == KEEP_DATA or kind == KEEP_INTO:
        if result:
            leftover_for(loop, fd, sock).data[0:0] = result
    elif kind == KEEP_CONN:
        leftover_for(loop, fd, sock).conns.insert(0, result)
    else:
        leftover_for(loop, fd, sock).datagrams.insert(0, result)
    return 0


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
cdef class RecvOp(SocketOperation):

    cdef int arm(self) except -1:
        cdef io_uring_sqe *sqe = self.loop.sqe_for(self)
        ul_prep_recv(sqe, self.fd, PyBytes_AS_STRING(self.data), <size_t>self.size, 0)
        return 0

    cdef int complete(self, int32_t res, uint32_t flags) except -1:
        if self.should_retry(res):
            return self.arm()
        if res < 0:
            return self.fail(res)
        data = self.data if res == self.size else self.data[:res]
        self.data = None
        if self.waiter_gone():
            if res > 0:
                leftover_for(self.loop, self.fd, self.sock).data.extend(data)
        else:
            self.future.set_result(data)
        return 0


@cython.final
cdef class RecvIntoOp(SocketOperation):

    cdef int arm(self) except -1:
        cdef io_uring_sqe *sqe = self.loop.sqe_for(self)
        ul_prep_recv(sqe, self.fd, self.view.buf, <size_t>self.size, 0)
        return 0

    cdef int complete(self, int32_t res, uint32_t flags) except -1:
        if res > 0 and self.waiter_gone():
            leftover_for(self.loop, self.fd, self.sock).data.extend(
                PyBytes_FromStringAndSize(<char *>self.view.buf, res))
        return self.finish_with_count(res)


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
cdef class AcceptOp(SocketOperation):

    cdef int arm(self) except -1:
        cdef io_uring_sqe *sqe = self.loop.sqe_for(self)
        self.addrlen = sizeof(sockaddr_storage)
        ul_prep_accept(sqe, self.fd, <sockaddr *>&self.addr, &self.addrlen,
                       socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC)
        return 0

    cdef int drained(self, int32_t res, uint32_t flags) except -1:
        if res >= 0:
            close(res)          # accepted as the loop closed: nobody takes it
        return self.release()

    cdef int complete(self, int32_t res, uint32_t flags) except -1:
        if self.should_retry(res):
            return self.arm()
        if res < 0:
            return self.fail(res)
        sock = self.sock
        conn = socket.socket(sock.family, sock.type, sock.proto, fileno=res)
        conn.setblocking(False)
        address = sockaddr_to_py(&self.addr, self.addrlen)
        if self.waiter_gone():
            leftover_for(self.loop, self.fd, sock).conns.append((conn, address))
        else:
            self.future.set_result((conn, address))
        return 0


@cython.final
cdef class ConnectOp(SocketOperation):

    cdef int arm(self) except -1:
        cdef io_uring_sqe *sqe = self.loop.sqe_for(self)
        ul_prep_connect(sqe, self.fd, <sockaddr *>&self.addr, self.addrlen)
        return 0

    cdef int complete(self, int32_t res, uint32_t flags) except -1:
        if self.should_retry(res):
            return self.arm()
        if self.waiter_gone():
            return 0
        if res < 0:
            if res == -ECANCELED:
                return self.fail(res)
            self.future.set_exception(
                OSError(-res, f'Connect call failed {self.address}'))
        else:
            self.future.set_result(None)
        return 0


@cython.final
cdef class RecvMsgOp(SocketOperation):
    """recvfrom / recvfrom_into: RECVMSG with room for the sender address."""

    cdef int arm(self) except -1:
        cdef io_uring_sqe *sqe = self.loop.sqe_for(self)
        if self.data is not None:
            self.iov.iov_base = PyBytes_AS_STRING(self.data)
        else:
            self.iov.iov_base = self.view.buf
        self.iov.iov_len = <size_t>self.size
        self.msg.msg_name = &self.addr
        self.msg.msg_namelen = sizeof(sockaddr_storage)
        self.msg.msg_iov = &self.iov
        self.msg.msg_iovlen = 1
        self.msg.msg_control = NULL
        self.msg.msg_controllen = 0
        self.msg.msg_flags = 0
        ul_prep_recvmsg(sqe, self.fd, &self.msg, 0)
        return 0

    cdef int complete(self, int32_t res, uint32_t flags) except -1:
        if self.should_retry(res):
            return self.arm()
        if res >= 0 and self.waiter_gone():
            # the waiter was cancelled as the datagram arrived: keep it for
            # the next sock_recvfrom*() on this socket
            if self.data is not None:
                data = self.data[:res]
            else:
                data = PyBytes_FromStringAndSize(<char *>self.view.buf, res)
            leftover_for(self.loop, self.fd, self.sock).datagrams.append(
                (data, sockaddr_to_py(&self.addr, self.msg.msg_namelen)))
        self.release_buffer()
        if res < 0:
            return self.fail(res)
        if self.waiter_gone():
            return 0
        address = sockaddr_to_py(&self.addr, self.msg.msg_namelen)
        if self.data is not None:
            data = self.data if res == self.size else self.data[:res]
            self.data = None
            self.future.set_result((data, address))
        else:
            self.future.set_result((res, address))
        return 0


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


@cython.final
cdef class ReadOp(SocketOperation):
    """READ from a file at an offset (sock_sendfile's source)."""

    cdef int arm(self) except -1:
        cdef io_uring_sqe *sqe = self.loop.sqe_for(self)
        ul_prep_read(sqe, self.fd, self.view.buf, <size_t>self.view.len, self.offset)
        return 0

    cdef int complete(self, int32_t res, uint32_t flags) except -1:
        return self.finish_with_count(res)


cdef object start(RingLoop loop, SocketOperation op, object sock, int fd):
    """Queue `op`'s first request and return the future it resolves."""
    fut = new_future(loop)
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
