# Operation: one io_uring request and everything the kernel may touch for it.
# Included by core.pyx; declarations in core.pxd.
#
# The life of a request -- written here once; every Operation follows it,
# and the exceptions below are the only ones:
#
#   made        the subclass holds what the kernel reads or writes (buffers,
#               a sockaddr, an iovec array) for as long as it may
#   armed       its own arm() writes its SQE -- the one way a request is
#               submitted, the first time and again (a SocketOperation
#               after -EAGAIN, a single-shot poll, a reader of a stream).
#               loop.sqe_for(op) (RingLoop.track) tags the SQE with op,
#               takes one reference for the kernel, sets in_flight and
#               counts it in loop.ops_in_flight
#   in flight   handed to the kernel by the loop's next io_uring_enter
#   completing  each CQE: RingLoop.dispatch() runs complete(res, flags) in
#               op.context (None: complete() enters what it needs itself,
#               as StreamSend), an exception going to the loop's handler
#   done        the CQE without F_MORE: in_flight cleared, the kernel's
#               reference dropped (dispatch)
#
#   cancelled   abandon() / loop.cancel_op(): an ASYNC_CANCEL whose own CQE
#               is skipped; the operation, and its buffers, live on until
#               its own final CQE
#   drained     while the loop closes, final CQEs go to drained() (an
#               accept closes the fd it got), and close() waits for all of
#               them before the ring is unmapped
#
# The exceptions, each for a reason given where it is built (the table:
# docs/design.md, "The life of a request"):
#   - multishot requests post many CQEs with F_MORE on one reference: a
#     stream's RingReader (RECV) and ZeroCopyReader (RECV_ZC), a datagram
#     transport's DatagramRecv (RECVMSG);
#   - a zero-copy send's final CQE is its F_NOTIF notification, after the
#     send's own completion (ZcSend, a zero-copy DatagramSend);
#   - requests nobody waits for carry user_data 0 and hold no reference:
#     cancels (Ring.cancel), a pipe's linked POLL_ADD head (PipeIO.arm),
#     the simulated end of stream's TIMEOUT head (zcrx_simulated.pyx);
#   - a ZeroCopyReader's RECV_ZC is written on its zcrx queue's own Ring,
#     tagged and counted as on the loop's (RingLoop.track); the queue
#     reaps that ring into the same dispatch(); when the queue's ring is
#     closed the kernel posts no final CQE, and RingLoop.forget() ends it.
#
# What the kernel holds of it is one value, Operation.life (core.pxd):
# OP_IDLE (made, or done) -> OP_IN_FLIGHT (tracked) -> OP_CANCELLING
# (cancel_op) -> OP_IDLE at its final CQE (or RingLoop.forget()), changed
# by set_life() alone.  The debug build (UL_DEBUG_BUILD) stops the process
# on a move LIFE_MOVES does not have: a second request of an Operation in
# flight, a completion for one with none, a cancel of one not in flight
# (tests/test_life_cycle_checks.py makes each happen).

cdef unsigned char[3] LIFE_MOVES
LIFE_MOVES[OP_IDLE] = 1 << OP_IN_FLIGHT
LIFE_MOVES[OP_IN_FLIGHT] = (1 << OP_IDLE) | (1 << OP_CANCELLING)
LIFE_MOVES[OP_CANCELLING] = 1 << OP_IDLE

LIFE_NAMES = ('idle', 'in flight', 'in flight, cancelling')


cdef inline int set_life(Operation op, unsigned char life) except -1:
    """The one place an Operation's life changes."""
    if UL_DEBUG_BUILD and not (LIFE_MOVES[op.life] & (1 << life)):
        if life == OP_IN_FLIGHT:
            Py_FatalError(b'uringloop: an Operation submitted while its '
                          b'request is in flight')
        if life == OP_IDLE:
            Py_FatalError(b'uringloop: a completion for an Operation with no '
                          b'request in flight')
        Py_FatalError(b'uringloop: an Operation moved between life states '
                      b'its table does not join')
    op.life = life
    return 0


cdef class Operation:

    def __cinit__(self):
        UL_COUNT(UL_LIVE_OPERATIONS, 1)

    def __dealloc__(self):
        UL_COUNT(UL_LIVE_OPERATIONS, -1)

    def __init__(self):
        raise TypeError("operations are made by the loop")

    cdef int complete(self, int32_t res, uint32_t flags) except -1:
        return 0

    cdef object owner(self):
        """The transport this request works for (RingLoop.settle), or None."""
        return None

    cdef int release(self) except -1:
        """The loop is closing and the kernel has posted the final CQE:
        let go of buffers now rather than when the waiter is collected."""
        return 0

    cdef int drained(self, int32_t res, uint32_t flags) except -1:
        """A CQE reaped while the loop closes: nobody will see its result.
        Release what the request held (an accept closes the fd it got)."""
        return self.release()

    cdef int abandon(self) except -1:
        """The waiter gave up: ask the kernel to cancel.  The operation stays
        alive (and keeps its buffers) until its final CQE."""
        self.loop.cancel_op(self)
        return 0

    def _on_future_done(self, fut):
        if self.life != OP_IDLE and fut.cancelled():
            self.abandon()

    cdef int watch_future(self, object fut) except -1:
        self.future = fut
        fut.add_done_callback(self._on_future_done)
        return 0

    cdef bint waiter_gone(self):
        return self.future is None or self.future.done()

    cdef int fail(self, int32_t res) except -1:
        if not self.waiter_gone():
            self.future.set_exception(convert_error(res))
        return 0

    def __repr__(self):
        return f'<{type(self).__name__} {LIFE_NAMES[self.life]}>'


@cython.final
cdef class WakeupRead(Operation):
    """The loop's standing READ of its eventfd: call_soon_threadsafe (and any
    other thread) writes the eventfd, the READ completes and the loop's
    io_uring_enter returns."""
    cdef uint64_t value

    cdef int arm(self) except -1:
        cdef io_uring_sqe *sqe = self.loop.sqe_for(self)
        ul_prep_read(sqe, self.loop.wakeup_fd, &self.value, 8, <uint64_t>-1)
        return 0

    cdef int complete(self, int32_t res, uint32_t flags) except -1:
        if self.loop.wakeup_fd >= 0 and self.loop.ring.open and not self.loop.draining:
            self.arm()
        return 0
