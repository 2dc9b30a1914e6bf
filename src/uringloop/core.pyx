# cython: language_level=3, boundscheck=False, wraparound=False
"""The uringloop event loop core.

Why it is built this way
------------------------
Every socket operation of the loop is an io_uring request.  The loop owns one
ring, made with SINGLE_ISSUER | DEFER_TASKRUN where the kernel allows: with
DEFER_TASKRUN the kernel runs completion work only inside our own
io_uring_enter(GETEVENTS) call, so a completion can never touch a buffer while
Python code runs, and SINGLE_ISSUER lets the kernel skip its locking.  The
price is that only one thread may submit: the ring is created disabled
(R_DISABLED) and enabled by the first thread that runs the loop; other threads
wake it through an eventfd that a READ request of the loop always watches.

One iteration (RingLoop._run_once) is:

    run the callbacks that are ready (queued before this iteration)
    timeout = 0 if callbacks are ready now, else until the nearest timer
    io_uring_enter: submit every queued SQE, wait for >= 1 CQE or the timeout
    reap every CQE: user_data is the Operation object, its complete() runs
    move expired timers to the ready queue (they run first next time)

so an idle or busy loop makes one system call per iteration, two when the
requests handed over complete inside the submission as sends only
(submit_then_wait: those are dispatched before the sleep; a full submission
queue also submits early, Ring.sqe).  When callbacks are ready, nothing is
queued and the kernel has raised no IORING_SQ_TASKRUN, the enter is skipped
altogether.

Callbacks queued earlier run before the completions of this iteration are
dispatched: the selector loop also runs them before the I/O callbacks it
appends after select(), and code that starts waiting right after a send
relies on it.

Ownership: the user_data of an SQE is a borrowed pointer to an Operation that
holds one extra reference for as long as the kernel may post a CQE for it (to
the CQE without IORING_CQE_F_MORE).  The Operation holds the buffers the
kernel reads or writes.  Cancelling the future that waits on an operation
sends IORING_OP_ASYNC_CANCEL and still waits for the real completion.  The
sock_* receives and accepts never put a RECV or ACCEPT in the ring: they wait
for readiness with a POLL and then make the call, so a cancelled one has taken
nothing from the socket (sockops.pyx).  Loop.close() cancels everything in flight
and reaps until the kernel has let go, before the ring is unmapped.

The rest of asyncio.AbstractEventLoop (timers, handles, executors, exception
handler, async generators) is CPython's BaseEventLoop: the run loop here works
on its data structures (_ready, _scheduled), so behaviour matches the stdlib.
"""

cimport cython
from cpython.ref cimport PyObject, Py_INCREF, Py_DECREF
from cpython.tuple cimport PyTuple_SET_ITEM
from cpython.list cimport PyList_GET_ITEM, PyList_SET_ITEM
from cpython.object cimport PyTypeObject
from cpython.buffer cimport (PyObject_GetBuffer, PyBuffer_Release, PyBuffer_FillInfo, Py_buffer,
                             PyBUF_SIMPLE, PyBUF_WRITABLE, PyBUF_FORMAT, PyBUF_ND,
                             PyBUF_STRIDES)
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING
from cpython.exc cimport PyErr_CheckSignals, PyErr_ExceptionMatches, PyErr_Clear
from cpython.dict cimport PyDict_GetItemWithError
from cpython.weakref cimport PyWeakref_NewRef
from posix.stat cimport struct_stat, stat as c_stat, S_ISSOCK
from posix.unistd cimport unlink as c_unlink
from cpython.number cimport PyNumber_Index
from cpython.pyport cimport PY_SSIZE_T_MAX
from cpython.mem cimport PyMem_Malloc, PyMem_Free
from libc.stdint cimport int32_t, uint32_t, uint64_t, int64_t, uintptr_t
from libc.string cimport memcpy, memcmp
from libc.errno cimport errno

from .includes.ring cimport *

# The public names (uringloop/__init__.py re-exports them; core.pyi types
# them); everything else here is the loop's own.
__all__ = (
    'Loop', 'RingUnavailableError', 'features', 'set_zerocopy', 'ZeroCopyResult',
    'ZeroCopyFuture',
    'RegisteredBuffer', 'ZeroCopyReceive', 'ZeroCopyPiece', 'RefillQueue',
    'zcrx_offset', 'zcrx_split', 'AsyncioStreamTransport', 'AsyncioDatagramTransport',
    'SOL_URINGLOOP', 'SO_ZEROCOPY', 'ZC_MODE', 'ZC_THRESHOLD', 'ZC_AUTO',
    'ZC_ALWAYS', 'ZC_NEVER', 'shortcuts',
)

import asyncio
import collections
import contextvars
import errno as _errno
import heapq
import inspect
import logging
import os
import _socket
import socket
import struct
import sys
import threading
import types
import warnings

import weakref
from asyncio import selector_events, unix_events
from asyncio import (base_events, constants, events, exceptions, futures,
                     format_helpers, protocols, sslproto, tasks, transports, trsock)
from asyncio.log import logger

include "debug.pyx"


cdef extern from "<errno.h>" nogil:
    int EINTR, EAGAIN, ECANCELED, ETIME, EBUSY, EEXIST, EINVAL, ENOBUFS
    int EMFILE, ENFILE, ENOMEM, ENOSPC
    int ECONNABORTED, EPROTO, EPERM, ENETDOWN, ENETUNREACH, EHOSTDOWN
    int EHOSTUNREACH, ENOPROTOOPT, EOPNOTSUPP, ENONET

cdef extern from "<sys/eventfd.h>" nogil:
    int eventfd(unsigned int initval, int flags)
    int eventfd_write(int fd, uint64_t value)
    int EFD_NONBLOCK
    int EFD_CLOEXEC

cdef extern from "<time.h>" nogil:
    struct timespec:
        long tv_sec
        long tv_nsec
    int clock_gettime(int clk, timespec *ts)
    int CLOCK_MONOTONIC

cdef extern from "<malloc.h>" nogil:
    int mallopt(int param, int value)
    int M_TRIM_THRESHOLD
    int M_MMAP_THRESHOLD

cdef extern from "<unistd.h>" nogil:
    int close(int fd)
    int usleep(unsigned usec)

cdef extern from "Python.h":
    int _PyBytes_Resize(PyObject **obj, Py_ssize_t newsize) except -1

cdef extern from "read_bytes.h":
    # a read's bytes object: shrunk to what came, the loop's spares
    int ul_shrink_bytes(PyObject **b, Py_ssize_t n, Py_ssize_t size) except -1
    object ul_bytes_to_fill(ul_spare_bytes *sp, Py_ssize_t size, Py_ssize_t *room)
    int ul_fit_bytes(PyObject **b, Py_ssize_t n, Py_ssize_t *room) except -1
    void ul_bytes_done(ul_spare_bytes *sp, object b, Py_ssize_t room)
    void ul_bytes_sent(ul_spare_bytes *sp, object b)
    void ul_spare_clear(ul_spare_bytes *sp)
    int ul_rb_shortcut      # 0: no spares, no shrink in place (shortcuts/switch.pyx)

cdef extern from *:
    """
    /* Drop the items of a list no one else can reach meanwhile, keeping
     * its item array: PyList_SetSlice() to nothing frees the array, and
     * the next append allocates it again (a free, a malloc and the slice
     * code per iteration that sends; docs/benchmarks.md, "Behind the comments"). */
    static void ul_list_empty(PyObject *list)
    {
        PyListObject *l = (PyListObject *)list;
        Py_ssize_t i, n = Py_SIZE(l);
        Py_SET_SIZE(l, 0);
        for (i = 0; i < n; i++) {
            PyObject *item = l->ob_item[i];
            l->ob_item[i] = NULL;
            Py_DECREF(item);
        }
    }
    """
    void ul_list_empty(list items)

cdef extern from "<poll.h>":
    unsigned POLLIN
    unsigned POLLOUT
    unsigned POLLERR
    unsigned POLLHUP
    unsigned POLLPRI


# Setup flags we ask for; ring.c drops the ones an older kernel refuses.
cdef unsigned WANTED_SETUP_FLAGS = (
    IORING_SETUP_SUBMIT_ALL | IORING_SETUP_SINGLE_ISSUER
    | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_TASKRUN_FLAG
    | IORING_SETUP_R_DISABLED | IORING_SETUP_NO_SQARRAY)

cdef unsigned SQ_ENTRIES = 2048
cdef unsigned CQ_ENTRIES = 16384
# Without CAP_IPC_LOCK the ring's memory counts against RLIMIT_MEMLOCK; a
# full-size ring takes ~400 KiB of it.  On ENOMEM the ring is made again,
# a quarter the size each time, down to 32/128 entries (12 KiB): a loop that
# works in a tight limit beats a fall-back to the stdlib loop.  A smaller
# ring only means more io_uring_enter calls in a busy iteration.
cdef unsigned MIN_SQ_ENTRIES = 32


cdef bint ring_sizes(unsigned *sq, unsigned *cq) except? False:
    """SQ_ENTRIES/CQ_ENTRIES, or URINGLOOP_RING_ENTRIES="sq,cq" (each a
    power of two, cq >= sq): the stress tests use a tiny ring to drive the
    submission-queue-full and completion-queue-overflow paths.  True when
    a smaller ring may be tried on ENOMEM (not for sizes asked for)."""
    sq[0], cq[0] = SQ_ENTRIES, CQ_ENTRIES
    value = os.environ.get('URINGLOOP_RING_ENTRIES')
    if not value:
        return True
    try:
        want_sq, want_cq = (int(part) for part in value.split(','))
    except ValueError:
        raise ValueError(f'URINGLOOP_RING_ENTRIES must be "sq,cq", not {value!r}') from None
    if not (2 <= want_sq <= 32768 and want_sq <= want_cq <= 65536):
        raise ValueError(f'URINGLOOP_RING_ENTRIES out of range: {value!r}')
    sq[0], cq[0] = want_sq, want_cq
    return False


cdef object _Future = futures.Future


cdef object new_future(RingLoop loop):
    """loop.create_future(), minus the Python frame of BaseEventLoop's when
    no subclass replaced it (each sock_*() call makes one; a zero-copy
    send's future is a ZeroCopyFuture, transports/zerocopy.pyx)."""
    if futures_are_ours(loop):
        return _Future(loop=loop)
    return loop.create_future()


def _spin_ns():
    """URINGLOOP_SPIN_US in nanoseconds (0: off); a bad value is an error."""
    value = os.environ.get("URINGLOOP_SPIN_US", "").strip()
    if not value:
        return 0
    try:
        us = int(value)
    except ValueError:
        raise ValueError(f"URINGLOOP_SPIN_US must be a whole number of microseconds, not {value!r}")
    if not 0 <= us <= 1000:
        raise ValueError(f"URINGLOOP_SPIN_US must be between 0 and 1000, not {us}")
    return us * 1000


def _sendfile_splice():
    """URINGLOOP_SENDFILE: 'sendfile' (or unset: sendfile(2) on the loop's
    thread) or 'splice' (SPLICE on the ring); another value is an error."""
    value = os.environ.get("URINGLOOP_SENDFILE", "").strip()
    if value in ("", "sendfile"):
        return False
    if value == "splice":
        return True
    raise ValueError(f"URINGLOOP_SENDFILE must be 'sendfile' or 'splice', not {value!r}")


# reap(): no limit on the completions dispatched
cdef unsigned REAP_ALL = 0xffffffff
# dispatch_ahead(): the sends, or one transport's requests
cdef int SENDS_AHEAD = -1
cdef int OWNER_AHEAD = -2
cdef double MAXIMUM_TIMEOUT = 24 * 3600.0
# Busy polling, off unless URINGLOOP_SPIN_US is set (microseconds, read when
# a loop is made): before sleeping in io_uring_enter, watch the ring for
# completion work for up to that long, if the previous wait took no longer
# (a peer that answers within microseconds); a loop whose waits are long
# never spins (loop.stats() counts spins and spin_hits).  It trades CPU for
# round-trip latency, as SO_BUSY_POLL does: a gain where both ends wait on
# each other's wake-ups, a cost in CPU where messages are large (docs/
# benchmarks.md, "Figures behind the code's constants").

# How long close() waits for the kernel to give back in-flight requests.
cdef double CLOSE_DRAIN_SECONDS = 5.0


class RingUnavailableError(OSError):
    """io_uring cannot be used in this process.

    Raised by Loop() and new_event_loop() when URINGLOOP_DRIVER=ring
    forces the kernel's io_uring and io_uring_setup fails (and by run()
    and loop_factory() with strict=True or URINGLOOP_STRICT=1): EPERM
    when a seccomp profile (Docker's default) or the sysctl
    kernel.io_uring_disabled forbids it, ENOSYS or EINVAL when the kernel is
    older than uringloop needs (Linux 6.1).  Otherwise the loop runs on
    its epoll driver instead.
    """


_SETUP_HINTS = {
    _errno.EPERM: ("io_uring is forbidden in this process: a seccomp filter "
                   "(Docker's default profile) or the sysctl "
                   "kernel.io_uring_disabled=2 (or =1 without CAP_SYS_ADMIN "
                   "or the io_uring_group). Allow io_uring_setup, "
                   "io_uring_enter and io_uring_register in the seccomp "
                   "profile, or set kernel.io_uring_disabled=0"),
    _errno.ENOSYS: "this kernel has no io_uring (Linux 6.1 or newer needed)",
    _errno.EINVAL: "this kernel's io_uring is too old (Linux 6.1 or newer needed)",
    _errno.ENOMEM: ("not enough locked memory for the ring; raise "
                    "RLIMIT_MEMLOCK (ulimit -l)"),
}


cdef bint malloc_tuned = False

cdef tune_malloc():
    """Keep freed heap memory instead of returning it at once.

    A stream transport hands each received chunk to data_received() as a new
    bytes object, and a write() keeps its bytes until the kernel has sent
    them, so large short-lived allocations overlap.  With glibc's defaults a
    free at the top of the heap larger than 128 KiB is given back with brk(),
    and the next allocation faults the pages in again, request after
    request of a large echo.  So, once per process: trim only beyond
    16 MiB, and mmap only allocations above 4 MiB.  (Each allocation glibc
    mmaps is fresh pages, faulted in as the kernel fills them: a large file
    read faults less with the higher threshold.  Figures:
    docs/benchmarks.md, "Behind the comments".)
    Skipped when the user set MALLOC_TRIM_THRESHOLD_ /
    MALLOC_MMAP_THRESHOLD_ or URINGLOOP_TUNE_MALLOC=0.
    """
    global malloc_tuned
    if malloc_tuned:
        return
    malloc_tuned = True
    env = os.environ
    if (env.get("URINGLOOP_TUNE_MALLOC", "1") == "0"
            or "MALLOC_TRIM_THRESHOLD_" in env or "MALLOC_MMAP_THRESHOLD_" in env):
        return
    mallopt(M_TRIM_THRESHOLD, 16 * 1024 * 1024)
    mallopt(M_MMAP_THRESHOLD, 4 * 1024 * 1024)


cdef object setup_error(int res):
    err = -res
    hint = _SETUP_HINTS.get(err, os.strerror(err))
    return RingUnavailableError(err, f"io_uring_setup failed: {hint}")


cdef object convert_error(int res):
    """The Python exception for a negative CQE result."""
    if res == -ECANCELED:
        return exceptions.CancelledError()
    return OSError(-res, os.strerror(-res))


Handle = events.Handle
TimerHandle = events.TimerHandle


cdef extern from "Python.h":
    object PyContext_CopyCurrent()
    int PyContext_Enter(object ctx) except -1
    int context_enter "PyContext_Enter"(object ctx) noexcept    # -1: an error is set
    int PyContext_Exit(object ctx) except -1


cdef inline int enter_context(object context) except -1:
    """Enter the context a transport's (or server's) work runs in: 1 when
    entered, for the caller to exit; 0 for None, or a context already
    entered (a reap nested in its own callback), which is kept.  (Without
    a try block, whose saving and restoring of the exception state each
    completion's dispatch would pay.)"""
    if context is None:
        return 0
    if context_enter(context) == 0:
        return 1
    if PyErr_ExceptionMatches(RuntimeError):
        PyErr_Clear()       # already entered
        return 0
    return -1


include "shortcuts/switch.pyx"
ul_rb_shortcut = SC_SPARE_BYTES

include "shortcuts/handle_slots.pyx"
include "shortcuts/ready_queue.pyx"
include "shortcuts/socket_objects.pyx"
include "shortcuts/kept_methods.pyx"


class ReadingHandle(Handle):
    """The handle of a new stream transport's connection_made() that then
    starts the transport's reading (run_ready(), or _run() below).  The
    stdlib schedules the two as ready callbacks one right after the other,
    in the same window of the ready queue, so nothing can run between
    them; one handle is a Handle, a bound method and a turn of the ready
    queue less per connection.  Named Handle: it is the handle the stdlib
    has, in its repr and in the report of an exception connection_made()
    raises.  Made by RingLoop.soon_made() outside debug mode."""
    __slots__ = ()

    def _run(self):
        try:
            Handle._run(self)
        finally:
            self._args[0]._start_reading_cb()

ReadingHandle.__name__ = ReadingHandle.__qualname__ = 'Handle'


cdef inline double monotonic() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9


include "ring.pyx"
include "operation.pyx"
include "sockops.pyx"
include "fdwatch.pyx"
include "process.pyx"
include "signals.pyx"
include "unix.pyx"
include "file_requests.pyx"
include "sendfile.pyx"
include "buffer_pool.pyx"
include "zcrx.pyx"
include "zcrx_simulated.pyx"
include "transports/base.pyx"
include "transports/zerocopy.pyx"
include "transports/stream.pyx"
include "transports/stream_writing.pyx"
include "transports/stream_readers.pyx"
include "transports/server.pyx"
include "transports/datagram.pyx"
include "transports/pipes.pyx"
include "transports/tls.pyx"


cdef int loop_make_room(object loop) except -1:
    """Ring.make_room of a loop's ring: dispatch what the completion queue
    holds, so that the kernel takes submissions again."""
    return (<RingLoop>loop).reap()


cdef class RingLoop:
    """The C half of Loop: the ring, the run loop and completion dispatch."""

    def __cinit__(self, *args, **kwargs):
        cdef int ret
        self.wakeup_fd = -1
        cdef unsigned sq_entries, cq_entries
        self.time_overridden = getattr(type(self), 'time') is not RingLoop.time
        check_shortcut_setting()
        UL_COUNT(UL_LIVE_LOOPS, 1)
        self.counts = ul_loop_counts_new()
        if self.counts == NULL:
            raise MemoryError()
        self.spin_ns = _spin_ns()       # (a bad value fails before the ring is made)
        self.sendfile_splice = _sendfile_splice()
        shrink = ring_sizes(&sq_entries, &cq_entries)
        self.ring = new_ring("this loop's io_uring", "Event loop is closed")
        open_loop_ring(self.ring, sq_entries, cq_entries, WANTED_SETUP_FLAGS, shrink)
        # a backed-up completion queue refuses submissions: reap, retry
        self.ring.owner = <void *>self
        self.ring.make_room = loop_make_room
        UL_COUNT(UL_LIVE_LOOP_FDS, 1)
        ret = ul_ring_probe(&self.ring.r, self.ops_supported)
        if ret < 0:
            self.close_ring_now()
            raise setup_error(ret)
        # Blocking on purpose: io_uring returns -EAGAIN for a READ of an
        # O_NONBLOCK file instead of waiting for it.
        self.wakeup_fd = eventfd(0, EFD_CLOEXEC)
        if self.wakeup_fd < 0:
            err = errno
            self.close_ring_now()
            raise OSError(err, "eventfd failed")
        UL_COUNT(UL_LIVE_LOOP_FDS, 1)
        self.owner_pid = os.getpid()
        tune_malloc()
        self.readers = {}
        self.writers = {}
        self.accepting = {}
        self.send_flushes = []
        self.spare_flushes = []
        self.last_wait_ns = self.spin_ns + 1    # no spinning until a short wait
        self.zcrx_users = []
        self._transports = {}
        self.zc_default_mode = _default_mode()
        self.zc_default_threshold = _default_threshold()
        self.ops_in_flight = 0
        self.draining = False
        self.arm_wakeup()

    def __dealloc__(self):
        # Normally close() has drained and closed the ring.  An unclosed loop
        # is only collected when no operation holds it, i.e. none is in flight.
        self.close_ring_now()
        self.close_wakeup_fd()
        ul_spare_clear(&self.spare_bytes)
        ul_loop_counts_release(self.counts)
        self.counts = NULL
        UL_COUNT(UL_LIVE_LOOPS, -1)

    cdef close_ring_now(self):
        if self.ring is not None and self.ring.open:
            self.ring.close()
            UL_COUNT(UL_LIVE_LOOP_FDS, -1)

    cdef close_wakeup_fd(self):
        if self.wakeup_fd >= 0:
            close(self.wakeup_fd)
            self.wakeup_fd = -1
            UL_COUNT(UL_LIVE_LOOP_FDS, -1)

    # ---- submission -------------------------------------------------

    @cython.final
    cdef io_uring_sqe *sqe_for(self, Operation op) except NULL:
        """A fresh SQE of this loop's ring whose user_data is `op`, which
        is in flight from now on (track)."""
        cdef io_uring_sqe *sqe = self.ring.sqe()
        self.track(op, sqe)
        return sqe

    @cython.final
    cdef int track(self, Operation op, io_uring_sqe *sqe) except -1:
        """op's request is written in sqe (of this loop's ring, or of a zcrx
        queue's, whose completions come to dispatch() too; NULL for a
        simulated one): tag it with op, take the kernel's reference, count
        it in flight (operation.pyx, the life of a request)."""
        # (one request per Operation at a time, which set_life() checks: a
        # second would drop the reference at the first one's final CQE
        # while the kernel holds the other)
        set_life(op, OP_IN_FLIGHT)
        Py_INCREF(op)
        self.ops_in_flight += 1
        if sqe != NULL:
            ul_sqe_set_data(sqe, <uint64_t><uintptr_t><PyObject *>op)
        return 0

    cdef int forget(self, Operation op) except -1:
        """The ring that held op's request is closed (a zcrx queue's): the
        kernel posts no final completion, so end it as one would."""
        if op.life == OP_IDLE:
            return 0
        set_life(op, OP_IDLE)
        self.ops_in_flight -= 1
        Py_DECREF(op)
        return 0

    cdef int cancel_op(self, Operation op) except -1:
        self.ring.cancel_op(op)
        return 0

    cdef int cancel_fd(self, int fd) except -1:
        """Cancel every request on fd (used where a request waits behind a
        linked POLL_ADD, which a cancel by user_data cannot reach)."""
        if not self.ring.open:
            return 0
        return self.ring.cancel(0, IORING_ASYNC_CANCEL_FD | IORING_ASYNC_CANCEL_ALL, fd)

    cdef int arm_wakeup(self) except -1:
        if self.wakeup_op is None:
            self.wakeup_op = WakeupRead.__new__(WakeupRead)
            self.wakeup_op.loop = self
        (<WakeupRead>self.wakeup_op).arm()
        return 0

    def _write_to_self(self):
        # Called by call_soon_threadsafe from any thread.
        if self.wakeup_fd >= 0:
            eventfd_write(self.wakeup_fd, 1)

    # ---- completion ------------------------------------------------

    @cython.final
    cdef int wait_and_reap(self, int64_t timeout_ns, unsigned held) except -1:
        """Submit, wait up to timeout_ns (0: not at all, -1: without end) and
        dispatch completions.  `held` completions were left in the ring by
        the previous iteration; they are dispatched now in any case.  The
        rest wait for the next iteration if callbacks are ready: the
        selector loop runs the callbacks queued before its select() ahead
        of the I/O callbacks that select() reports, and so does this loop
        (aiohttp's test_concurrent_close_multiple_tasks depends on it).
        Completed sends are dispatched at once all the same (dispatch_ahead;
        aiohttp's upload progress reads get_write_buffer_size())."""
        cdef unsigned wait_nr = 0 if timeout_ns == 0 else 1
        if self.links_submitted:
            # Chained sends (DatagramTransport.flush_sends): each next link
            # is issued from task work, which the kernel runs inside this
            # enter only while fewer than wait_nr items ran.  Asking for one
            # completion per link runs the whole chain here, not one link
            # per enter.  Every link is MSG_DONTWAIT and posts a completion
            # at once, but the count may include links already reaped (a
            # submit since), so the enter never sleeps for them.
            wait_nr = min(self.links_submitted, self.ring.r.cq_entries)
            timeout_ns = 0
            self.links_submitted = 0
        if (timeout_ns == 0 and ul_sq_pending(&self.ring.r) == 0
                and (self.ring.r.setup_flags & IORING_SETUP_TASKRUN_FLAG)
                and not ul_sq_taskrun(&self.ring.r)
                and not ul_cq_overflowed(&self.ring.r)):
            # Nothing to submit and the kernel holds no completion work for
            # us: the system call would return at once with nothing.
            return self.reap_after_enter(held)
        if timeout_ns == 0:
            self.ring.enter(wait_nr, 0)
            return self.reap_after_enter(held)
        if held == 0 and ul_sq_pending(&self.ring.r):
            return self.submit_then_wait(timeout_ns)
        return self.wait(wait_nr, timeout_ns, held)

    @cython.final
    cdef int submit_then_wait(self, int64_t timeout_ns) except -1:
        """Requests to hand over and nothing to do until a completion:
        submit them first, without sleeping (the GIL kept), and when all
        that completed at once are sends -- a small send on a socket with
        room completes inside the submission -- dispatch those and sleep
        in a second enter.  One enter that submitted and waited returned
        at once with just the sends' completions, and the loop went
        round an iteration (and released and took the GIL) for them
        before it slept: two iterations per batch of echoed requests
        where there is one now.  Anything else that completed, a callback
        a send's completion made ready, or stop(): dispatched as after
        any enter, and the next iteration follows without a sleep.
        So does anything a send's completion did that the sleep would
        keep waiting: it runs protocol code (resume_writing()), which may
        write (a send owed, in send_flushes) or add a timer sooner than
        the one the sleep was measured for."""
        cdef int64_t start = ul_now_ns() if timeout_ns > 0 else 0
        cdef object scheduled = self._scheduled
        cdef Py_ssize_t timers = len(scheduled)
        self.ring.enter(0, 0)
        if not self.only_sends_completed():
            return self.reap_after_enter(0)
        self.reap(REAP_ALL)
        # (a timer can only be added to the heap meanwhile, never taken
        # out: cancelling one leaves it there until run_once())
        if (queued(self._ready) or self._stopping or self.send_flushes
                or self._scheduled is not scheduled or len(scheduled) != timers):
            return 0
        if timeout_ns > 0:
            # (the timers' wait counts from before the submission)
            timeout_ns -= ul_now_ns() - start
            if timeout_ns <= 0:
                return 0
        return self.wait(1, timeout_ns, 0)

    @cython.final
    cdef bint only_sends_completed(self) noexcept:
        """Every completion in the ring is a send's (Operation.sends), or
        one to skip."""
        cdef unsigned i, n = ul_cq_ready(&self.ring.r)
        cdef io_uring_cqe *cqe
        for i in range(n):
            cqe = ul_cq_at(&self.ring.r, i)
            if cqe.user_data != 0 and not (<Operation><PyObject *><uintptr_t>cqe.user_data).sends:
                return False
        return True

    @cython.final
    cdef int wait(self, unsigned wait_nr, int64_t timeout_ns, unsigned held) except -1:
        """The enter that may sleep: with busy polling (URINGLOOP_SPIN_US,
        above) and after a short previous wait, hand the queued requests
        over and watch the ring for up to spin_ns first; then sleep for
        what is left of timeout_ns."""
        cdef int64_t start, budget = self.spin_ns
        cdef int found
        if not budget:
            # busy polling off (the default): no clock reads on this path
            self.ring.enter(wait_nr, timeout_ns)
            return self.reap_after_enter(held)
        start = ul_now_ns()
        if (self.last_wait_ns <= budget
                and (self.ring.r.setup_flags & IORING_SETUP_TASKRUN_FLAG)):
            if 0 < timeout_ns < budget:
                budget = timeout_ns
            if ul_sq_pending(&self.ring.r):
                self.ring.enter(0, 0)
            self.spins += 1
            with nogil:         # (other threads run meanwhile, as in a sleep)
                found = ul_spin_for_work(&self.ring.r, budget)
            if found:
                self.spin_hits += 1
                self.ring.enter(0, 0)       # runs the completion work
                self.last_wait_ns = ul_now_ns() - start
                return self.reap_after_enter(held)
            if timeout_ns > 0:
                timeout_ns = max(timeout_ns - budget, 0)
        self.ring.enter(wait_nr, timeout_ns)
        self.last_wait_ns = ul_now_ns() - start
        return self.reap_after_enter(held)

    @cython.final
    cdef int reap_after_enter(self, unsigned held) except -1:
        if self.accepting and ul_cq_overflowed(&self.ring.r):
            # (a completion queue too small for what is ready: listeners
            # first, transports/server.pyx)
            for op in list(self.accepting.values()):
                (<ServerAccept>op).take_overflowed()
        if not queued(self._ready):
            return self.reap(REAP_ALL)
        self.reap(held)
        return self.dispatch_ahead(SENDS_AHEAD)

    @cython.final
    cdef int reap(self, unsigned limit=REAP_ALL) except -1:
        """Dispatch up to `limit` completions, oldest first."""
        cdef CqeCopy c
        while limit and self.ring.next_cqe(&c):
            limit -= 1
            if c.user_data != 0:
                self.dispatch(<Operation><PyObject *><uintptr_t>c.user_data, c.res, c.flags)
        return 0

    cdef int dispatch_ahead(self, int which, object owner=None) except -1:
        """Dispatch now, ahead of the completions before them in the ring
        (which keep their order), with `which` SENDS_AHEAD those of the
        sends, with OWNER_AHEAD those of the requests that owner (a
        transport) made (settle).  Sends: the selector loop sends inside
        write(), so its get_write_buffer_size() drops at once; completions
        held for the ready callbacks (wait_and_reap) must not hold a
        send's."""
        cdef unsigned i, found = 0, n = ul_cq_ready(&self.ring.r)
        cdef io_uring_cqe *cqe
        cdef PyObject *op
        cdef CqeCopy near[64]
        cdef CqeCopy *copies = near
        for i in range(n):
            cqe = ul_cq_at(&self.ring.r, i)
            if cqe.user_data == 0:
                continue
            op = <PyObject *><uintptr_t>cqe.user_data
            if which == SENDS_AHEAD:
                if not (<Operation>op).sends:
                    continue
            elif (<Operation>op).owner() is not owner:
                continue
            if found == 64 and copies == near:
                copies = <CqeCopy *>PyMem_Malloc(n * sizeof(CqeCopy))
                if copies == NULL:
                    raise MemoryError()
                memcpy(copies, near, sizeof(near))
            copies[found].user_data = cqe.user_data
            copies[found].res = cqe.res
            copies[found].flags = cqe.flags
            found += 1
            cqe.user_data = 0           # reap() skips it
        # (copied first: a completion handler may reap, which moves the
        # ring's head under the loop above; C copies, not a Python tuple
        # per completion)
        try:
            for i in range(found):
                self.dispatch(<Operation><PyObject *><uintptr_t>copies[i].user_data,
                              copies[i].res, copies[i].flags)
        finally:
            if copies != near:
                PyMem_Free(copies)
        return 0

    cdef int settle(self, object owner) except -1:
        """A transport closes its socket (after connection_lost) while the
        kernel still holds its requests, every one of them cancelled: hand
        the cancels to the kernel now, let it run the completion work it
        deferred to us, and dispatch that transport's completions ahead of
        the rest, so that the last one closes the socket before the callback
        returns, as the selector loop closes it (anyio's aclose() checks
        sock.fileno() == -1 after one checkpoint; a thread that waits for
        the peer to see the close would wait for good).  Requests the
        kernel keeps (zero-copy data in the socket's queue) keep the close
        for their completion, as before."""
        if not self.ring.open or self.draining:
            return 0
        if self.hand_over_now():
            return self.dispatch_ahead(OWNER_AHEAD, owner)
        return 0

    cdef bint hand_over_now(self) except -1:
        """Submit the queued requests (cancels, mostly) now, and enter until
        the kernel holds no completion work deferred to us (bounded: the
        cancel of a request waiting for readiness completes inside the
        enter that submits it).  Server.close() and settle().  False when
        another thread owns the ring: its next enter does it."""
        try:
            for _ in range(3):
                self.ring.submit()
                if not ul_sq_taskrun(&self.ring.r):
                    break
        except (RuntimeError, OSError):
            return False
        return True

    @cython.final
    cdef int dispatch(self, Operation op, int32_t res, uint32_t flags) except -1:
        """One completion: op.complete() in op's context; the reference
        taken in sqe_for is dropped at the last one (F_MORE clear)."""
        cdef bint final = (flags & IORING_CQE_F_MORE) == 0
        cdef bint entered = False
        # (op.context may change inside complete(): a pooled StreamSend
        # handed to another transport; the one entered is the one left)
        cdef object context = op.context
        if UL_DEBUG_BUILD and op.life == OP_IDLE:
            # its final CQE came already: the kernel's reference was dropped
            # and op may be freed memory (docs/design.md, the life cycle)
            Py_FatalError(b'uringloop: a completion for an Operation with no '
                          b'request in flight')
        if final:
            set_life(op, OP_IDLE)
            self.ops_in_flight -= 1
        try:
            if not self.draining:
                # protocol callbacks run in their transport's (or
                # server's) context, as the stdlib's reader handles do
                entered = enter_context(context)
                op.complete(res, flags)
            elif final:
                op.drained(res, flags)
        except (SystemExit, KeyboardInterrupt):
            if entered:
                PyContext_Exit(context)
            if final:
                Py_DECREF(op)
            raise
        except BaseException as exc:
            if entered:
                PyContext_Exit(context)
                entered = False
            self.completion_failed(op, exc)
        if entered:
            PyContext_Exit(context)
        if final:
            Py_DECREF(op)    # the reference taken in sqe_for
        return 0

    cdef int completion_failed(self, Operation op, object exc) except -1:
        """(dispatch(), out of its way: the message's temporaries cost
        every completion their setting up when written there)"""
        self.call_exception_handler({
            'message': f'Exception in completion of {op!r}',
            'exception': exc,
        })
        return 0

    # ---- the run loop ----------------------------------------------

    def time(self):
        """The loop's clock: CLOCK_MONOTONIC, as time.monotonic()."""
        return monotonic()

    cdef double clock(self) except? -1.0:
        """What _run_once compares timers with: monotonic(), or self.time()
        where a subclass or a test replaced it (mock.patch.object(loop,
        'time'), as aiohttp's tests do), since the selector loop's
        _run_once calls self.time()."""
        cdef PyObject **dictptr
        if self.time_overridden:
            return self.time()
        dictptr = _PyObject_GetDictPtr(self)
        if (dictptr != NULL and dictptr[0] != NULL
                and PyDict_GetItemWithError(<object>dictptr[0], 'time') != NULL):
            return self.time()
        return monotonic()

    @cython.final
    cdef object soon(self, object callback, tuple args, object context=None):
        """call_soon(callback, *args, context=context) for the transports'
        own callbacks (connection_made, connection_lost, reading started),
        without the Python-level call of the method; a subclass's
        call_soon() and the debug mode's checks are still called."""
        if self._debug or not call_soon_is_ours(self):
            return self.call_soon(callback, *args, context=context)
        return self.ready_handle(Handle, callback, args, context)

    cdef int soon_made(self, object transport, object protocol,
                       object context=None) except -1:
        """soon() of a new transport's protocol.connection_made(transport),
        then of its _start_reading_cb(): one ReadingHandle where soon()
        makes the handles itself."""
        if self._debug or not call_soon_is_ours(self):
            self.call_soon(protocol.connection_made, transport, context=context)
            self.call_soon(transport._start_reading_cb, context=context)
        else:
            self.ready_handle(ReadingHandle, protocol.connection_made, (transport,), context)
        return 0

    @cython.final
    cdef object ready_handle(self, type kind, object callback, tuple args, object context):
        """call_soon() outside debug mode: a Handle (or kind) at the end
        of _ready."""
        if self._closed:
            raise RuntimeError('Event loop is closed')
        handle = new_handle(kind, callback, args, self, context)
        ready_append(self._ready, handle)
        return handle

    def create_future(self):
        """As BaseEventLoop.create_future(), without its Python frame
        (aiohttp makes one per request)."""
        return _Future(loop=self)

    def call_soon(self, callback, *args, context=None):
        """As BaseEventLoop.call_soon (same checks, same Handle), without
        its two Python frames when the loop is not in debug mode.  Raises
        RuntimeError on a closed loop."""
        if self._debug:
            return base_events.BaseEventLoop.call_soon(self, callback, *args,
                                                        context=context)
        return self.ready_handle(Handle, callback, args, context)

    def create_task(self, coro, **kwargs):
        """As BaseEventLoop.create_task, without its Python frame when no
        task factory is set and the loop is not in debug mode (aiohttp makes
        a task per request).  Raises RuntimeError on a closed loop."""
        if self._debug or self._task_factory is not None:
            return base_events.BaseEventLoop.create_task(self, coro, **kwargs)
        if self._closed:
            raise RuntimeError('Event loop is closed')
        return tasks.Task(coro, loop=self, **kwargs)

    def get_debug(self):
        return self._debug

    def _run_once(self):
        """One iteration of the loop, as BaseEventLoop._run_once().  Called
        by the stdlib's run_forever() (whose Python loop calls it and then
        tests _stopping), it runs iterations until _stopping is set: the
        same iterations, tested the same way, without the frame's bytecode,
        the method lookup and the call per iteration (a server that makes
        one iteration per request paid them per request: docs/benchmarks.md, "Behind the comments").
        It goes back to one iteration a call as soon as _run_once is not
        this method any more (a subclass's, or one set on the loop or its
        class, say by a monitor that times iterations)."""
        self.run_once()
        if self.batch_iterations:
            while not self._stopping and run_once_is_ours(self):
                # what the frame's eval loop would have done between calls:
                # run the Python handlers of signals that came meanwhile
                PyErr_CheckSignals()
                self.run_once()

    @cython.final
    cdef int run_once(self) except -1:
        cdef object scheduled = self._scheduled
        cdef object handle
        cdef double timeout, end_time, now
        cdef int64_t timeout_ns
        cdef unsigned held
        cdef Py_ssize_t n_sched = len(scheduled)

        self.iterations += 1
        # Drop cancelled timers: all of them when they are most of the heap,
        # otherwise only those at its head.
        if (n_sched > 100 and
                self._timer_cancelled_count * 2 > n_sched):
            live = []
            for handle in scheduled:
                if handle._cancelled:
                    handle._scheduled = False
                else:
                    live.append(handle)
            heapq.heapify(live)
            self._scheduled = scheduled = live
            self._timer_cancelled_count = 0
        else:
            while queued(scheduled) and scheduled[0]._cancelled:
                self._timer_cancelled_count -= 1
                handle = heapq.heappop(scheduled)
                handle._scheduled = False

        # Callbacks queued before this iteration run before its completions
        # are dispatched, as the selector loop runs them before the I/O
        # callbacks it appends after select(): a task that starts waiting
        # right after a send must see the reply (test_events'
        # test_datagram_send_to_non_listening_address, 3.13).
        self.run_ready()
        held = ul_cq_ready(&self.ring.r)

        if queued(self._ready) or self._stopping or held:
            timeout_ns = 0
        elif queued(scheduled):
            # (in C doubles: no float object that may fail to be made, which
            # left the iteration with a MemoryError meant for a read)
            timeout = <double>scheduled[0]._when - self.clock()
            if not timeout > 0:
                # (NaN too: call_later(nan) runs at once, as in the stdlib;
                # cast to int64 it would be a wait without end)
                timeout = 0
            elif timeout > MAXIMUM_TIMEOUT:
                timeout = MAXIMUM_TIMEOUT
            timeout_ns = <int64_t>(timeout * 1e9)
        else:
            timeout_ns = -1

        if self.send_flushes:
            self.flush_sends()
        self.wait_and_reap(timeout_ns, held)

        if queued(scheduled):
            end_time = self.clock() + self._clock_resolution
            while scheduled:
                handle = scheduled[0]
                if handle._when >= end_time:
                    break
                handle = heapq.heappop(scheduled)
                handle._scheduled = False
                ready_append(self._ready, handle)
            handle = None
        return 0

    @cython.final
    cdef int run_ready(self) except -1:
        cdef object ready = self._ready
        cdef bint is_deque = SC_READY_QUEUE and type(ready) is DEQUE
        cdef Py_ssize_t i, ntodo = Py_SIZE(ready) if is_deque else len(ready)
        cdef double t0, dt
        for i in range(ntodo):
            handle = DEQUE_POPLEFT(ready) if is_deque else ready.popleft()
            kind = type(handle)
            if kind is Handle or kind is TimerHandle or kind is ReadingHandle:
                if handle_cancelled(handle):
                    continue
            elif handle._cancelled:
                continue
            if self._debug:
                try:
                    self._current_handle = handle
                    t0 = monotonic()
                    handle._run()
                    dt = monotonic() - t0
                    if dt >= self.slow_callback_duration:
                        logger.warning('Executing %s took %.3f seconds',
                                       base_events._format_handle(handle), dt)
                finally:
                    self._current_handle = None
            elif kind is Handle or kind is TimerHandle:
                run_handle(handle)
            elif kind is ReadingHandle:
                try:
                    run_handle(handle)
                finally:
                    (<StreamTransport>handle._args[0]).start_reading_in_context()
            else:
                handle._run()
        return 0

    @cython.final
    cdef int flush_sends(self) except -1:
        """Hand what was written this iteration to the kernel: each
        transport that registered itself in send_flushes (its first write
        since the last enter) writes its requests now (flush_sends(): one
        SENDMSG for a stream, one chain for datagrams)."""
        cdef list todo = self.send_flushes
        cdef list spare = self.spare_flushes
        # two lists take turns (not a new one per iteration); None while
        # one is being run through
        self.spare_flushes = None
        self.send_flushes = spare if spare is not None else []
        try:
            for tr in todo:
                (<BaseTransport>tr).flush_sends()
        finally:
            # emptied in place, its room kept (`del todo[:]` would make a
            # slice object each iteration); no one else holds it until it
            # is spare_flushes again
            ul_list_empty(todo)
            self.spare_flushes = todo
        return 0

    cdef int ensure_recv_buffers(self) except -1:
        cdef int ret
        if self.recv_buffers_ready:
            return 0
        ret = ul_buf_ring_init(&self.ring.r, &self.recv_buffers, RECV_BUFFER_GROUP,
                               RECV_BUFFER_COUNT, RECV_BUFFER_SIZE)
        if ret < 0:
            raise OSError(-ret, f"cannot register the receive buffer ring: "
                                f"{os.strerror(-ret)}")
        self.recv_buffers_ready = True
        return 0

    # ---- transports --------------------------------------------------

    # context: the transport's callbacks run in it (CPython 3.15 passes
    # one; before, each transport copies the context current here)
    def _make_socket_transport(self, sock, protocol, waiter=None, *,
                               extra=None, server=None, context=None):
        return new_stream_transport(self, sock, protocol, waiter, extra, server,
                                    None, -1, -1, None, -1, -1, context)

    def _make_ssl_transport(self, rawsock, protocol, sslcontext, waiter=None,
                            *, server_side=False, server_hostname=None,
                            extra=None, server=None,
                            ssl_handshake_timeout=constants.SSL_HANDSHAKE_TIMEOUT,
                            ssl_shutdown_timeout=constants.SSL_SHUTDOWN_TIMEOUT,
                            call_connection_made=True, listener=None, context=None):
        # listener: the listening socket of an accepted connection, whose
        # set_zerocopy() settings the connection inherits
        ssl_protocol = RingSSLProtocol(     # transports/tls.pyx
            self, protocol, sslcontext, waiter, server_side, server_hostname,
            ssl_handshake_timeout=ssl_handshake_timeout,
            ssl_shutdown_timeout=ssl_shutdown_timeout,
            call_connection_made=call_connection_made)
        new_stream_transport(self, rawsock, ssl_protocol, None, extra, server, listener,
                             -1, -1, None, -1, -1, context)
        return ssl_protocol._app_transport

    def _make_datagram_transport(self, sock, protocol, address=None,
                                 waiter=None, extra=None):
        return new_datagram_transport(self, sock, protocol, address, waiter, extra)

    def _make_read_pipe_transport(self, pipe, protocol, waiter=None, extra=None):
        return new_pipe_transport(self, pipe, protocol, waiter, extra, False)

    def _make_write_pipe_transport(self, pipe, protocol, waiter=None, extra=None):
        return new_pipe_transport(self, pipe, protocol, waiter, extra, True)

    # TLS upgrades (transports/tls.pyx)
    start_tls = start_tls

    # child processes (process.pyx)
    _make_subprocess_transport = _make_subprocess_transport
    _watch_child = _watch_child

    # servers (transports/server.pyx)
    _start_serving = _start_serving
    _stop_serving = _stop_serving
    _accept_connection2 = _accept_connection2

    # registered buffers (buffer_pool.pyx)
    zerocopy_buffer = zerocopy_buffer

    # readiness callbacks (fdwatch.pyx)
    add_reader = add_reader
    remove_reader = remove_reader
    add_writer = add_writer
    remove_writer = remove_writer
    _ensure_fd_no_transport = _ensure_fd_no_transport

    # ---- socket operations (sockops.pyx) -----------------------------
    sock_recv = sock_recv
    sock_recv_into = sock_recv_into
    sock_recvfrom = sock_recvfrom
    sock_recvfrom_into = sock_recvfrom_into
    sock_accept = sock_accept
    sock_sendall = sock_sendall
    sock_sendto = sock_sendto
    sock_connect = sock_connect

    # ---- introspection ---------------------------------------------

    def stats(self):
        """Counters of this loop's ring, for tests and benchmarks.

        iterations: the loop's iterations (BaseEventLoop._run_once's);
        enter_calls: io_uring_enter system calls made; spins: waits that
        watched the ring before sleeping (after a short wait), spin_hits:
        those that found work without sleeping; sqes_submitted: SQEs
        the kernel consumed; cqes_reaped: completions handled; ops_in_flight:
        operations the kernel may still complete; transports: transports
        this loop made that are not yet collected (closed or not);
        sq_entries/cq_entries: ring sizes; setup_flags: the IORING_SETUP_*
        flags in force; sendfile_zero_copy / sendfile_copied: bytes sendfile
        moved without passing through user space, and through a buffer.
        """
        return {
            'iterations': self.iterations,
            'enter_calls': self.ring.r.enter_calls,
            'spins': self.spins,
            'spin_hits': self.spin_hits,
            'sqes_submitted': self.ring.r.sqes_submitted,
            'cqes_reaped': self.ring.r.cqes_reaped,
            'ops_in_flight': self.ops_in_flight,
            'transports': self.counts.transports if self.counts != NULL else 0,
            'sq_entries': self.ring.r.sq_entries,
            'cq_entries': self.ring.r.cq_entries,
            'setup_flags': self.ring.r.setup_flags,
            'driver': self.ring.driver,
            'driver_reason': self.ring.driver_reason,
            'sendfile_method': 'splice' if self.sendfile_splice else 'sendfile',
            'sendfile_zero_copy': self.sendfile_zero_copy,
            'sendfile_copied': self.sendfile_copied,
            'buffer_pool': (self.buffer_pool.stats() if self.buffer_pool is not None
                            else None),
        }

    def _check_owner_process(self):
        if os.getpid() != self.owner_pid:
            raise RuntimeError(
                "uringloop: this loop was created in another process; a "
                "forked child must create its own loop")

    def _detach_zcrx(self):
        users, self.zcrx_users = self.zcrx_users, []
        for zcrx in users:
            (<ZeroCopyReceive>zcrx).detach(False)

    def _stop_fd_watches(self):
        for op in self.accepting.values():
            (<ServerAccept>op).stop()
        self.accepting.clear()
        for watches in (self.readers, self.writers):
            for watch in watches.values():
                (<FdWatch>watch).stop()
            watches.clear()

    cdef int end_unconsumed(self) except -1:
        """Complete with -ECANCELED, and take back, the requests still in
        the submission queue, for a ring that will not be entered again."""
        cdef unsigned i, n = ul_sq_pending(&self.ring.r)
        cdef list ops = []
        cdef uint64_t user_data
        for i in range(n):
            user_data = ul_sq_unconsumed_at(&self.ring.r, i).user_data
            if user_data != 0:
                ops.append(<object><PyObject *><uintptr_t>user_data)
        ul_sq_take_back(&self.ring.r)
        for op in ops:
            self.dispatch(<Operation>op, -ECANCELED, 0)
        return 0

    # ---- teardown --------------------------------------------------

    def _close_ring(self):
        """Cancel every request in flight, wait (bounded) until the kernel
        has completed them, then unmap the ring."""
        cdef double deadline
        cdef Py_ssize_t kept = self.ops_in_flight
        self.spare_sends = None     # (each refers to the loop)
        self.spare_send_count = 0
        if not self.ring.open:
            return
        self.draining = True
        try:
            if self.ops_in_flight:
                try:
                    self.ring.cancel(0, IORING_ASYNC_CANCEL_ANY | IORING_ASYNC_CANCEL_ALL, -1)
                    deadline = monotonic() + CLOSE_DRAIN_SECONDS
                    while self.ops_in_flight and monotonic() < deadline:
                        self.ring.enter(1, 100000000)
                        self.reap()
                except (RuntimeError, OSError):
                    # Another thread owns the ring (SINGLE_ISSUER), so this
                    # one cannot submit or run the kernel's deferred
                    # completion work.  What waits in the submission queue
                    # never reached the kernel: it ends here.  Completions
                    # already posted are reaped.
                    self.end_unconsumed()
                    self.reap()
            kept = self.ops_in_flight
            if self.wakeup_op is not None and self.wakeup_op.life != OP_IDLE:
                # (closed from a thread other than the ring's owner: the
                # standing eventfd READ cannot be cancelled from here.  Its
                # 8-byte buffer is in the op, which keeps its reference.)
                kept -= 1
            if kept:
                # The kernel still holds these: keep their buffers alive for
                # good rather than free memory it may write to.
                logger.warning('uringloop: %d io_uring requests still in '
                               'flight at close; their buffers are kept', kept)
        finally:
            # sends owed by transports will never be written: a closed loop
            # holds no transport (nor, through it, the user's socket)
            self.send_flushes = []
            ul_spare_clear(&self.spare_bytes)
            if self.buffer_pool is not None:
                self.buffer_pool.close()
            if self.recv_buffers_ready and not kept:
                ul_buf_ring_free(&self.ring.r, &self.recv_buffers)
                self.recv_buffers_ready = False
            self.close_ring_now()
            self.close_wakeup_fd()
            if self.wakeup_op is not None:
                # breaks the loop <-> op cycle; an op the kernel still holds
                # must not keep the whole loop alive with it
                self.wakeup_op.loop = None
                self.wakeup_op = None


include "shortcuts/loop_methods.pyx"


class Loop(RingLoop, base_events.BaseEventLoop):
    """An asyncio event loop whose I/O goes through io_uring, or through
    the same operations on an epoll driver where io_uring is refused
    (loop.stats()['driver'] says which, 'driver_reason' why).

    Raises RingUnavailableError when URINGLOOP_DRIVER=ring forces the ring
    and the kernel refuses it.
    """

    def __init__(self):
        base_events.BaseEventLoop.__init__(self)
        self._signal_handlers = {}
        self._signal_ssock = None
        self._signal_csock = None
        self._signal_op = None

    def __repr__(self):
        return (f'<{type(self).__name__} running={self.is_running()} '
                f'closed={self.is_closed()} debug={self.get_debug()}>')

    def __del__(self, _base_del=base_events.BaseEventLoop.__del__,
                _finalizing=sys.is_finalizing):
        # A Loop whose ring could not be made never ran __init__: there is
        # nothing to warn about or close.  Nor when the interpreter is
        # shutting down: this module's globals may be gone already (a
        # gunicorn worker's loop is collected then: "'NoneType' object has
        # no attribute 'BaseEventLoop'"), and the process's exit gives the
        # ring and its sockets back to the kernel.
        if not hasattr(self, '_thread_id') or _finalizing():
            return
        _base_del(self)

    def run_forever(self):
        self._check_owner_process()
        cdef bint batching = (<RingLoop>self).batch_iterations
        (<RingLoop>self).batch_iterations = True      # (see _run_once)
        try:
            return base_events.BaseEventLoop.run_forever(self)
        finally:
            (<RingLoop>self).batch_iterations = batching

    def close(self):
        """Close the loop: stop signal handling, cancel every request in
        flight and wait for the kernel to release them, close the ring.
        Raises RuntimeError if the loop is running."""
        if self.is_running():
            raise RuntimeError("Cannot close a running event loop")
        if self.is_closed():
            return
        if sys.is_finalizing():
            for sig in list(self._signal_handlers):
                self._signal_handlers.pop(sig, None)
        else:
            for sig in list(self._signal_handlers):
                self.remove_signal_handler(sig)
        self._detach_zcrx()
        self._stop_fd_watches()
        base_events.BaseEventLoop.close(self)
        self._close_ring()
        files = sys.modules.get('uringloop.files')
        if files is not None:
            files._close_files_of(self)     # files left open: written out, closed
        for s in (self._signal_ssock, self._signal_csock):
            if s is not None:
                s.close()
        self._signal_ssock = self._signal_csock = None
        self._signal_op = None     # completed by the drain; breaks its cycle

    def _process_events(self, event_list):
        pass    # completions are dispatched in RingLoop.reap

    # signals (signals.pyx), Unix sockets (unix.pyx), sendfile (sendfile.pyx):
    # module functions the class takes as they are
    _check_signal = _check_signal
    _ensure_signal_socket = _ensure_signal_socket
    add_signal_handler = add_signal_handler
    _handle_signal = _handle_signal
    remove_signal_handler = remove_signal_handler
    create_unix_connection = create_unix_connection
    create_unix_server = create_unix_server
    _sendfile_native = _sendfile_native
    _sock_sendfile_native = _sock_sendfile_native


def features():
    """What this kernel's io_uring offers uringloop, found by probing once.

    A dict: 'available' (bool), 'error' (why not, when not), 'kernel'
    (uname release), 'setup_flags' (names of the optional IORING_SETUP_* flags
    the kernel accepted), 'opcodes' (name -> supported, for the operations
    uringloop uses), 'last_opcode', 'ring_entries' ((sq, cq) of the ring a
    Loop gets: smaller than the default under a tight RLIMIT_MEMLOCK).
    """
    global _features
    cdef Ring ring = new_ring("the probe ring", "closed")
    cdef unsigned char supported[256]
    cdef int ret
    cdef unsigned sq, cq
    if _features is not None:
        return dict(_features)
    result = {'kernel': os.uname().release, 'available': False, 'error': None,
              'setup_flags': [], 'opcodes': {}, 'last_opcode': None,
              'ring_entries': None}
    # the ring a Loop would make, so that 'available' means Loop() works
    # (a tiny RLIMIT_MEMLOCK refuses a full-size ring, not a probe's)
    shrink = ring_sizes(&sq, &cq)
    ret = ring.setup(sq, cq, WANTED_SETUP_FLAGS, shrink)
    if ret < 0:
        result['error'] = str(setup_error(ret))
    else:
        try:
            result['available'] = True
            result['ring_entries'] = (ring.r.sq_entries, ring.r.cq_entries)
            for name, flag in (('SUBMIT_ALL', IORING_SETUP_SUBMIT_ALL),
                               ('SINGLE_ISSUER', IORING_SETUP_SINGLE_ISSUER),
                               ('DEFER_TASKRUN', IORING_SETUP_DEFER_TASKRUN),
                               ('TASKRUN_FLAG', IORING_SETUP_TASKRUN_FLAG),
                               ('R_DISABLED', IORING_SETUP_R_DISABLED),
                               ('NO_SQARRAY', IORING_SETUP_NO_SQARRAY)):
                if ring.r.setup_flags & flag:
                    result['setup_flags'].append(name)
            ret = ul_ring_probe(&ring.r, supported)
            if ret >= 0:
                result['last_opcode'] = ret
                for name, op in OPCODES.items():
                    result['opcodes'][name] = bool(supported[op])
        finally:
            ring.close()
    _features = result
    return dict(result)


# The opcodes uringloop uses or will use, by their kernel names.
OPCODES = {
    'NOP': 0, 'FSYNC': 3, 'OPENAT': 18, 'STATX': 21, 'READ': 22, 'WRITE': 23, 'POLL_ADD': 6, 'SENDMSG': 9,
    'RECVMSG': 10, 'ACCEPT': 13, 'ASYNC_CANCEL': 14, 'CONNECT': 16,
    'CLOSE': 19, 'SEND': 26, 'RECV': 27, 'SPLICE': 30, 'SHUTDOWN': 34,
    'SOCKET': 45, 'SEND_ZC': 47, 'SENDMSG_ZC': 48, 'READ_MULTISHOT': 49,
    'WAITID': 50, 'FTRUNCATE': 55, 'BIND': 56, 'LISTEN': 57, 'RECV_ZC': 58,
    'READV_FIXED': 60,      # not used: its presence says SENDMSG_ZC takes registered buffers
}
