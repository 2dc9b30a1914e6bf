# Ring: one io_uring instance, as the loop and each zero-copy receive queue
# use it.  Included by core.pyx; declared in core.pxd.
#
# The C layer (ring/ring.c, ring.h) maps the rings and makes the system
# calls; this class is what every owner of a ring needs on top of it, written
# once: a free SQE (submitting when the queue is full), submitting, entering
# to wait (the GIL kept when the call cannot sleep), turning a failed enter
# into an exception, a cancel request, taking the next completion out of the
# ring, enabling a ring made disabled, and closing.
#
# What a completion's user_data means is the owner's business, and so is
# what to do with it: the loop (core.pyx) tags a request with its Operation
# and dispatches to it; a ZeroCopyReceive (zcrx.pyx) tags its RECV_ZC
# requests with a per-connection token.  docs/design.md, "The life of a
# request", has both and the other exceptions to the rule.


@cython.final
cdef class Ring:
    """One io_uring: ring/ring.c's ul_ring and the calls every owner makes."""

    def __init__(self):
        raise TypeError("rings are made by the loop")

    cdef int setup(self, unsigned sq, unsigned cq, unsigned flags, bint shrink) except? -1:
        """Make the ring (ul_ring_init with the optional setup flags
        `flags`): 0, or the negative errno of a refused setup, for the
        owner to report.  With `shrink`, smaller rings are tried on ENOMEM."""
        cdef int ret, retries = 0
        while True:
            ret = ul_ring_init(&self.r, sq, cq, flags)
            if ret != -ENOMEM or not shrink:
                break
            if sq > MIN_SQ_ENTRIES:
                sq = max(sq // 4, MIN_SQ_ENTRIES)
                cq = max(cq // 4, sq * 4)
            elif retries < 20:
                # The kernel gives a closed ring's memory back from a work
                # queue, a moment later (features()'s probe ring, a loop just
                # closed): in a limit that fits one ring only, wait for it.
                retries += 1
                with nogil:
                    usleep(5000)
            else:
                break
        if ret < 0:
            return ret
        self.open = True
        self.enabled = not (self.r.setup_flags & IORING_SETUP_R_DISABLED)
        self.big_cqes = (self.r.setup_flags & UL_SETUP_CQE32) != 0
        self.driver = 'ring'
        self.driver_reason = ''
        return 0

    cdef int setup_epoll(self, unsigned sq, unsigned cq, str reason) except -1:
        """Make a ring of the same layout whose requests the epoll driver
        carries (ring/readiness.c): where the kernel refuses io_uring, or
        URINGLOOP_DRIVER=epoll asks for it (`reason` says which)."""
        cdef int ret = ul_ready_init(&self.r, sq, cq)
        if ret < 0:
            raise OSError(-ret, f"cannot make the epoll driver: {os.strerror(-ret)}")
        self.open = True
        self.enabled = True
        self.big_cqes = False
        self.driver = 'epoll'
        self.driver_reason = reason
        return 0

    cdef int enable(self) except -1:
        """A ring made with R_DISABLED takes requests from the thread that
        enables it (SINGLE_ISSUER): the first one to use it."""
        cdef int ret
        if self.enabled:
            return 0
        ret = ul_ring_enable(&self.r)
        if ret < 0:
            raise OSError(-ret, f"cannot enable {self.name}: {os.strerror(-ret)}")
        self.enabled = True
        return 0

    cdef io_uring_sqe *sqe(self) except NULL:
        """A zeroed SQE (user_data 0); when the queue is full, what is
        queued is submitted first."""
        cdef io_uring_sqe *sqe
        if not self.open:
            raise RuntimeError(self.closed_message)
        sqe = ul_get_sqe(&self.r)
        if sqe == NULL:
            self.submit_for_room()
            sqe = ul_get_sqe(&self.r)
            if sqe == NULL:
                raise RuntimeError(f"{self.name}: the submission queue stays full")
        return sqe

    cdef int submit_for_room(self) except -1:
        """Make room in a full submission queue: submit, without running
        the completion work the kernel deferred to us.  That work's
        completions wait for the iteration's own enter: run here, on a
        queue of a few entries, every few requests made, they fed the
        iteration that made them, and one iteration went on serving the
        connections it had while a listener's connections waited (issue
        #58, item 7).  A backed-up completion queue: as submit()."""
        cdef int ret
        self.enable()
        ret = ul_ring_submit_only(&self.r)
        if ret == -EBUSY or ret == -EAGAIN:
            return self.submit()
        if ret < 0 and ret != -EINTR:
            self.raise_enter_error(ret)
        return 0

    cdef int submit(self) except -1:
        """Hand the queued SQEs to the kernel now, without waiting (and
        run the completion work the kernel deferred to us)."""
        cdef int ret
        if not self.open:
            return 0
        self.enable()
        ret = ul_ring_enter(&self.r, 0, 0)
        if (ret == -EBUSY or ret == -EAGAIN) and self.make_room != NULL:
            # The completion queue is backed up: make room and try once more.
            self.make_room(<object>self.owner)
            ret = ul_ring_enter(&self.r, 0, 0)
        if ret < 0 and ret != -ETIME and ret != -EINTR and ret != -EBUSY and ret != -EAGAIN:
            self.raise_enter_error(ret)
        return 0

    cdef int enter(self, unsigned wait_nr, int64_t timeout_ns) except -1:
        """Submit and wait for wait_nr completions, up to timeout_ns (0:
        not at all, -1: without end).  A call that cannot sleep keeps the
        GIL, whose release and retake are a mutex and a condition variable
        each way.  A signal that
        cut the wait runs its Python handler here."""
        cdef int ret
        self.enable()
        if timeout_ns == 0:
            ret = ul_ring_enter(&self.r, wait_nr, 0)
        else:
            with nogil:
                ret = ul_ring_enter(&self.r, wait_nr, timeout_ns)
        if ret < 0:
            if ret == -EINTR:
                PyErr_CheckSignals()
            elif ret != -ETIME and ret != -EBUSY and ret != -EAGAIN:
                self.raise_enter_error(ret)
        return 0

    cdef raise_enter_error(self, int ret):
        if ret == -EEXIST:
            raise RuntimeError(
                f"uringloop: {self.name} belongs to the thread that first ran "
                f"it; run it from that thread only")
        raise OSError(-ret, f"io_uring_enter: {os.strerror(-ret)}")

    cdef int cancel(self, uint64_t target, unsigned flags, int fd) except -1:
        """Ask the kernel to cancel the request tagged `target` (or, by
        `flags`, every request on fd, or every request at all).  The cancel
        itself posts nothing unless it fails (CQE_SKIP_SUCCESS, user_data
        0); the cancelled request still posts its own final completion."""
        cdef io_uring_sqe *sqe = self.sqe()
        ul_prep_cancel(sqe, target, flags)
        if fd >= 0:
            sqe.fd = fd
        ul_sqe_set_flags(sqe, IOSQE_CQE_SKIP_SUCCESS)
        return 0

    cdef bint cancel_op(self, Operation op) except -1:
        """Cancel op's request, in flight on this ring: True when a cancel
        was queued; False for a request not in flight or already being
        cancelled, or a closed ring (whose requests are over)."""
        if op.life != OP_IN_FLIGHT or not self.open:
            return False
        set_life(op, OP_CANCELLING)
        self.cancel(<uint64_t><uintptr_t><PyObject *>op, 0, -1)
        return True

    cdef bint next_cqe(self, CqeCopy *out) noexcept:
        """Copy the oldest completion out and consume it: False when there
        is none.  (Copied first: the owner's handler may reap in turn.)
        A CQE32 ring's first extra word (zcrx: the piece's offset) goes to
        out.extra."""
        cdef io_uring_cqe *cqe
        if not ul_cq_ready(&self.r):
            return False
        if self.big_cqes:
            cqe = ul_cq32_at(&self.r, 0)
            out.extra = ul_zcrx_cqe_off(cqe)
        else:
            cqe = ul_cq_at(&self.r, 0)
        out.user_data = cqe.user_data
        out.res = cqe.res
        out.flags = cqe.flags
        ul_cq_advance(&self.r, 1)
        return True

    cdef int close(self) except -1:
        """Unmap the ring and close its fd: the kernel ends whatever is
        still in flight (the owner first waits for what holds its memory)."""
        if self.open:
            ul_ring_exit(&self.r)
            self.open = False
        return 0

    def __dealloc__(self):
        if self.open:
            ul_ring_exit(&self.r)
            self.open = False


cdef Ring new_ring(str name, str closed_message):
    cdef Ring ring = Ring.__new__(Ring)
    ring.name = name
    ring.closed_message = closed_message
    return ring


cdef bint _epoll_logged = False


cdef str driver_setting():
    """URINGLOOP_DRIVER: 'ring' or 'epoll' forces a driver; unset (or
    'auto') takes the ring where the kernel allows it."""
    value = os.environ.get('URINGLOOP_DRIVER', '').strip()
    if value in ('', 'auto'):
        return ''
    if value in ('ring', 'epoll'):
        return value
    raise ValueError(f"URINGLOOP_DRIVER must be 'ring', 'epoll' or 'auto', not {value!r}")


cdef int open_loop_ring(Ring ring, unsigned sq, unsigned cq, unsigned flags,
                        bint shrink) except -1:
    """Make a loop's ring on the driver URINGLOOP_DRIVER names, or on the
    kernel's io_uring where it is allowed and the epoll driver where it is
    refused (a seccomp profile, io_uring_disabled, an old kernel, too
    little locked memory), saying why once in an INFO log line.  A forced
    ring that is refused raises RingUnavailableError."""
    global _epoll_logged
    cdef int ret
    wanted = driver_setting()
    if wanted == 'epoll':
        return ring.setup_epoll(sq, cq, 'URINGLOOP_DRIVER=epoll')
    ret = ring.setup(sq, cq, flags, shrink)
    if ret == 0:
        return 0
    if ret == -EMFILE or ret == -ENFILE:
        # no file descriptor left: not a refusal (the epoll driver needs
        # them too); the stdlib's loop raises the same OSError
        raise OSError(-ret, f"cannot make the loop's io_uring: {os.strerror(-ret)}")
    refusal = setup_error(ret)
    if wanted == 'ring':
        raise refusal
    reason = f"io_uring_setup refused: {_errno.errorcode.get(-ret, -ret)}"
    ring.setup_epoll(sq, cq, reason)
    ring.refusal = refusal
    if not _epoll_logged:
        _epoll_logged = True
        logging.getLogger('uringloop').info(
            'uringloop: the loop runs on its epoll driver: %s', refusal.strerror)
    return 0


def ring_refusal(RingLoop loop):
    """The RingUnavailableError that put `loop` on the epoll driver (the
    kernel refused io_uring), or None: for run(strict=True)."""
    return loop.ring.refusal
