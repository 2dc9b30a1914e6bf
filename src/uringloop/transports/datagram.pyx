# DatagramTransport: UDP (and Unix datagram) sockets on io_uring.
#
# One multishot RECVMSG on the loop's provided buffers.  A datagram is sent
# at once with a non-blocking sendto(2) when nothing is queued; otherwise it
# is queued, and every datagram queued in one loop iteration goes to the
# kernel as one chain of linked requests in that iteration's enter
# (DatagramTransport, "sending", says why).  A send
# error goes to protocol.error_received() and the next datagram is sent, as
# the selector loop does.

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

    cdef object owner(self):
        return self.transport

    cdef int complete(self, int32_t res, uint32_t flags) except -1:
        cdef unsigned bid, name_used = 0, msg_flags
        cdef unsigned char *buf
        cdef unsigned char *name = NULL
        cdef unsigned char *payload = NULL
        cdef int n
        data = addr = None
        if flags & IORING_CQE_F_BUFFER:
            bid = ul_cqe_buffer_id(flags)
            buf = ul_buf_ring_addr(&self.loop.recv_buffers, bid)
            n = ul_recvmsg_parse(buf, res, sizeof(sockaddr_storage), 0,
                                 &name, &name_used, &payload, &msg_flags)
            try:
                if n >= 0:
                    data = PyBytes_FromStringAndSize(<char *>payload, n)
                    addr = sockaddr_to_py(<sockaddr_storage *>name, name_used)
                res = n if n >= 0 else -EINVAL
            except MemoryError as exc:
                # the datagram is out of the socket and cannot be handed
                # over: fatal, as a failed recvfrom() is to the selector loop
                self.transport.fatal_error(exc, 'Fatal read error on datagram transport')
                res = -ECANCELED    # (closed now: only the request's end counts)
            finally:
                ul_buf_ring_recycle(&self.loop.recv_buffers, bid)
        return self.transport.recv_completed(res, data, addr,
                                             (flags & IORING_CQE_F_MORE) == 0)


cdef inline bint would_block(ssize_t res):
    """A send's -errno that means the socket is full: the datagram waits."""
    return res == -EAGAIN or res == -EINTR or res == -ENOBUFS


# The longest and shortest chain flush_sends() writes at once (chain_done
# says how the length adapts), and how many spare
# DatagramSends a transport keeps.
cdef Py_ssize_t CHAIN_MAX = 256
cdef Py_ssize_t CHAIN_MIN = 4
cdef Py_ssize_t SPARE_OPS_MAX = 256

# The moves between read states that set_read_state() allows (a bit per
# state each may go to); docs/design.md has the table.
cdef int[4] DGRAM_MOVES
DGRAM_MOVES[DGRAM_READING] = (1 << DGRAM_PAUSED) | (1 << DGRAM_CLOSED)
DGRAM_MOVES[DGRAM_PAUSED] = (1 << DGRAM_READING) | (1 << DGRAM_HANDING_OVER) | (1 << DGRAM_CLOSED)
DGRAM_MOVES[DGRAM_HANDING_OVER] = (1 << DGRAM_READING) | (1 << DGRAM_PAUSED) | (1 << DGRAM_CLOSED)
DGRAM_MOVES[DGRAM_CLOSED] = 0


@cython.final
cdef class DatagramSend(Operation):
    """One queued datagram and the request that sends it: a link of a
    chain (see DatagramTransport, sending).  A zero-copy one stays alive,
    with its data, until the kernel's notification; then it is reused."""

    cdef object owner(self):
        return self.transport

    cdef int complete(self, int32_t res, uint32_t flags) except -1:
        cdef DatagramTransport tr = self.transport
        if flags & IORING_CQE_F_NOTIF:
            zc_notified(tr.zc, self.data, res)
            return tr.send_op_done(self)
        if self.zerocopy and not (flags & IORING_CQE_F_MORE):
            if res == -ECANCELED:
                # A link cancelled because one before it failed completes
                # without IORING_CQE_F_MORE, yet its notification still
                # follows, with the same user_data (the kernel's
                # io_req_tw_fail_links() sets no flags; the request's
                # cleanup flushes the notification it made at prep).
                # Count it in flight again, so that this op outlives that
                # CQE (dropping it here let the notification land on freed
                # memory: test_datagram_send.py, a failing zero-copy link).
                self.loop.track(self, NULL)
            else:
                zc_failed_early(tr.zc, self.data)
        tr.link_completed(self, res)
        if not (flags & IORING_CQE_F_MORE):
            tr.send_op_done(self)
        return 0

    cdef int release(self) except -1:
        self.data = None
        return 0

    cdef int arm(self, bint link) except -1:
        """Its link of a chain (flush_sends): SEND or SEND_ZC, the address
        in the SQE, MSG_DONTWAIT; IOSQE_IO_LINK unless it is the last."""
        cdef DatagramTransport tr = self.transport
        cdef io_uring_sqe *sqe
        cdef object data = self.data
        cdef bint fixed = type(data) is ZeroCopyFuture and (<ZeroCopyFuture>data).buf_index >= 0
        cdef unsigned zc_flags = IORING_SEND_ZC_REPORT_USAGE if tr.zc.report_usage else 0
        cdef int msg_flags = MSG_NOSIGNAL | MSG_DONTWAIT
        self.zerocopy = tr.zc.wants(data, self.iov.iov_len, tr.zc.plain_bytes)
        sqe = self.loop.sqe_for(self)
        # SEND and SEND_ZC with the address in the SQE (6.1): no msghdr for
        # the kernel to copy in, unlike SENDMSG
        if self.zerocopy and fixed:
            # from a registered buffer: no pages to pin
            ul_prep_send_zc_fixed(sqe, tr.fd, self.iov.iov_base, self.iov.iov_len,
                                  msg_flags, zc_flags, (<ZeroCopyFuture>data).buf_index)
            tr.zc.fixed_sends += 1
        elif self.zerocopy:
            ul_prep_send_zc(sqe, tr.fd, self.iov.iov_base, self.iov.iov_len, msg_flags, zc_flags)
        else:
            ul_prep_send(sqe, tr.fd, self.iov.iov_base, self.iov.iov_len, msg_flags)
        if self.addrlen:
            ul_prep_send_set_addr(sqe, <sockaddr *>&self.addr, self.addrlen)
        if link:
            ul_sqe_set_flags(sqe, IOSQE_IO_LINK)
        if self.zerocopy:
            tr.zc.notifs_pending += 1
            if type(data) is ZeroCopyFuture:
                (<ZeroCopyFuture>data).zc_inflight += 1
        return 0


@cython.final
cdef class DatagramWritable(Operation):
    """POLL_ADD for POLLOUT: a send found the socket full; the queue goes
    on once it has room."""

    cdef int arm(self) except -1:
        ul_prep_poll_add(self.loop.sqe_for(self), self.transport.fd, POLLOUT)
        return 0

    cdef object owner(self):
        return self.transport

    cdef int complete(self, int32_t res, uint32_t flags) except -1:
        cdef DatagramTransport tr = self.transport
        tr.op_finished()
        tr.blocked = False
        if res < 0 and res != -ECANCELED and not tr.conn_lost:
            tr.protocol.error_received(convert_error(res))
        return tr.flush_sends()


cdef class DatagramTransport(BaseTransport):

    max_size = 256 * 1024       # as the stdlib's transports (read size)

    @property
    def __class__(self):
        return AsyncioDatagramTransport

    cdef int set_read_state(self, int state) except -1:
        """The one place the read state changes; the debug build stops the
        process on a move DGRAM_MOVES does not have."""
        check_move(DGRAM_MOVES[self.read_state], state,
                   b'uringloop: a datagram transport moved between read '
                   b'states its table does not join')
        self.read_state = state
        return 0

    cdef int start_reading(self) except -1:
        """Arm the RECVMSG, when reading is on (nothing kept waits:
        DGRAM_READING) and it is not in flight (a cancelled one still is,
        until its final completion, which calls this again)."""
        if self.recv_op.life != OP_IDLE or self.read_state != DGRAM_READING:
            return 0
        self.recv_op.arm()
        return self.op_started()

    def _start_reading_cb(self):
        self.start_reading()

    def is_reading(self):
        return self.read_state == DGRAM_READING or self.read_state == DGRAM_HANDING_OVER

    # The rest of the asyncio.Transport interface that the class this
    # transport reports as __class__ declares, answered as asyncio's base
    # classes answer it (a __getattr__ onto that class would do the same,
    # but a type with its own tp_getattro loses CPython's fast method
    # lookup for every transport method call: docs/benchmarks.md, "Behind
    # the comments").
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
        if not self.is_reading():
            return
        self.set_read_state(DGRAM_PAUSED)
        self.loop.cancel_op(self.recv_op)

    def resume_reading(self):
        if self.read_state != DGRAM_PAUSED:
            return
        if self.kept is not None:
            self.set_read_state(DGRAM_HANDING_OVER)
            self.loop.call_soon(self._deliver_kept)
        else:
            self.set_read_state(DGRAM_READING)
            self.start_reading()

    def _deliver_kept(self):
        """Hand over what was kept, oldest first, while reading stays on
        (datagram_received() may pause it again: no datagram_received()
        while paused), then read again.  Rescheduled if a callback raised
        KeyboardInterrupt or SystemExit: the rest is handed over when the
        loop runs again."""
        try:
            while self.read_state == DGRAM_HANDING_OVER:
                data, addr = self.kept.pop(0)
                if not self.kept:
                    # the last: reading is plainly on while it is handed over
                    self.kept = None
                    self.set_read_state(DGRAM_READING)
                self.deliver(data, addr)
        except BaseException:
            # (also when that was the last item: the call again arms the
            # request)
            self.loop.call_soon(self._deliver_kept)
            raise
        self.start_reading()

    cdef int deliver(self, object data, object addr) except -1:
        """datagram_received().  What it raises goes to the exception
        handler and the transport reads on, as on the selector loop, whose
        _read_ready() calls it outside its try block, so the exception
        reaches the handle's report (SystemExit and KeyboardInterrupt go
        on).  It was this transport's fatal error until 2026-12-04."""
        cdef object protocol = self.protocol
        cdef int status
        # (the method kept as for data_received: read_method_status())
        if read_method_kept(self, protocol, 'datagram_received'):
            method = self.read_method
            status = ul_mc_call3_status(method, protocol, data, addr)
        else:
            status = ul_mc_method3_status(protocol, 'datagram_received', data, addr)
        if status != 0:
            report_callback_error(self, raised_exception(), 'datagram_received')
        return 0

    cdef int recv_completed(self, int32_t res, object data, object addr,
                            bint final) except -1:
        if final:
            self.op_finished()
        if self.read_state == DGRAM_CLOSED:
            return 0
        try:
            if res >= 0 and (self.read_state == DGRAM_PAUSED
                             or self.read_state == DGRAM_HANDING_OVER):
                # posted before the cancel reached the kernel, or behind
                # datagrams kept so: keep it, in order
                if self.kept is None:
                    self.kept = []
                self.kept.append((data, addr))
            elif res >= 0:
                self.deliver(data, addr)
            elif res == -ECANCELED:
                pass        # paused (resume_reading() may have come since)
            elif res != -ENOBUFS:
                self.protocol.error_received(convert_error(res))
        finally:
            if final:
                # armed again whatever datagram_received() raised (nothing
                # is armed once closing or paused)
                self.start_reading()
        return 0

    # ---- sending ------------------------------------------------------
    #
    # A datagram leaves by one of two paths:
    # - send_now(): the first plain datagram of an iteration, with nothing
    #   queued, is sent at once with one non-blocking sendto(2), as the
    #   selector loops and uvloop do.  For a lone datagram nothing is
    #   cheaper: no request, no completion.
    # - the chain: every other datagram (the second and later ones sent in
    #   the same iteration, zero-copy ones, those behind a queue, or after
    #   the socket said EAGAIN) is queued as a DatagramSend.  Before the
    #   loop's next io_uring_enter, flush_sends() writes every queued
    #   datagram as one chain of requests linked with IOSQE_IO_LINK, each
    #   with MSG_DONTWAIT, and the loop enters asking for one completion per
    #   link (RingLoop.wait_and_reap), so N sendto() calls in one iteration
    #   cost one sendto(2) and one enter in all, where one sendto(2) each
    #   sent fewer datagrams per second (docs/benchmarks.md, "Behind the
    #   comments").
    #
    # Kernel facts (docs/design.md): links are issued in order, each once
    # the one before completed; a link that fails ends the chain, the rest
    # completing with -ECANCELED, unissued.  MSG_DONTWAIT makes a full
    # socket fail the link with -EAGAIN at once instead of arming a poll.
    # So the queue keeps its order: what the chain sent leaves the queue's
    # head in order; what was refused or cancelled stays, and goes again in
    # the next chain, after POLLOUT (wait_writable) when the socket was full.
    # Unlinked requests would not keep it: when one finds the buffer full
    # and waits, a later one may find room and overtake it.
    #
    # In C (bench/udp_chain_probe.c) a chain in one enter runs at the rate
    # of direct send(2) calls, while entering with min_complete 1 takes one
    # enter per link (docs/benchmarks.md, "Behind the comments").  From
    # Python the chain wins (above): a sendto(2) per datagram costs a system
    # call where a link costs a few stores.

    def sendto(self, data, addr=None):
        """Send one datagram to addr (the connected peer when None).
        Raises TypeError for non-bytes data, ValueError for an address on a
        connected transport."""
        cdef Py_ssize_t size
        if type(data) is not bytes:
            if not isinstance(data, (bytes, bytearray, memoryview)):
                raise TypeError(f'data argument must be a bytes-like object, '
                                f'not {type(data).__name__!r}')
            data = bytes(data)
        size = len(<bytes>data)
        if not size:
            return
        if addr is not None and self.address is not None:
            if addr != self.address:
                raise ValueError(f'Invalid address: must be None or {self.address}')
            addr = None
        if self.conn_lost:
            if self.address is None and not self.lost_reported:
                # the selector loop refuses only a connected transport's
                # datagrams once closing; an unconnected one's still go out
                # (or fail to error_received) until connection_lost(); one
                # the full socket refuses is dropped, as there it waits in
                # a buffer that connection_lost() discards
                self.send_now(<bytes>data, addr)
                return
            if self.conn_lost >= constants.LOG_THRESHOLD_FOR_CONNLOST_WRITES:
                logger.warning('socket.send() raised exception.')
            self.conn_lost += 1
            return
        if not self.write_queue and not self.flush_scheduled and not self.zc.wants(data, size, self.zc.plain_bytes):
            if self.send_now(<bytes>data, addr):
                self.schedule_flush()
                return
            self.blocked = True      # EAGAIN: queued, sent on POLLOUT
        self.enqueue(data, addr, size)

    cdef int enqueue(self, object data, object addr, Py_ssize_t size) except -1:
        """Queue a datagram for the next chain.  An address that does not
        resolve goes to error_received(), one that is not an address at all
        is fatal, as socket.sendto()'s errors are on the selector loop."""
        cdef DatagramSend op
        cdef socklen_t addrlen = 0
        op = self.take_send_op()
        if addr is not None:
            try:
                addrlen = self.address_to_c(addr, &op.addr)
            except Exception as exc:
                self.keep_send_op(op)
                if type(data) is ZeroCopyFuture:
                    (<ZeroCopyFuture>data).fail(exc)
                if isinstance(exc, OSError):
                    self.protocol.error_received(exc)
                else:
                    self.fatal_error(exc, 'Fatal write error on datagram transport')
                return 0
        op.addrlen = addrlen
        op.data = data
        op.iov.iov_base = chunk_ptr(data)
        op.iov.iov_len = size
        op.queued = True
        self.queue_append(op)
        self.write_buffer_size += size
        if self.blocked:
            self.wait_writable()
        elif not self.links_in_flight:
            self.schedule_flush()
        self.maybe_pause_protocol()
        return 0

    cdef DatagramSend new_send_op(self):
        cdef DatagramSend op = DatagramSend.__new__(DatagramSend)
        op.sends = True
        op.loop = self.loop
        op.context = self.context
        op.transport = self
        return op

    cdef DatagramSend take_send_op(self):
        """A spare DatagramSend, or a new one.  The spares are a linked
        list, not a Python list: a list whose length swings by a chain's
        length reallocates its array, and glibc's consolidation of the
        small chunks that leaves behind showed in the echo benchmark's
        profile (the same for the streams' StreamSends)."""
        cdef DatagramSend op = self.spare_ops
        if op is None:
            return self.new_send_op()
        self.spare_ops = op.next_spare
        op.next_spare = None
        self.spare_count -= 1
        return op

    cdef int keep_send_op(self, DatagramSend op) except -1:
        if self.spare_count < SPARE_OPS_MAX:
            op.next_spare = self.spare_ops
            self.spare_ops = op
            self.spare_count += 1
        return 0

    cdef int schedule_flush(self) except -1:
        if not self.flush_scheduled:
            self.flush_scheduled = True
            self.loop.send_flushes.append(self)
        return 0

    cdef int wait_writable(self) except -1:
        if self.writable_op.life == OP_IDLE and not self.closed_with_loop():
            self.writable_op.arm()
            self.op_started()
        return 0

    cdef bint send_now(self, bytes data, object addr) except -1:
        """Send with one non-blocking send(2) or sendto(2): True when that
        settled it (sent, or the error went to error_received), False when
        the socket buffer is full and the datagram must wait in the queue."""
        cdef sockaddr_storage sa
        cdef socklen_t salen = 0
        cdef ssize_t n
        if addr is not None:
            try:
                salen = self.address_to_c(addr, &sa)
            except OSError as exc:
                self.protocol.error_received(exc)
                return True
            except Exception as exc:
                self.fatal_error(exc, 'Fatal write error on datagram transport')
                return True
        n = self.send_direct(PyBytes_AS_STRING(data), len(data), &sa, salen)
        if n >= 0:
            return True
        if would_block(n):
            return False
        self.protocol.error_received(convert_error(n))
        return True

    cdef ssize_t send_direct(self, char *buf, size_t size, sockaddr_storage *addr,
                             socklen_t addrlen) noexcept:
        """The non-blocking send(2), or sendto(2) to addr when addrlen, of
        send_now(): bytes sent, or -errno."""
        cdef ssize_t n
        if addrlen:
            n = c_sendto(self.fd, buf, size, MSG_DONTWAIT | MSG_NOSIGNAL,
                         <sockaddr *>addr, addrlen)
        else:
            n = c_send(self.fd, buf, size, MSG_DONTWAIT | MSG_NOSIGNAL)
        if n < 0:
            return -errno
        self.zc.plain_sends += 1
        self.zc.plain_bytes += n
        return n

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

        Returns a ZeroCopyFuture (an asyncio.Future in all but its type)
        that resolves, once the kernel has let go of buf, to
        ZeroCopyResult(nbytes, zerocopy); buf stays exported until then.
        A send error goes to protocol.error_received() and to the future.
        Raises ValueError for a non-contiguous buffer or an address on a
        connected transport, TypeError for a non-buffer."""
        cdef ZeroCopyFuture zb
        if addr is not None and self.address is not None:
            if addr != self.address:
                raise ValueError(f'Invalid address: must be None or {self.address}')
            addr = None
        zb = new_zerocopy_buffer(self.loop, buf)
        if zb.view.len == 0 or self.conn_lost:
            if self.conn_lost:
                zb.fail(ConnectionError('the transport is closed'))
            else:
                zb.sent = True
                zb.finish_if_released()
            return zb
        self.enqueue(zb, addr, zb.view.len)
        return zb

    cdef int flush_sends(self) except -1:
        """Write the queued datagrams as one chain (see above); called
        before the loop's enter, and after POLLOUT."""
        cdef DatagramSend op, fresh
        cdef Py_ssize_t i, n
        cdef unsigned space
        self.flush_scheduled = False
        if (self.links_in_flight or self.blocked or self.conn_lost
                or not self.loop.ring.open):
            return 0
        if self.blocked:
            return self.wait_writable()
        n = min(len(self.write_queue), self.chain_limit)
        if n == 0:
            return self.chain_done()
        space = ul_sq_space(&self.loop.ring.r)
        if space < n:
            # a chain is written whole: sqe_for() submitting half of it
            # would cut it, and a later chain could overtake the rest
            self.loop.ring.submit()
            space = ul_sq_space(&self.loop.ring.r)
            n = min(n, <Py_ssize_t>space)
        for i in range(n):
            op = self.write_queue[i]
            if op.life != OP_IDLE:
                # a zero-copy attempt refused: its notification is still to
                # come, so the datagram goes again in a request of its own
                fresh = self.new_send_op()
                fresh.data = op.data
                fresh.iov = op.iov
                fresh.addr = op.addr
                fresh.addrlen = op.addrlen
                fresh.queued = True
                op.queued = False
                self.write_queue[i] = fresh
                op = fresh
            op.arm(i < n - 1)
        self.links_in_flight = <int>n
        self.chain_sent = 0
        self.chains += 1
        self.links += n
        self.ops_pending += <int>n
        self.loop.links_submitted += <unsigned>n
        return 0

    cdef int link_completed(self, DatagramSend op, int32_t res) except -1:
        """The first (for SEND_ZC) or only completion of one link."""
        self.links_in_flight -= 1
        self.op_finished()
        if op.zerocopy:
            if self.zc.absorb_error(res):
                res = -ECANCELED      # stays queued, goes again ordinarily
            elif res >= 0:
                self.zc.zc_sends += 1
                self.zc.zc_bytes += res
        elif res >= 0:
            self.zc.plain_sends += 1
            self.zc.plain_bytes += res
        if op.queued:     # (else the queue was dropped: aborted)
            if res >= 0:
                # links complete in order and none after a refused one
                # succeeds: a sent datagram is the queue's head
                if UL_DEBUG_BUILD and self.write_queue[0] is not op:
                    Py_FatalError(b'uringloop: a chained datagram sent out of order')
                self.queue_popleft()
                op.queued = False
                self.chain_sent += 1
                self.write_buffer_size -= op.iov.iov_len
                if type(op.data) is ZeroCopyFuture:
                    (<ZeroCopyFuture>op.data).sent = True
                    (<ZeroCopyFuture>op.data).finish_if_released()
            elif would_block(res):
                self.blocked = True
                self.links_again += 1
            elif res == -ECANCELED:
                self.links_again += 1
            else:
                self.datagram_failed(op, convert_error(res))
        if self.links_in_flight == 0:
            self.chain_done()
        return 0

    cdef int chain_done(self) except -1:
        """No request of ours in the kernel's hands: go on with the queue.
        A chain the full socket cut makes the next one as long as what it
        sent (at least CHAIN_MIN), one that went whole doubles it: under
        back-pressure each POLLOUT would otherwise send a datagram or two
        and cancel the rest of a long chain, many requests per datagram
        into a lagging Unix socket (test_datagram_send.py counts them)."""
        if self.blocked:
            self.chain_limit = max(self.chain_sent, CHAIN_MIN)
        elif self.chain_limit < CHAIN_MAX:
            self.chain_limit = min(self.chain_limit * 2, CHAIN_MAX)
        if self.conn_lost:
            return 0
        if self.write_queue:
            if self.blocked:
                self.wait_writable()
            else:
                self.schedule_flush()
        self.maybe_resume_protocol()
        if not self.write_queue and self.closing and not self.conn_lost:
            self.conn_lost += 1
            self.loop.soon(call_connection_lost, (self, None))
        return 0

    cdef int send_op_done(self, DatagramSend op) except -1:
        """op's last completion came (or it never went): reuse it, unless
        the queue still holds it to send again."""
        if op.queued or op.life != OP_IDLE:
            return 0
        op.data = None
        return self.keep_send_op(op)

    def get_extra_info(self, name, default=None):
        """As BaseTransport; 'zerocopy' gives the zero-copy statistics,
        'send_chains' those of the chained sends."""
        if name == 'zerocopy':
            return self.zc.stats()
        if name == 'send_chains':
            # chains of linked sends written, their links, and the links
            # refused (EAGAIN) or cancelled with them, sent again later
            return {'chains': self.chains, 'links': self.links,
                    'links_sent_again': self.links_again}
        return self.extra.get(name, default)

    cdef datagram_failed(self, DatagramSend op, object exc):
        """The head datagram could not be sent: the protocol hears of it,
        as from the selector loop, and so does a zero-copy send's future."""
        self.queue_popleft()
        op.queued = False
        self.write_buffer_size -= op.iov.iov_len
        if type(op.data) is ZeroCopyFuture:
            (<ZeroCopyFuture>op.data).fail(exc)
        self.send_op_done(op)
        self.protocol.error_received(exc)

    cdef int drop_queue(self, object exc) except -1:
        cdef DatagramSend op
        for op in self.write_queue:
            op.queued = False
            if type(op.data) is ZeroCopyFuture:
                (<ZeroCopyFuture>op.data).fail(exc)
            self.send_op_done(op)
        self.write_queue.clear()
        self.write_buffer_size = 0
        return 0

    cdef int send_queued_now(self) except -1:
        """abort() (or a fatal error) before the loop's next enter, with
        datagrams queued for its chain: the selector loop sent them inside
        sendto(), so they leave now, each with send(2) or sendto(2), until
        the socket buffer is full; only the rest is lost, as there.  Plain
        datagrams only, in order: a zero-copy one stops it.  An error goes
        to error_received(), before connection_lost(), as sendto()'s did
        there; the next datagram is still sent."""
        cdef DatagramSend op
        cdef ssize_t n
        for op in self.write_queue:
            if type(op.data) is not bytes or op.life != OP_IDLE:
                break
            n = self.send_direct(<char *>op.iov.iov_base, op.iov.iov_len,
                                 &op.addr, op.addrlen)
            if n >= 0:
                continue
            if would_block(n):
                break
            # not at once: the protocol may close or abort the transport
            # from it, and this is the middle of abort()
            self.loop.call_soon(self.protocol.error_received, convert_error(n))
        return 0

    def close(self):
        """Stop receiving; send what is queued, then connection_lost."""
        if self.closing or self.closed_with_loop():
            return
        self.closing = True
        self.enter_closed()
        self.loop.cancel_op(self.recv_op)
        if not self.write_queue:
            self.conn_lost += 1
            self.loop.soon(call_connection_lost, (self, None))

    cdef int enter_closed(self) except -1:
        if self.read_state != DGRAM_CLOSED:
            self.set_read_state(DGRAM_CLOSED)
        return 0

    cdef int stop_io(self) except -1:
        self.enter_closed()
        if (self.flush_scheduled and self.write_queue and not self.blocked
                and not self.links_in_flight and self.socket_holds_fd()):
            self.send_queued_now()
        self.drop_queue(ConnectionAbortedError('the transport was aborted'))
        if self.links_in_flight or self.writable_op.life != OP_IDLE:
            # sends in flight are requests of their own: cancel every
            # request on the fd (the receive goes too)
            self.loop.cancel_fd(self.fd)
        else:
            self.loop.cancel_op(self.recv_op)
        return 0

    cdef int release_ops(self) except -1:
        cdef DatagramSend op = self.spare_ops
        self.recv_op.transport = None
        self.writable_op.transport = None
        while op is not None:
            op.transport = None
            op = op.next_spare
        return 0


cdef DatagramTransport new_datagram_transport(RingLoop loop, object sock,
                                              object protocol, object address,
                                              object waiter, object extra):
    cdef DatagramTransport tr = make_transport(DatagramTransport)
    tr.count_in(loop)
    tr.sock = sock
    tr.fd = sock.fileno()
    tr.extra = socket_extra(sock, extra)
    tr.address = address
    tr.protocol = protocol
    tr.protocol_connected = True
    tr.write_queue = collections.deque()
    tr.queue_append = tr.write_queue.append
    tr.queue_popleft = tr.write_queue.popleft
    tr.chain_limit = CHAIN_MAX
    tr.set_limits(None, None)
    # Auto mode: SEND_ZC from DATAGRAM_ZC_THRESHOLD up (the figures are
    # there), except to a peer on this host, where the kernel copies anyway;
    # an unconnected socket sending to one finds out from the copied
    # reports and turns zero-copy off (ZeroCopyPolicy).
    tr.zc = new_policy(loop, sock, None, DATAGRAM_ZC_THRESHOLD)
    if sock.family == socket.AF_UNIX:
        tr.zc.turn_off('AF_UNIX sockets have no zero-copy send')
    elif (address is not None and tr.zc.mode == ZC_AUTO
            and is_local_peer(tr.extra.get('peername'), tr.extra.get('sockname'))):
        tr.zc.turn_off(LOCAL_PEER_REASON, False)
    tr.extra['socket'] = UringTransportSocket(sock, tr.zc)
    tr.context = PyContext_CopyCurrent()
    tr.writable_op = DatagramWritable.__new__(DatagramWritable)
    tr.writable_op.loop = loop
    tr.writable_op.context = tr.context
    tr.writable_op.transport = tr
    tr.recv_op = DatagramRecv.__new__(DatagramRecv)
    tr.recv_op.context = tr.context
    tr.recv_op.loop = loop
    tr.recv_op.transport = tr
    tr.register()
    loop.call_soon(protocol.connection_made, tr)
    loop.call_soon(tr._start_reading_cb)
    if waiter is not None:
        loop.call_soon(futures._set_result_unless_cancelled, waiter, None)
    return tr
