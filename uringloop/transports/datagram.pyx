# DatagramTransport: UDP (and Unix datagram) sockets on io_uring.
#
# One multishot RECVMSG on the loop's provided buffers.  sendto() with nothing
# queued sends at once with a non-blocking sendto(2) (see send_now); else one
# send request is in flight, so datagrams leave in the order sendto() was called (several unlinked sends
# in flight could overtake each other when the socket buffer is full).  A
# send error goes to protocol.error_received() and the next datagram is sent,
# as the selector loop does.
#
# Measured and rejected: a chain of up to 32 sends linked with IOSQE_IO_LINK.
# Under DEFER_TASKRUN the kernel issues each next link from task work, which
# runs only in our next io_uring_enter, so it still took one enter per
# datagram (0.94) and sent 1000-byte datagrams at half the rate (87k/s
# against 178k/s with `python3 bench/udp_burst.py 1000`).

@cython.final
cdef class DatagramRecv(Operation):
    """One multishot RECVMSG (6.0): every datagram lands in a buffer of the
    loop's provided-buffer ring, with its sender address in front of it."""

    cdef int arm(self) except -1:
        cdef io_uring_sqe *sqe
        self.loop.ensure_recv_buffers()
        self.msg.msg_name = NULL
        self.msg.msg_namelen = sizeof(sockaddr_storage)
        self.msg.msg_iov = NULL
        self.msg.msg_iovlen = 0
        self.msg.msg_control = NULL
        self.msg.msg_controllen = 0
        self.msg.msg_flags = 0
        sqe = self.loop.sqe_for(self)
        ul_prep_recvmsg_multishot(sqe, self.transport.fd, &self.msg, 0, RECV_BUFFER_GROUP)
        return 0

    cdef int complete(self, int32_t res, uint32_t flags) except -1:
        cdef unsigned bid, name_used, msg_flags
        cdef unsigned char *buf
        cdef unsigned char *name
        cdef unsigned char *payload
        cdef int n
        data = addr = None
        if flags & IORING_CQE_F_BUFFER:
            bid = ul_cqe_buffer_id(flags)
            buf = ul_buf_ring_addr(&self.loop.recv_buffers, bid)
            n = ul_recvmsg_parse(buf, res, sizeof(sockaddr_storage), 0,
                                 &name, &name_used, &payload, &msg_flags)
            if n >= 0:
                data = PyBytes_FromStringAndSize(<char *>payload, n)
                addr = sockaddr_to_py(<sockaddr_storage *>name, name_used)
            ul_buf_ring_recycle(&self.loop.recv_buffers, bid)
            res = n if n >= 0 else -EINVAL
        return self.transport.recv_completed(res, data, addr,
                                             (flags & IORING_CQE_F_MORE) == 0)


@cython.final
cdef class DatagramSend(Operation):
    # One per datagram; with zero-copy alive (with the data) until the
    # kernel's notification.

    cdef int complete(self, int32_t res, uint32_t flags) except -1:
        cdef DatagramTransport tr = self.transport
        if not self.zerocopy:
            self.data = None
            return tr.send_completed(res)
        chunk = self.data
        if flags & IORING_CQE_F_NOTIF:
            self.data = None
            return zc_notified(tr.zc, chunk, res)
        if not (flags & IORING_CQE_F_MORE):
            self.data = None
            zc_failed_early(tr.zc, chunk)
        return tr.zc_send_completed(res)

    cdef int release(self) except -1:
        self.data = None
        return 0


cdef class DatagramTransport(BaseTransport):

    max_size = 256 * 1024       # as the stdlib's transports (read size)

    @property
    def __class__(self):
        return AsyncioDatagramTransport

    cdef int start_reading(self) except -1:
        if self.recv_armed or self.closing or self.reading_paused:
            return 0
        self.recv_op.arm()
        self.recv_armed = True
        self.op_started()
        return 0

    def _start_reading_cb(self):
        self.start_reading()

    def is_reading(self):
        return not self.reading_paused and not self.closing

    # The rest of the asyncio.Transport interface that the class this
    # transport reports as __class__ declares, answered as asyncio's base
    # classes answer it (a __getattr__ onto that class would do the same,
    # but a type with its own tp_getattro loses CPython's fast method
    # lookup: 40 -> 150 ns per transport method call, measured).
    def write(self, data):
        raise NotImplementedError

    def writelines(self, list_of_data):
        raise NotImplementedError

    def write_eof(self):
        raise NotImplementedError

    def can_write_eof(self):
        raise NotImplementedError

    def pause_reading(self):
        """Stop calling datagram_received until resume_reading() (as the
        stdlib's datagram transports do): the RECVMSG is cancelled; what
        arrives meanwhile stays in the socket's receive queue."""
        if self.closing or self.reading_paused:
            return
        self.reading_paused = True
        if self.recv_armed:
            self.loop.cancel_op(self.recv_op)

    def resume_reading(self):
        if self.closing or not self.reading_paused:
            return
        self.reading_paused = False
        if self.paused_datagrams:
            kept, self.paused_datagrams = self.paused_datagrams, []
            self.loop.call_soon(self._deliver_kept, kept)
        self.loop.call_soon(self._start_reading_cb)

    def _deliver_kept(self, list datagrams):
        for data, addr in datagrams:
            if self.closing or not self.deliver(data, addr):
                return

    cdef bint deliver(self, object data, object addr) except -1:
        """datagram_received(); False when it raised (the transport is then
        closed with the error)."""
        try:
            self.protocol.datagram_received(data, addr)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self.fatal_error(exc, 'Fatal read error on datagram transport')
            return False
        return True

    cdef int recv_completed(self, int32_t res, object data, object addr,
                            bint final) except -1:
        if final:
            self.recv_armed = False
            self.op_finished()
        if self.closing:
            return 0
        if res >= 0 and self.reading_paused:
            # posted before the cancel reached the kernel: keep it, in order
            self.paused_datagrams.append((data, addr))
        elif res >= 0:
            if not self.deliver(data, addr):
                return 0
        elif res == -ECANCELED:
            pass        # paused (resume_reading() may have come since)
        elif res != -ENOBUFS:
            self.protocol.error_received(convert_error(res))
        if final:
            self.start_reading()
        return 0

    def sendto(self, data, addr=None):
        """Queue one datagram to addr (the connected peer when None).
        Raises TypeError for non-bytes data, ValueError for an address on a
        connected transport."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f'data argument must be a bytes-like object, '
                            f'not {type(data).__name__!r}')
        if not data:
            return
        if self.address is not None:
            if addr not in (None, self.address):
                raise ValueError(f'Invalid address: must be None or {self.address}')
            addr = None
        if self.conn_lost:
            if self.conn_lost >= constants.LOG_THRESHOLD_FOR_CONNLOST_WRITES:
                logger.warning('socket.send() raised exception.')
            self.conn_lost += 1
            return
        data = bytes(data)
        if (not self.send_armed and not self.write_queue
                and not self.zc.wants(data, len(<bytes>data))):
            if self.send_now(<bytes>data, addr):
                return
        self.write_queue.append((data, addr))
        self.write_buffer_size += len(<bytes>data)
        if not self.send_armed:
            self.submit_send()
        self.maybe_pause_protocol()

    cdef bint send_now(self, bytes data, object addr) except -1:
        """With nothing queued, send at once with one non-blocking send(2)
        or sendto(2), as the selector loops do: True when that settled it
        (sent, or the error went to error_received), False when the socket
        buffer is full and the datagram must wait in the queue.  A request
        on the ring would cost a completion and an io_uring_enter per
        datagram: measured, uvloop's direct sendto ran at 1.5-1.65x of that
        (python3 bench/run_zerocopy.py, UDP cells)."""
        cdef sockaddr_storage sa
        cdef int salen = 0
        cdef ssize_t n
        cdef int err
        if addr is not None:
            try:
                salen = self.address_to_c(addr, &sa)
            except OSError as exc:
                self.protocol.error_received(exc)
                return True
            except Exception as exc:
                self.fatal_error(exc, 'Fatal write error on datagram transport')
                return True
            n = c_sendto(self.fd, PyBytes_AS_STRING(data), len(data),
                         MSG_DONTWAIT | MSG_NOSIGNAL, <sockaddr *>&sa, <socklen_t>salen)
        else:
            n = c_send(self.fd, PyBytes_AS_STRING(data), len(data), MSG_DONTWAIT | MSG_NOSIGNAL)
        if n >= 0:
            self.zc.plain_sends += 1
            self.zc.plain_bytes += n
            return True
        err = errno
        if err == EAGAIN or err == EINTR or err == ENOBUFS:
            return False
        self.protocol.error_received(convert_error(-err))
        return True

    cdef int send_queued_now(self) except -1:
        """The socket took a datagram again: send what is queued directly,
        in order, until it would block (or a zero-copy one is next); else a
        busy sender would stay on the ring path for good."""
        while self.write_queue:
            data, addr = self.write_queue[0]
            if type(data) is not bytes or self.zc.wants(data, len(<bytes>data)):
                break
            if not self.send_now(<bytes>data, addr):
                break
            self.write_queue.popleft()
            self.write_buffer_size -= len(<bytes>data)
        return 0

    cdef int address_to_c(self, object addr, sockaddr_storage *out) except -1:
        """The C form of addr; a host name is resolved as socket.sendto()
        would (OSError when it does not resolve)."""
        try:
            return sockaddr_from_py(self.sock.family, addr, out)
        except socket.gaierror:
            info = socket.getaddrinfo(addr[0], addr[1], self.sock.family,
                                      self.sock.type, self.sock.proto)
            return sockaddr_from_py(self.sock.family, info[0][4], out)

    def sendto_zerocopy(self, buf, addr=None):
        """Queue one datagram sent straight from buf (any C-contiguous
        buffer, best a RegisteredBuffer from loop.zerocopy_buffer(), whose
        sends pin no pages), in order with sendto().

        Returns a Future that resolves, once the kernel has let go of buf,
        to ZeroCopyResult(nbytes, zerocopy); buf stays exported until then.
        A send error goes to protocol.error_received() and to the future.
        Raises ValueError for a non-contiguous buffer or an address on a
        connected transport, TypeError for a non-buffer."""
        cdef ZeroCopyBuffer zb
        if self.address is not None:
            if addr not in (None, self.address):
                raise ValueError(f'Invalid address: must be None or {self.address}')
            addr = None
        zb = new_zerocopy_buffer(self.loop, buf)
        fut = zb.future
        if zb.view.len == 0 or self.conn_lost:
            if self.conn_lost:
                zb.fail(ConnectionError('the transport is closed'))
            else:
                zb.sent = True
                zb.finish_if_released()
            return fut
        self.write_queue.append((zb, addr))
        self.write_buffer_size += zb.view.len
        if not self.send_armed:
            self.submit_send()
        self.maybe_pause_protocol()
        return fut

    cdef int submit_send(self) except -1:
        """Submit the head datagram.  One whose address does not even
        resolve goes to error_received, as socket.sendto()'s error does on
        the selector loop, and the next one is tried."""
        cdef DatagramSend op
        while self.write_queue:
            data, addr = self.write_queue[0]
            try:
                op = self.prepare_send(data, addr)
            except OSError as exc:
                self.datagram_failed(exc)
                continue
            except Exception as exc:
                # not an address at all: fatal, as socket.sendto()'s
                # TypeError is on the selector loop
                self.drop_queue(exc)
                self.fatal_error(exc, 'Fatal write error on datagram transport')
                return 0
            self.prep_sqe(op)
            self.send_armed = True
            self.op_started()
            return 0
        return 0

    cdef DatagramSend prepare_send(self, object data, object addr):
        cdef DatagramSend op = DatagramSend.__new__(DatagramSend)
        cdef socklen_t addrlen = 0
        op.loop = self.loop
        op.context = self.context
        op.transport = self
        if addr is not None:
            addrlen = self.address_to_c(addr, &op.addr)
        op.data = data
        op.iov.iov_base = chunk_ptr(data)
        op.iov.iov_len = chunk_len(data)
        op.msg.msg_name = &op.addr if addrlen else NULL
        op.msg.msg_namelen = addrlen
        op.msg.msg_iov = &op.iov
        op.msg.msg_iovlen = 1
        op.msg.msg_control = NULL
        op.msg.msg_controllen = 0
        op.msg.msg_flags = 0
        return op

    cdef io_uring_sqe *prep_sqe(self, DatagramSend op) except NULL:
        cdef io_uring_sqe *sqe
        cdef object data = op.data
        cdef bint fixed = type(data) is ZeroCopyBuffer and (<ZeroCopyBuffer>data).buf_index >= 0
        cdef unsigned zc_flags = IORING_SEND_ZC_REPORT_USAGE if self.zc.report_usage else 0
        op.zerocopy = self.zc.wants(data, op.iov.iov_len)
        sqe = self.loop.sqe_for(op)
        if op.zerocopy and fixed:
            # from a registered buffer: SEND_ZC with the address, no pinning
            ul_prep_send_zc_fixed(sqe, self.fd, op.iov.iov_base, op.iov.iov_len,
                                  MSG_NOSIGNAL, zc_flags, (<ZeroCopyBuffer>data).buf_index)
            if op.msg.msg_namelen:
                ul_prep_send_set_addr(sqe, <sockaddr *>&op.addr, op.msg.msg_namelen)
            self.zc.fixed_sends += 1
        elif op.zerocopy:
            ul_prep_sendmsg_zc(sqe, self.fd, &op.msg, MSG_NOSIGNAL, zc_flags)
        else:
            ul_prep_sendmsg(sqe, self.fd, &op.msg, MSG_NOSIGNAL)
        if op.zerocopy:
            self.zc.notifs_pending += 1
            if type(data) is ZeroCopyBuffer:
                (<ZeroCopyBuffer>data).zc_inflight += 1
        return sqe

    cdef int zc_send_completed(self, int32_t res) except -1:
        if self.zc.absorb_error(res):
            res = -EAGAIN         # stays queued and goes again, ordinarily
        elif res >= 0:
            self.zc.zc_sends += 1
            self.zc.zc_bytes += res
            self.zc.plain_sends -= 1       # send_completed counts every send
            self.zc.plain_bytes -= res
        return self.send_completed(res)

    def get_extra_info(self, name, default=None):
        """As BaseTransport; 'zerocopy' gives the zero-copy statistics."""
        if name == 'zerocopy':
            return self.zc.stats()
        return self.extra.get(name, default)

    cdef int send_completed(self, int32_t res) except -1:
        self.send_armed = False
        self.op_finished()
        if not self.write_queue or self.conn_lost:
            return 0      # aborted: the queue was dropped
        if res >= 0:
            data, _ = self.write_queue.popleft()
            self.write_buffer_size -= chunk_len(data)
            self.zc.plain_sends += 1
            self.zc.plain_bytes += res
            if type(data) is ZeroCopyBuffer:
                (<ZeroCopyBuffer>data).sent = True
                (<ZeroCopyBuffer>data).finish_if_released()
        elif res != -EAGAIN:      # -EAGAIN: the head goes again
            self.datagram_failed(convert_error(res))
        self.send_queued_now()
        self.submit_send()
        self.maybe_resume_protocol()
        if not self.write_queue and self.closing and not self.conn_lost:
            self.conn_lost += 1
            self.loop.call_soon(self._call_connection_lost, None)
        return 0

    cdef datagram_failed(self, object exc):
        """The head datagram could not be sent: the protocol hears of it,
        as from the selector loop, and so does a zero-copy send's future."""
        data, _ = self.write_queue.popleft()
        self.write_buffer_size -= chunk_len(data)
        if type(data) is ZeroCopyBuffer:
            (<ZeroCopyBuffer>data).fail(exc)
        self.protocol.error_received(exc)

    cdef int drop_queue(self, object exc) except -1:
        for data, _ in self.write_queue:
            if type(data) is ZeroCopyBuffer:
                (<ZeroCopyBuffer>data).fail(exc)
        self.write_queue.clear()
        self.write_buffer_size = 0
        return 0

    def close(self):
        """Stop receiving; send what is queued, then connection_lost."""
        if self.closing or self.closed_with_loop():
            return
        self.closing = True
        if self.recv_armed:
            self.loop.cancel_op(self.recv_op)
        if not self.write_queue:
            self.conn_lost += 1
            self.loop.call_soon(self._call_connection_lost, None)

    cdef int stop_io(self) except -1:
        self.drop_queue(ConnectionAbortedError('the transport was aborted'))
        if self.send_armed:
            # the send in flight is a request of its own: cancel every
            # request on the fd (the receive goes too)
            self.loop.cancel_fd(self.fd)
        elif self.recv_armed:
            self.loop.cancel_op(self.recv_op)
        return 0


cdef DatagramTransport new_datagram_transport(RingLoop loop, object sock,
                                              object protocol, object address,
                                              object waiter, object extra):
    cdef DatagramTransport tr = make_transport(DatagramTransport)
    tr.loop = loop
    tr.sock = sock
    tr.fd = sock.fileno()
    tr.extra = socket_extra(sock, extra)
    tr.address = address
    tr.protocol = protocol
    tr.protocol_connected = True
    tr.write_queue = collections.deque()
    tr.paused_datagrams = []
    tr.set_limits(None, None)
    tr.zc = new_policy(loop, sock)
    # Auto mode leaves sendto()'s bytes to the direct copying sendto(2):
    # into a sink where zero-copy stays real, SEND_ZC through the ring (one
    # request and one enter per datagram) ran at 0.72x of it at 60000-byte
    # datagrams (bench/run_zerocopy.py).  ZC_ALWAYS and sendto_zerocopy()
    # still send with SEND_ZC.
    tr.zc.auto_bytes = False
    if sock.family == socket.AF_UNIX:
        tr.zc.turn_off('AF_UNIX sockets have no zero-copy send')
    tr.extra['socket'] = UringTransportSocket(sock, tr.zc)
    tr.context = PyContext_CopyCurrent()
    tr.recv_op = DatagramRecv.__new__(DatagramRecv)
    tr.recv_op.context = tr.context
    tr.recv_op.loop = loop
    tr.recv_op.transport = tr
    tr.register()
    loop.call_soon(protocol.connection_made, tr)
    kept = take_all_leftover(loop, sock)
    if kept is not None and (<LeftOver>kept).datagrams:
        # datagrams a cancelled sock_recvfrom*() took come first
        loop.call_soon(tr._deliver_kept, (<LeftOver>kept).datagrams)
    loop.call_soon(tr._start_reading_cb)
    if waiter is not None:
        loop.call_soon(futures._set_result_unless_cancelled, waiter, None)
    return tr
