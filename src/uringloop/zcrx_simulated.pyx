# SimulatedZeroCopyReceive: a zero-copy receive queue for tests, with no NIC
# behind it.  Included by core.pyx after zcrx.pyx; not part of the public API
# (tests import it from uringloop.core).
#
# No NIC of the development machine supports zcrx (lo, veth and virtio-net
# refuse the registration), so the data path from the completion onward
# runs here on a simulated area: real memory in the kernel's layout, a real
# CQE32 ring and eventfd, and completions fed by the test where the NIC and
# the kernel would post them.  Only arming and cancelling differ from the
# real queue (no RECV_ZC is written: the tests feed its completions).


@cython.final
cdef class SimulatedZeroCopyReceive(ZeroCopyReceive):

    @classmethod
    def make(cls, *, area_size=1 << 20, refill_entries=64, area_id=3):
        """A queue whose area and refill queue are real memory in the
        kernel's layout (head at 0, tail at 4, entries at 64) with a real
        CQE32 ring and eventfd, but no NIC queue behind it.  The test writes
        payload into area_memory() and calls feed() where the kernel would
        post a RECV_ZC completion."""
        cdef SimulatedZeroCopyReceive self = cls('simulated', area_size=area_size,
                                                 refill_entries=refill_entries)
        cdef Py_buffer view
        self.tried = True
        self.simulated = True
        self.open_ring()
        self.area = _mmap.mmap(-1, self.area_size)
        self.region = _mmap.mmap(-1, 4096 + self.refill_entries * sizeof(ul_zcrx_rqe))
        hold_view(self.area, &view, PyBUF_WRITABLE)
        self.area_base = <char *>view.buf
        drop_view(&view)
        self.refill = RefillQueue(self.region, 0, 4, 64, self.refill_entries)
        self.area_token = <uint64_t>area_id << UL_ZCRX_AREA_SHIFT
        self.registered = True
        return self

    def region_memory(self):
        """The refill queue region (head at 0, tail at 4, entries at 64), to
        play the kernel's side of it."""
        return memoryview(self.region)

    def feed(self, transport, int32_t res, uint64_t offset, bint more=True):
        """What a RECV_ZC completion for transport does: res bytes at offset
        in the area, F_MORE set unless more is False -- through the loop's
        dispatch, as reap() hands over the kernel's."""
        cdef StreamTransport tr = transport
        cdef ZeroCopyReader reader
        if tr.reader.mode != READS_ZEROCOPY or tr.reader.life == OP_IDLE:
            raise ValueError('the transport has no receive armed on this queue')
        reader = tr.reader
        reader.cqe_off = (self.area_token | offset) if res > 0 else 0
        self.loop.dispatch(reader, res, IORING_CQE_F_MORE if more else 0)
        self.commit()

    def post_end_of_stream(self, transport, double delay=0.002):
        """Make the kernel post, after `delay` seconds, a completion on the
        queue's ring that ends the transport's RECV_ZC with res 0 -- what
        RECV_ZC posts at end of stream.  It is a NOP linked behind a
        TIMEOUT (whose expiry does not break the link): like a RECV_ZC
        completion it is issued from the kernel's deferred task work, which
        signals the eventfd, and the loop must enter the ring to see it."""
        cdef StreamTransport tr = transport
        cdef SimulatedEnd end
        cdef __kernel_timespec ts
        cdef io_uring_sqe *sqe
        if not self.ring.open:
            raise RuntimeError('the simulated zero-copy receive is closed')
        if tr.reader.mode != READS_ZEROCOPY:
            raise ValueError('the transport does not receive through this queue')
        if ul_sq_space(&self.ring.r) < 2:
            self.submit()
        ts.tv_sec = <int64_t>delay
        ts.tv_nsec = <long long>((delay - ts.tv_sec) * 1e9)
        sqe = self.ring.sqe()
        ul_prep_timeout_keep_link(sqe, &ts)
        ul_sqe_set_flags(sqe, IOSQE_IO_LINK)
        ul_sqe_set_data(sqe, 0)
        end = SimulatedEnd.__new__(SimulatedEnd)
        end.loop = self.loop
        end.reader = tr.reader
        sqe = self.ring.sqe()
        ul_prep_nop(sqe)
        self.loop.track(end, sqe)
        self.submit()

    cdef bint arm(self, ZeroCopyReader reader) except -1:
        if not self.ring.open or self.draining:
            return False
        self.loop.track(reader, NULL)       # in flight until a fed final completion
        self.readers.add(reader)
        return True

    cdef int disarm(self, ZeroCopyReader reader) except -1:
        # what the kernel does for a cancelled RECV_ZC: a final completion
        if reader.life == OP_IN_FLIGHT:
            set_life(reader, OP_CANCELLING)
            self.loop.call_soon(self._cancelled, reader)
        return 0

    def _cancelled(self, ZeroCopyReader reader):
        if reader.life != OP_IDLE and self.loop is not None:
            self.loop.dispatch(reader, -ECANCELED, 0)
            self.commit()

    cdef int drain(self) except -1:
        self.draining = True        # (nothing in a kernel to wait for)
        return 0


@cython.final
cdef class SimulatedEnd(Operation):
    """The NOP of post_end_of_stream(): its completion ends the reader's
    RECV_ZC as the kernel's end-of-stream completion would, unless it has
    ended meanwhile."""
    cdef ZeroCopyReader reader

    cdef int complete(self, int32_t res, uint32_t flags) except -1:
        if self.reader.life != OP_IDLE:
            self.reader.cqe_off = 0
            self.loop.dispatch(self.reader, 0, 0)
        self.reader = None
        return 0
