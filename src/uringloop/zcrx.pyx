# Zero-copy receive (io_uring zcrx, Linux 6.15+) for stream servers.
#
# Why a dedicated ring: zcrx needs a ring with DEFER_TASKRUN and 32-byte CQEs
# (RECV_ZC puts the buffer's area offset in the CQE's second half).  Giving
# the loop's own ring CQE32 would double its completion memory and the bytes
# reaped for every request of every transport, for the sake of one kind of
# request; so each ZeroCopyReceive makes a second ring (a Ring, as the
# loop's: ring.pyx) with CQE32 | DEFER_TASKRUN | SINGLE_ISSUER that carries
# the registration and the RECV_ZC requests, tagged with per-connection
# tokens.  An eventfd registered on that ring is watched by the
# loop (add_reader): the kernel signals it when RECV_ZC work is queued for
# us; the callback enters the ring (which runs that work and posts the
# CQEs), reaps the 32-byte completions and hands each piece to its
# connection.
#
# The data path.  Each accepted connection of a registered server arms one
# multishot RECV_ZC.  A completion names a piece of the area (off, res); the
# connection's protocol gets it either as a ZeroCopyPiece -- a read-only
# buffer, when the protocol has a zerocopy_received(piece) method -- or as
# ordinary bytes (one copy, then the piece goes straight back).  A piece goes
# back through the refill queue when the callback has returned and no view
# of it is alive, or, after piece.hold(), on piece.release().  The area the
# held pieces pin is counted (a page per piece at least: a 100-byte piece
# still holds its whole buffer); past high_water (half the area) the
# connection that just received stops its RECV_ZC, and every connection so
# stopped starts again once that falls under low_water (a quarter):
# the area never runs dry under a slow protocol, TCP throttles the peer.
#
# What ran here: the registration attempt and its documented fall-back, the
# refill-queue bookkeeping, and the data path from the completion onward on
# a simulated area (ZeroCopyReceive._simulated(): real memory in the
# kernel's layout, a real CQE32 ring and eventfd, completions fed by the
# test in place of a NIC).  No NIC of the development machine supports zcrx
# (loopback, veth and virtio-net refuse the registration), so RECV_ZC itself
# has not run against a kernel data path.

import mmap as _mmap


cdef class RefillQueue:
    """The user side of a zcrx refill queue: pieces of the area that the
    protocol is done with go back to the kernel through it.

    `memory` is the region (any writable buffer: the mmap registered with
    the kernel, or plain memory in tests); head, tail and rqes are the byte
    offsets the kernel reported in struct io_uring_zcrx_offsets; entries is
    a power of two."""

    def __init__(self, memory, unsigned head, unsigned tail, unsigned rqes, unsigned entries):
        cdef ul_zcrx_offsets offsets
        if self.has_view:
            raise RuntimeError('RefillQueue is already initialised')
        if entries == 0 or entries & (entries - 1):
            raise ValueError(f'entries must be a power of two, not {entries}')
        try:
            hold_view(memory, &self.view, PyBUF_WRITABLE)
        except BufferError:
            raise TypeError('the refill region must be writable memory') from None
        self.has_view = True
        self.memory = memory
        if (max(head, tail) + 4 > <size_t>self.view.len
                or rqes + <size_t>entries * sizeof(ul_zcrx_rqe) > <size_t>self.view.len
                or head % 4 or tail % 4 or rqes % 8):
            raise ValueError('the offsets do not fit the region')
        offsets.head = head
        offsets.tail = tail
        offsets.rqes = rqes
        ul_zcrx_rq_init(&self.rq, self.view.buf, &offsets, entries)

    def __dealloc__(self):
        if self.has_view:
            self.has_view = False
            drop_view(&self.view)

    cdef int check_ready(self) except -1:
        # (made with __new__ alone, or __init__ failed: no ring to touch)
        if not self.has_view or self.rq.entries == 0:
            raise ValueError('RefillQueue is not initialised')
        return 0

    def give(self, uint64_t off, uint32_t length):
        """Queue the piece a RECV_ZC completion named (off = area_id << 48 |
        offset, length) for return; False when the queue is full (the kernel
        has not consumed enough yet).  commit() publishes.  Raises
        ValueError on a queue that was never initialised."""
        self.check_ready()
        return ul_zcrx_rq_give(&self.rq, off, length) == 0

    def commit(self):
        """Publish the queued pieces to the kernel (a release store of the
        tail index)."""
        self.check_ready()
        ul_zcrx_rq_commit(&self.rq)

    @property
    def depth(self):
        """Pieces queued that the kernel has not consumed yet."""
        self.check_ready()
        return ul_zcrx_rq_depth(&self.rq)

    @property
    def entries(self):
        return self.rq.entries

    @property
    def tail(self):
        """Our producer index (wraps at 2**32, as the kernel's does)."""
        return self.rq.tail

    def entry(self, unsigned index):
        """(off, len) of slot `index` of the ring."""
        self.check_ready()
        cdef ul_zcrx_rqe *rqe = &self.rq.rqes[index & (self.rq.entries - 1)]
        return rqe.off, rqe.len


# no_gc_clear: a piece caught in a cycle must still reach its owner in
# __dealloc__ to give its bytes back to the kernel.
@cython.final
@cython.no_gc_clear
cdef class ZeroCopyPiece:
    """Bytes a connection received into a zero-copy receive area, without a
    copy: a read-only buffer (memoryview(piece), bytes(piece), len(piece)).

    A protocol with a zerocopy_received(piece) method gets these instead of
    data_received(bytes).  The piece goes back to the kernel when that
    callback has returned and no memoryview of it is alive any more -- so a
    view kept past the callback keeps the bytes valid until it is released.
    piece.hold() keeps it without a view until piece.release().  Reading a
    piece that went back raises ValueError."""

    def __getbuffer__(self, Py_buffer *view, int flags):
        if self.owner is None:
            raise ValueError('the piece was given back to the kernel')
        if flags & PyBUF_WRITABLE:
            raise BufferError('a zero-copy receive piece is read-only')
        PyBuffer_FillInfo(view, self, self.ptr, self.length, 1, flags)
        self.exports += 1

    def __releasebuffer__(self, Py_buffer *view):
        self.exports -= 1
        if self.exports == 0 and self.delivered and not self.held:
            self.give_back()

    def __len__(self):
        return self.length

    def __bytes__(self):
        return self.tobytes()

    def tobytes(self):
        """A copy of the bytes."""
        if self.owner is None:
            raise ValueError('the piece was given back to the kernel')
        return PyBytes_FromStringAndSize(self.ptr, self.length)

    @property
    def returned(self):
        """True once the bytes went back to the kernel."""
        return self.owner is None

    def hold(self):
        """Keep the piece after the callback returns, until release()."""
        if self.owner is None:
            raise ValueError('the piece was given back to the kernel')
        self.held = True

    def release(self):
        """Give the bytes back to the kernel now.  Raises BufferError while a
        memoryview of the piece is alive; does nothing if already back."""
        if self.owner is None:
            return
        if self.exports:
            raise BufferError(f'{self.exports} view(s) of the piece are still alive')
        self.held = False
        self.give_back()

    cdef int delivered_now(self) except -1:
        self.delivered = True
        if self.exports == 0 and not self.held:
            self.give_back()
        return 0

    cdef int give_back(self) except -1:
        cdef ZeroCopyReceive owner = self.owner
        if owner is None:
            return 0
        self.owner = None
        UL_COUNT(UL_LIVE_ZCRX_PIECES, -1)
        owner.give(self.rqe_off, self.length)
        return 0

    def __dealloc__(self):
        if self.owner is not None:
            try:
                self.give_back()
            except BaseException:
                pass

    def __repr__(self):
        state = 'given back' if self.owner is None else ('held' if self.held else 'live')
        return f'<ZeroCopyPiece {self.length} bytes, {state}>'


def zcrx_offset(unsigned area_id, uint64_t offset):
    """The off value of a zcrx CQE or refill entry: area_id << 48 | offset."""
    if offset > UL_ZCRX_OFFSET_MASK:
        raise ValueError('offset does not fit in 48 bits')
    return (<uint64_t>area_id << UL_ZCRX_AREA_SHIFT) | offset


def zcrx_split(uint64_t off):
    """(area_id, offset) of an off value."""
    return off >> UL_ZCRX_AREA_SHIFT, off & UL_ZCRX_OFFSET_MASK


_ERRNO_HINTS = {
    _errno.EPERM: 'needs CAP_NET_ADMIN',
    _errno.EOPNOTSUPP: 'the device has no queue management for zero-copy receive '
                       '(loopback, veth and virtio-net have none)',
    _errno.EINVAL: 'the device or queue cannot do zero-copy receive as set up '
                   '(check tcp-data-split on, hds-thresh 0, the queue index)',
    _errno.ENODEV: 'no such device or queue',
    _errno.ENOMEM: 'not enough memory to pin the area (RLIMIT_MEMLOCK)',
}


cdef inline Py_ssize_t area_cost(Py_ssize_t length):
    """Area a piece pins: every piece is its own buffer of the area, a
    page at least (the kernel hands the NIC page-sized buffers and returns
    each through one refill entry), so 100 held bytes pin 4 KiB."""
    return (length + 4095) & ~(<Py_ssize_t>4095)


cdef class ZeroCopyReceive:
    """Zero-copy receive for the connections of one stream server: payloads
    land, without a copy, in an area bound to NIC receive queue `queue` of
    `interface` (io_uring zcrx, Linux 6.15+, CAP_NET_ADMIN).

    Attach it to a listening socket before serving:

        zcrx = uringloop.ZeroCopyReceive("eth0", queue=8, area_size=64 << 20)
        uringloop.set_zerocopy(listener, receive=zcrx)
        server = await loop.create_server(Protocol, sock=listener)

    The NIC must be prepared (see docs/zerocopy-receive.md): header/data
    split on (ethtool -G eth0 tcp-data-split on hds-thresh 0) and a flow
    steering rule sending the port's flows to that queue.  When the kernel
    refuses the registration the server still serves with ordinary receives;
    .reason says why (also logged once) and every connection's
    get_extra_info('zerocopy_receive') shows it.  Raises ValueError or
    TypeError for bad arguments, never at accept time."""

    def __init__(self, interface, *, queue=0, area_size=64 << 20, refill_entries=4096):
        if not isinstance(interface, str) or not interface:
            raise TypeError(f'interface must be a device name, not {interface!r}')
        queue = PyNumber_Index(queue)
        area_size = PyNumber_Index(area_size)
        refill_entries = PyNumber_Index(refill_entries)
        if not 0 <= queue < 65536:
            raise ValueError(f'queue out of range: {queue}')
        if not 4096 <= area_size <= 1 << 40:
            raise ValueError(f'area_size must be 4 KiB..1 TiB, not {area_size}')
        memory = os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE')
        if area_size > memory // 2:
            # the kernel pins the whole area: it must fit in memory
            raise ValueError(f'area_size {area_size} is more than half of this '
                             f'machine\'s memory ({memory} bytes)')
        if not 1 <= refill_entries <= 32768 or refill_entries & (refill_entries - 1):
            raise ValueError(f'refill_entries must be a power of two up to 32768, '
                             f'not {refill_entries}')
        self.interface = interface
        self.queue = queue
        self.area_size = (area_size + 4095) & ~4095
        self.refill_entries = refill_entries
        self.high_water = self.area_size // 2
        self.low_water = self.area_size // 4

    def register(self):
        """Try the registration once (later calls return the first answer):
        True when the kernel bound the queue.  Never raises for a refusal:
        the reason is in .reason and logged once."""
        if not self.tried:
            self.tried = True
            try:
                self.attempt()
            except RuntimeError as exc:
                self.reason = str(exc)
            except OSError as exc:
                name = 'EOPNOTSUPP' if exc.errno == _errno.EOPNOTSUPP else \
                    _errno.errorcode.get(exc.errno, str(exc.errno))
                self.reason = f'{name}: {exc.strerror}'
                hint = _ERRNO_HINTS.get(exc.errno)
                if hint:
                    self.reason += f'; {hint}'
            if self.reason is not None:
                self.log_off()
        return self.registered

    cdef log_off(self):
        logger.warning('uringloop: zero-copy receive on %s queue %d is off, '
                       'ordinary receives instead: %s', self.interface, self.queue, self.reason)

    cdef int open_ring(self) except -1:
        """The dedicated CQE32 | DEFER_TASKRUN ring and its eventfd."""
        cdef int ret, fd
        # R_DISABLED: the loop thread that first serves a connection through
        # it becomes the ring's single issuer (bind()), whichever thread
        # made the ZeroCopyReceive or called register().
        ret = self.ring.setup(64, 4096, UL_SETUP_CQE32 | IORING_SETUP_DEFER_TASKRUN
                              | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_R_DISABLED, False)
        if ret < 0:
            raise OSError(-ret, f'cannot make the zero-copy receive ring: {os.strerror(-ret)}')
        if not (self.ring.r.setup_flags & UL_SETUP_CQE32) or \
                not (self.ring.r.setup_flags & IORING_SETUP_DEFER_TASKRUN):
            self.release_ring()
            raise OSError(_errno.EINVAL, 'the kernel refused a CQE32 | DEFER_TASKRUN ring')
        fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)
        if fd < 0:
            err = errno
            self.release_ring()
            raise OSError(err, 'eventfd failed')
        self.efd = fd
        ret = ul_ring_register(&self.ring.r, IORING_REGISTER_EVENTFD, &fd, 1)
        if ret < 0:
            self.release_ring()
            raise OSError(-ret, f'cannot register the eventfd: {os.strerror(-ret)}')
        return 0

    cdef int attempt(self) except -1:
        cdef int ret
        cdef ul_zcrx_ifq_reg reg
        cdef ul_zcrx_area_reg area_reg
        cdef Py_buffer area_view, region_view
        cdef size_t region_size
        try:
            ifindex = socket.if_nametoindex(self.interface)
        except OSError:
            # (no errno before 3.14, ENODEV since: one reason for both)
            raise RuntimeError(f'no interface with this name: {self.interface!r}') from None
        self.open_ring()
        try:
            # region: the kernel's head/tail header, then the entries
            region_size = (4096 + self.refill_entries * sizeof(ul_zcrx_rqe)
                           + 4095) & ~(<size_t>4095)
            try:
                self.area = _mmap.mmap(-1, self.area_size)
                self.region = _mmap.mmap(-1, region_size)
            except OSError as exc:
                raise RuntimeError(f'cannot map the {self.area_size}-byte area: '
                                   f'{exc.strerror}') from None
            hold_view(self.area, &area_view, PyBUF_WRITABLE)
            hold_view(self.region, &region_view, PyBUF_WRITABLE)
            try:
                ret = ul_zcrx_register(&self.ring.r, ifindex, self.queue, self.refill_entries,
                                       area_view.buf, self.area_size,
                                       region_view.buf, region_size, &reg, &area_reg)
                self.area_base = <char *>area_view.buf
            finally:
                drop_view(&area_view)
                drop_view(&region_view)
            if ret < 0:
                raise OSError(-ret, os.strerror(-ret))
        except BaseException:
            # nothing of a failed attempt stays open: ring, eventfd, area
            self.release_ring()
            raise
        self.registered = True
        self.reason = None
        self.zcrx_id = reg.zcrx_id
        self.area_token = area_reg.rq_area_token
        self.refill = RefillQueue(self.region, reg.offsets.head, reg.offsets.tail,
                                  reg.offsets.rqes, self.refill_entries)
        return 0

    cdef release_ring(self):
        if self.efd >= 0:
            os.close(self.efd)
            self.efd = -1
        self.ring.close()                  # unbinds the queue
        # The area stays mapped while a piece still refers to it (pieces
        # keep the mmap object); only our references go.
        self.area = self.region = None
        self.area_base = NULL

    def area_memory(self):
        """Tests only (a simulated queue, SimulatedZeroCopyReceive): the
        area, writable, as the NIC sees it."""
        if not self.simulated:
            raise RuntimeError('only a simulated zero-copy receive exposes its area')
        return memoryview(self.area)

    # -- the data path -------------------------------------------------------

    cdef bint serves(self, RingLoop loop) noexcept:
        """True when connections of `loop` can receive through this queue:
        registered, and bound to that loop (the ring has one issuer thread)."""
        return self.registered and self.ring.open and (self.loop is None or self.loop is loop)

    cdef bint bind(self, RingLoop loop) except -1:
        """Serve connections of `loop`: True, or False (with the reason)
        when the ring cannot be enabled for its thread."""
        cdef int ret
        if self.loop is loop:
            return True
        try:
            self.ring.enable()          # this thread issues from now on
        except OSError as exc:
            self.release_ring()
            self.registered = False
            self.reason = str(exc)
            self.log_off()
            return False
        self.loop = loop
        loop.zcrx_users.append(self)
        add_watch(loop, loop.readers, self.efd, POLLIN, self._on_ready, ())
        return True

    cdef bint arm(self, ZeroCopyReader reader) except -1:
        """Write the reader's multishot RECV_ZC on this queue's ring, tagged
        with the reader as on the loop's ring (RingLoop.track); False when
        the queue is closed or draining (the connection then receives
        ordinarily)."""
        cdef io_uring_sqe *sqe
        if not self.ring.open or self.draining:
            return False
        sqe = self.ring.sqe()
        ul_prep_recv_zc(sqe, reader.transport.fd, self.zcrx_id)
        self.loop.track(reader, sqe)
        self.readers.add(reader)
        if not self.in_batch:
            self.submit()
        return True

    cdef int disarm(self, ZeroCopyReader reader) except -1:
        if self.ring.cancel_op(reader) and not self.in_batch:
            self.submit()
        return 0

    cdef int submit(self) except -1:
        """Submit what is queued, and run the RECV_ZC work the kernel
        deferred to this ring's thread (DEFER_TASKRUN)."""
        return self.ring.submit()

    def _on_ready(self):
        if not self.ring.open:
            return
        # drain the eventfd (non-blocking); a spurious wakeup reaps nothing
        try:
            os.read(self.efd, 8)
        except BlockingIOError:
            pass
        self.reap()

    cdef int reap(self) except -1:
        """Each completion of this ring goes to its reader through the loop's
        one dispatch (its context, its exception handling), with the
        piece's area offset from the CQE32's second half."""
        cdef CqeCopy c
        cdef unsigned rounds = 0
        cdef Operation op
        self.submit()               # runs the queued RECV_ZC work: CQEs appear
        self.in_batch = True
        try:
            while rounds < 4 * self.ring.r.cq_entries and self.ring.next_cqe(&c):
                rounds += 1
                if c.user_data != 0:
                    op = <Operation><PyObject *><uintptr_t>c.user_data
                    if type(op) is ZeroCopyReader:
                        (<ZeroCopyReader>op).cqe_off = c.extra
                    self.loop.dispatch(op, c.res, c.flags)
        finally:
            self.in_batch = False
        self.commit()
        self.submit()               # the re-arms and cancels queued meanwhile
        return 0

    cdef ZeroCopyPiece new_piece(self, uint64_t off, int32_t res):
        """The piece a RECV_ZC completion names: res bytes at off."""
        cdef ZeroCopyPiece piece = ZeroCopyPiece.__new__(ZeroCopyPiece)
        piece.owner = self
        piece.area = self.area
        piece.ptr = <char *>ul_zcrx_data(self.area_base, off)
        piece.rqe_off = ul_zcrx_rqe_off(off, self.area_token)
        piece.length = <uint32_t>res
        UL_COUNT(UL_LIVE_ZCRX_PIECES, 1)
        self.outstanding_bytes += res
        self.held_area += area_cost(res)
        self.zerocopy_bytes += res
        self.pieces += 1
        return piece

    cdef bint past_high_water(self) noexcept:
        """The held pieces pin more than high_water of the area: the
        connection that received stops until give() brings it under
        low_water."""
        return self.held_area > self.high_water

    cdef int refused(self, int32_t res) except -1:
        self.fallbacks += 1
        if self.fallbacks == 1:
            logger.warning('uringloop: RECV_ZC refused on %s queue %d (%s); that '
                           'connection receives ordinarily', self.interface,
                           self.queue, os.strerror(-res))
        return 0

    cdef int give(self, uint64_t off, uint32_t length) except -1:
        self.outstanding_bytes -= length
        self.held_area -= area_cost(length)
        if self.refill is None:
            return 0
        if self.returns_waiting or ul_zcrx_rq_give(&self.refill.rq, off, length) < 0:
            self.returns_waiting.append((off, length))
        if not self.in_batch:
            self.commit()
        if self.starved and self.held_area <= self.low_water:
            starved, self.starved = self.starved, []
            for reader in starved:
                (<ZeroCopyReader>reader).room_again()
        return 0

    cdef int commit(self) except -1:
        """Publish the queued returns; first move over those a full queue
        refused earlier, as far as the kernel has made room."""
        cdef Py_ssize_t i = 0, n
        cdef uint64_t off
        cdef uint32_t length
        if self.refill is None:
            return 0
        n = len(self.returns_waiting)
        while i < n:
            off, length = self.returns_waiting[i]
            if ul_zcrx_rq_give(&self.refill.rq, off, length) < 0:
                break
            i += 1
        if i:
            del self.returns_waiting[:i]
        ul_zcrx_rq_commit(&self.refill.rq)
        return 0

    cdef int drain(self) except -1:
        """Before unbinding with the loop still running: cancel every
        RECV_ZC and reap (for a second at most) until the kernel has ended
        them, so that what they received reaches the connections in order
        and each re-arms with an ordinary RECV (arm() refuses while
        draining).  Exiting the ring at once instead could let a RECV_ZC
        still take bytes from a socket after the ordinary RECV took over."""
        cdef double deadline = monotonic() + 1.0
        self.draining = True
        if not self.ring.open:
            return 0
        for reader in list(self.readers):
            self.disarm(reader)
        self.submit()
        while self.readers and monotonic() < deadline:
            self.ring.enter(1, 100000000)
            self.reap()
        return 0

    cdef int detach(self, bint rearm) except -1:
        """Unbind the queue: its ring closes, which ends every connection's
        RECV_ZC without a completion; with rearm (the loop runs on), those
        connections go on with ordinary receives.  Pieces still held stay
        readable (the area stays mapped while they live); giving them back
        then does nothing."""
        readers = list(self.readers) + [r for r in self.starved if r not in self.readers]
        self.readers = set()
        self.starved = []
        self.release_ring()
        for reader in readers:
            if (<ZeroCopyReader>reader).transport is not None:   # (release_ops)
                zc_off((<ZeroCopyReader>reader).transport, rearm)
        self.returns_waiting = []
        self.loop = None
        self.refill = None
        self.draining = False
        self.registered = False
        self.tried = False          # a later loop may register again
        self.reason = 'the loop it was bound to closed'
        return 0

    def close(self):
        """End zero-copy receive: connections still receiving through the
        queue see their receive end; the queue is unbound.  Pieces still
        held stay readable until dropped."""
        if self.loop is not None and self.efd >= 0:
            remove_watch(self.loop, self.loop.readers, self.efd)
            if self in self.loop.zcrx_users:
                self.loop.zcrx_users.remove(self)
        self.drain()
        self.detach(True)
        self.reason = 'closed'
        self.tried = True

    def __cinit__(self, *args, **kwargs):
        self.ring = new_ring('the zero-copy receive ring',
                             'the zero-copy receive ring is not open')
        self.efd = -1
        self.readers = set()
        self.returns_waiting = []
        self.starved = []

    def __dealloc__(self):
        if self.efd >= 0:
            os.close(self.efd)
            self.efd = -1
        # (the Ring unmaps itself when collected)

    @property
    def active(self):
        """True while connections can receive without copying."""
        return self.registered and self.ring.open

    def stats(self):
        """Totals for the whole queue (every connection of the server)."""
        return {
            'interface': self.interface,
            'queue': self.queue,
            'area_size': self.area_size,
            'registered': self.registered,
            'active': self.active,
            'reason': self.reason,
            'zerocopy_bytes': self.zerocopy_bytes,
            'pieces': self.pieces,
            'held_bytes': self.outstanding_bytes,
            'held_area': self.held_area,
            'refill_depth': self.refill.depth if self.refill is not None else 0,
            'refill_waiting': len(self.returns_waiting),
            'stopped_for_area': len(self.starved),
            'refused_connections': self.fallbacks,
        }

    def __repr__(self):
        state = 'active' if self.active else f'off: {self.reason or "not tried yet"}'
        return f'<ZeroCopyReceive {self.interface} queue {self.queue}, {state}>'
