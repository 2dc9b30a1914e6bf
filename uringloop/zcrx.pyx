# Zero-copy receive (io_uring zcrx, Linux 6.15+) for stream servers.
#
# Why a dedicated ring: zcrx needs a ring with DEFER_TASKRUN and 32-byte CQEs
# (RECV_ZC puts the buffer's area offset in the CQE's second half).  Giving
# the loop's own ring CQE32 would double its completion memory and the bytes
# reaped for every request of every transport, for the sake of one kind of
# request; so each ZeroCopyReceive makes a second ring with CQE32 |
# DEFER_TASKRUN | SINGLE_ISSUER that carries the registration and the
# RECV_ZC requests, and whose fd the loop's ring watches.
#
# What works here: the registration attempt (IORING_REGISTER_ZCRX_IFQ with an
# area and a refill queue), its documented fall-back, and the refill-queue
# bookkeeping (RefillQueue, tested on real memory in the kernel's layout).
# No NIC of the development machine supports zcrx (loopback, veth and
# virtio-net refuse the registration), so connections always receive with
# the ordinary multishot RECV today; the RECV_ZC data path is the next step
# and cannot be run against a kernel data path here.

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

    def give(self, uint64_t off, uint32_t length):
        """Queue the piece a RECV_ZC completion named (off = area_id << 48 |
        offset, length) for return; False when the queue is full (the kernel
        has not consumed enough yet).  commit() publishes."""
        return ul_zcrx_rq_give(&self.rq, off, length) == 0

    def commit(self):
        """Publish the queued pieces to the kernel (a release store of the
        tail index)."""
        ul_zcrx_rq_commit(&self.rq)

    @property
    def depth(self):
        """Pieces queued that the kernel has not consumed yet."""
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
        cdef ul_zcrx_rqe *rqe = &self.rq.rqes[index & (self.rq.entries - 1)]
        return rqe.off, rqe.len


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


cdef class ZeroCopyReceive:
    """Zero-copy receive for the connections of one stream server: payloads
    land, without a copy, in an area bound to NIC receive queue `queue` of
    `interface` (io_uring zcrx, Linux 6.15+, CAP_NET_ADMIN).

    Attach it to a listening socket before serving:

        zcrx = uringloop.ZeroCopyReceive("eth0", queue=8, area_size=64 << 20)
        uringloop.set_zerocopy(listener, receive=zcrx)
        server = await loop.create_server(Protocol, sock=listener)

    The NIC must be prepared (see README, "Zero-copy receive"): header/data
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
        if not 1 <= refill_entries <= 32768 or refill_entries & (refill_entries - 1):
            raise ValueError(f'refill_entries must be a power of two up to 32768, '
                             f'not {refill_entries}')
        self.interface = interface
        self.queue = queue
        self.area_size = (area_size + 4095) & ~4095
        self.refill_entries = refill_entries

    def register(self):
        """Try the registration once (later calls return the first answer):
        True when the kernel bound the queue.  Never raises for a refusal:
        the reason is in .reason and logged once."""
        if not self.tried:
            self.tried = True
            try:
                self.attempt()
            except OSError as exc:
                if exc.errno is None:           # if_nametoindex: no such device
                    self.reason = f'{exc}: {self.interface!r}'
                else:
                    name = 'EOPNOTSUPP' if exc.errno == _errno.EOPNOTSUPP else \
                        _errno.errorcode.get(exc.errno, str(exc.errno))
                    self.reason = f'{name}: {exc.strerror}'
                    hint = _ERRNO_HINTS.get(exc.errno)
                    if hint:
                        self.reason += f'; {hint}'
            if self.reason is not None:
                logger.warning('uringloop: zero-copy receive on %s queue %d is off, '
                               'ordinary receives instead: %s',
                               self.interface, self.queue, self.reason)
        return self.registered

    cdef int attempt(self) except -1:
        cdef int ret
        cdef ul_zcrx_ifq_reg reg
        cdef ul_zcrx_area_reg area_reg
        cdef Py_buffer area_view, region_view
        cdef size_t region_size
        ifindex = socket.if_nametoindex(self.interface)      # OSError: no device
        ret = ul_ring_init(&self.ring, 64, 4096, UL_SETUP_CQE32 | IORING_SETUP_DEFER_TASKRUN
                           | IORING_SETUP_SINGLE_ISSUER)
        if ret < 0:
            raise OSError(-ret, f'cannot make the zero-copy receive ring: {os.strerror(-ret)}')
        self.ring_open = True
        if not (self.ring.setup_flags & UL_SETUP_CQE32) or \
                not (self.ring.setup_flags & IORING_SETUP_DEFER_TASKRUN):
            self.release_ring()
            raise OSError(_errno.EINVAL, 'the kernel refused a CQE32 | DEFER_TASKRUN ring')
        # region: the kernel's head/tail header, then the entries
        region_size = (4096 + self.refill_entries * sizeof(ul_zcrx_rqe) + 4095) & ~(<size_t>4095)
        self.area = _mmap.mmap(-1, self.area_size)
        self.region = _mmap.mmap(-1, region_size)
        hold_view(self.area, &area_view, PyBUF_WRITABLE)
        hold_view(self.region, &region_view, PyBUF_WRITABLE)
        try:
            ret = ul_zcrx_register(&self.ring, ifindex, self.queue, self.refill_entries,
                                   area_view.buf, self.area_size,
                                   region_view.buf, region_size, &reg, &area_reg)
        finally:
            drop_view(&area_view)
            drop_view(&region_view)
        if ret < 0:
            self.release_ring()
            raise OSError(-ret, os.strerror(-ret))
        self.registered = True
        self.zcrx_id = reg.zcrx_id
        self.area_token = area_reg.rq_area_token
        self.refill = RefillQueue(self.region, reg.offsets.head, reg.offsets.tail,
                                  reg.offsets.rqes, self.refill_entries)
        self.reason = ('the queue is registered, but this version receives with '
                       'ordinary RECV: the RECV_ZC data path is not implemented yet')
        return 0

    cdef release_ring(self):
        if self.ring_open:
            ul_ring_exit(&self.ring)
            self.ring_open = False
        for memory in (self.area, self.region):
            if memory is not None:
                memory.close()
        self.area = self.region = None

    def close(self):
        """Unbind the queue and free the area (closing the ring does both)."""
        self.refill = None
        self.release_ring()
        self.registered = False

    def __dealloc__(self):
        if self.ring_open:
            ul_ring_exit(&self.ring)
            self.ring_open = False

    @property
    def active(self):
        """True while connections receive without copying."""
        return False        # see the module comment: no RECV_ZC data path yet

    def stats(self):
        return {
            'interface': self.interface,
            'queue': self.queue,
            'area_size': self.area_size,
            'registered': self.registered,
            'active': self.active,
            'reason': self.reason,
            'zerocopy_bytes': 0,
            'refill_depth': self.refill.depth if self.refill is not None else 0,
        }

    def __repr__(self):
        state = 'active' if self.active else f'off: {self.reason or "not tried yet"}'
        return f'<ZeroCopyReceive {self.interface} queue {self.queue}, {state}>'
