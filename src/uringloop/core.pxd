# Declarations of the loop core: Ring, Operation, RingLoop and the loop's own
# requests here, the rest in the .pxd files included at the end.  The bodies
# live in core.pyx and the files it includes (debug.pyx, shortcuts/*.pyx,
# ring.pyx, operation.pyx, sockops.pyx, fdwatch.pyx, buffer_pool.pyx,
# zcrx.pyx, transports/*.pyx): one extension, so calls between them are C
# calls.

cimport cython
from libc.stdint cimport int32_t, uint32_t, uint64_t, int64_t
from cpython.buffer cimport Py_buffer
from cpython.ref cimport PyObject
from cpython.object cimport PyTypeObject
from .includes.ring cimport (ul_ring, ul_buf_ring, io_uring_sqe, msghdr, iovec,
                             sockaddr_storage, socklen_t, ul_zcrx_rq, statx)


cdef extern from "debug.h":
    ctypedef struct ul_loop_counts:
        long refs
        long transports
    ul_loop_counts *ul_loop_counts_new()
    void ul_loop_counts_release(ul_loop_counts *c)


cdef extern from "read_bytes.h":
    ctypedef struct ul_spare_bytes:
        int count


# A completion taken out of a ring (Ring.next_cqe, RingLoop.dispatch_ahead)
ctypedef struct CqeCopy:
    uint64_t user_data
    int32_t res
    uint32_t flags
    uint64_t extra                   # a CQE32 ring's first extra word

ctypedef int (*make_room_fn)(object owner) except -1


@cython.final
cdef class Ring:
    # One io_uring (ring.pyx): what the loop and each zcrx queue do with one.
    cdef ul_ring r                   # ring/ring.h's mapping and counters
    cdef readonly bint open
    cdef bint enabled                # (made R_DISABLED: the first user enables)
    cdef bint big_cqes               # CQE32
    cdef str name                    # for messages: "the loop's io_uring"
    cdef str closed_message          # RuntimeError of sqe() once closed
    cdef make_room_fn make_room      # the owner's reap, for a backed-up CQ
    cdef void *owner                 # (borrowed: the owner holds the ring)
    cdef readonly str driver         # 'ring' (the kernel's io_uring) or 'epoll'
    cdef readonly str driver_reason  # why the epoll driver ('' for the ring)
    cdef readonly object refusal     # the RingUnavailableError that led to it, or None

    cdef int setup(self, unsigned sq, unsigned cq, unsigned flags, bint shrink) except? -1
    cdef int setup_epoll(self, unsigned sq, unsigned cq, str reason) except -1
    cdef int enable(self) except -1
    cdef io_uring_sqe *sqe(self) except NULL
    cdef int submit_for_room(self) except -1
    cdef int submit(self) except -1
    cdef int enter(self, unsigned wait_nr, int64_t timeout_ns) except -1
    cdef raise_enter_error(self, int ret)
    cdef int cancel(self, uint64_t target, unsigned flags, int fd) except -1
    cdef bint cancel_op(self, Operation op) except -1
    cdef bint next_cqe(self, CqeCopy *out) noexcept
    cdef int close(self) except -1


# An Operation's life (Operation.life), changed by set_life() alone
# (operation.pyx), whose moves the debug build checks (LIFE_MOVES)
cdef enum:
    OP_IDLE             # made, or done: the kernel holds no request of it
    OP_IN_FLIGHT        # a request tagged with it (track()) until its final CQE
    OP_CANCELLING       # ... and an ASYNC_CANCEL for it sent (cancel_op())


cdef class Operation:
    # One request the kernel may still be working on: made, armed, in
    # flight, completing, done (or cancelled, drained).  The life cycle and
    # its exceptions: operation.pyx's header, the one place it is written.
    cdef RingLoop loop
    cdef object future
    cdef unsigned char life          # OP_IDLE, OP_IN_FLIGHT, OP_CANCELLING:
                                     # changed by set_life() only
    cdef bint sends                  # a send: dispatched ahead of completions
                                     # held for ready callbacks (dispatch_ahead)
    cdef object context              # contextvars.Context its completion runs in
                                     # (a transport's, a server's), or None

    cdef int complete(self, int32_t res, uint32_t flags) except -1
    cdef object owner(self)
    cdef int abandon(self) except -1
    cdef int release(self) except -1
    cdef int drained(self, int32_t res, uint32_t flags) except -1
    cdef int watch_future(self, object fut) except -1
    cdef bint waiter_gone(self)
    cdef int fail(self, int32_t res) except -1


cdef class RingLoop:
    cdef Ring ring
    cdef unsigned char ops_supported[256]
    cdef int wakeup_fd
    cdef Operation wakeup_op
    cdef Py_ssize_t ops_in_flight
    cdef bint draining
    cdef bint time_overridden     # a subclass defines time()
    cdef int owner_pid
    cdef bint batch_iterations    # in run_forever(): _run_once() runs until stop
    cdef ul_loop_counts *counts   # debug.h: this loop's live transports

    # BaseEventLoop's own state, kept in C slots for the run loop
    cdef public object _ready
    cdef public object _scheduled
    cdef public bint _stopping
    cdef public bint _closed
    cdef public Py_ssize_t _timer_cancelled_count
    cdef public object _debug
    cdef public double _clock_resolution
    cdef public object _current_handle

    cdef object readers           # fd -> FdWatch
    cdef object writers           # fd -> FdWatch
    cdef object accepting         # fd -> ServerAccept
    cdef object spare_sends       # idle StreamSends, linked by next_spare (stream.pyx, writing)
    cdef Py_ssize_t spare_send_count
    cdef list send_flushes        # transports whose flush_sends() runs before the enter
    cdef list spare_flushes       # the other list flush_sends() swaps in (empty)
    cdef unsigned links_submitted # chained sends prepared since the last enter
    cdef int64_t spin_ns          # busy polling before a sleep (0: off)
    cdef int64_t last_wait_ns     # how long the last wait for completions took
    cdef uint64_t spins           # waits that watched the ring first ...
    cdef uint64_t spin_hits       # ... and found work without sleeping
    cdef uint64_t iterations      # run_once() calls
    cdef list zcrx_users          # ZeroCopyReceive bound to this loop's thread
    cdef Py_ssize_t sendalls_in_flight  # sock_sendall() requests the kernel holds
    cdef bint sendfile_splice      # URINGLOOP_SENDFILE=splice (sendfile.pyx)
    cdef uint64_t sendfile_zero_copy  # bytes sendfile moved with no user copy ...
    cdef uint64_t sendfile_copied   # ... and by READ + SEND (the fall-back)
    cdef ul_buf_ring recv_buffers # provided buffers for multishot receives
    cdef bint recv_buffers_ready
    cdef ul_spare_bytes spare_bytes   # a read's bytes object for the next (read_bytes.h)
    cdef public dict _transports  # fd -> weakref to the transport using it
    cdef int zc_default_mode      # URINGLOOP_ZC_MODE, read when the loop is made
    cdef Py_ssize_t zc_default_threshold   # URINGLOOP_ZC_THRESHOLD
    cdef BufferPool buffer_pool   # registered buffers, made on first use

    @cython.final
    cdef io_uring_sqe *sqe_for(self, Operation op) except NULL
    @cython.final
    cdef int track(self, Operation op, io_uring_sqe *sqe) except -1
    cdef int forget(self, Operation op) except -1
    cdef int cancel_op(self, Operation op) except -1
    cdef int cancel_fd(self, int fd) except -1
    @cython.final
    cdef int wait_and_reap(self, int64_t timeout_ns, unsigned held) except -1
    @cython.final
    cdef int wait(self, unsigned wait_nr, int64_t timeout_ns, unsigned held) except -1
    @cython.final
    cdef int submit_then_wait(self, int64_t timeout_ns) except -1
    @cython.final
    cdef bint only_sends_completed(self) noexcept
    @cython.final
    cdef int reap(self, unsigned limit=*) except -1
    cdef int end_unconsumed(self) except -1
    @cython.final
    cdef int reap_after_enter(self, unsigned held) except -1
    cdef int dispatch_ahead(self, int which, object owner=*) except -1
    cdef int settle(self, object owner) except -1
    cdef bint hand_over_now(self) except -1
    @cython.final
    cdef int dispatch(self, Operation op, int32_t res, uint32_t flags) except -1
    cdef int completion_failed(self, Operation op, object exc) except -1
    cdef double clock(self) except? -1.0
    cdef int arm_wakeup(self) except -1
    @cython.final
    cdef int run_once(self) except -1
    cdef unsigned int run_once_tag    # version tags the loop_methods shortcut last saw
                                  # (shortcuts/loop_methods.pyx)
    cdef unsigned int create_future_tag
    cdef unsigned int call_soon_tag
    @cython.final
    cdef int run_ready(self) except -1
    @cython.final
    cdef object soon(self, object callback, tuple args, object context=*)
    cdef int soon_made(self, object transport, object protocol, object context=*) except -1
    @cython.final
    cdef object ready_handle(self, type kind, object callback, tuple args, object context)
    cdef close_ring_now(self)
    cdef close_wakeup_fd(self)
    cdef int ensure_recv_buffers(self) except -1
    @cython.final
    cdef int flush_sends(self) except -1


# Requests of the loop itself (bodies in core.pyx)

cdef class ChildWatch(Operation):
    cdef int pid
    cdef int pidfd
    cdef object transp
    cdef int arm(self) except -1
    cdef int complete(self, int32_t res, uint32_t flags) except -1


cdef class SignalWakeRecv(Operation):
    cdef int fd
    cdef char buf[256]
    cdef int arm(self) except -1
    cdef int complete(self, int32_t res, uint32_t flags) except -1


include "sockops.pxd"
include "file_requests.pxd"
include "buffer_pool.pxd"
include "zcrx.pxd"
include "shortcuts/kept_methods.pxd"
include "transports/base.pxd"
include "transports/zerocopy.pxd"
include "transports/stream.pxd"
include "transports/datagram.pxd"
include "transports/pipes.pxd"
