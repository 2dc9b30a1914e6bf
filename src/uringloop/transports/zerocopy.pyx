# Zero-copy send for stream transports (IORING_OP_SEND_ZC).
#
# Kernel facts this relies on (docs/design.md): a SEND_ZC posts two CQEs with
# the same user_data -- the send result, with IORING_CQE_F_MORE, and later a
# notification with IORING_CQE_F_NOTIF once the kernel no longer needs the
# pages.  The write queue advances on the first CQE (the data is in the
# socket, ordered); the buffer stays held until the notification.  We never
# wait for notifications before sending more: consecutive SEND_ZC on one TCP
# socket from one ring stack their notifications (6.10).  With
# IORING_SEND_ZC_REPORT_USAGE (6.2) a notification whose res has
# IORING_NOTIF_USAGE_ZC_COPIED set says the kernel copied after all: loopback
# and veth to a local socket always do, and there zero-copy only costs, so
# auto mode turns itself off for the transport after a few such reports.

SOL_URINGLOOP = 0x55524c        # uringloop's socket option level ("URL")
ZC_MODE = 1
ZC_THRESHOLD = 2
ZC_AUTO = 0
ZC_ALWAYS = 1
ZC_NEVER = 2
SO_ZEROCOPY = 60
_MODE_NAMES = {ZC_AUTO: 'auto', ZC_ALWAYS: 'always', ZC_NEVER: 'never'}

cdef int AUTO_PROBE_REPORTS = 4       # copied reports before auto gives up
cdef Py_ssize_t DEFAULT_ZC_THRESHOLD = 16 * 1024
# Datagrams from 7.5 KiB up leave with SEND_ZC in auto mode, where it
# overtakes copying into a sink over veth: below it, pinning the pages and
# the notification cost the kernel more than the copy it saves
# (docs/benchmarks.md, "Figures behind the code's constants").
cdef Py_ssize_t DATAGRAM_ZC_THRESHOLD = 7680
# A TCP connection's first bytes go ordinarily even in auto mode: with BBR,
# zero-copy probes at the very start of a connection slowed some
# connections for their whole life (BBR's early bandwidth samples), probes
# after this many ordinary bytes none (docs/benchmarks.md, "Figures behind
# the code's constants").  A connection carrying less gains little from
# zero-copy anyway.
cdef Py_ssize_t AUTO_WARMUP_BYTES = 256 * 1024


class ZeroCopyResult(collections.namedtuple('ZeroCopyResult', 'nbytes zerocopy')):
    """What write_zerocopy()'s future resolves to: the bytes sent, and
    whether the kernel sent all of them without copying."""
    __slots__ = ()


cdef object zc_result(Py_ssize_t nbytes, bint zerocopy):
    """ZeroCopyResult(nbytes, zerocopy), made as tuple.__new__ makes a
    tuple subclass's instance: the namedtuple's own __new__ is a Python
    function."""
    cdef object result = PyType_GenericAlloc(<PyTypeObject *>ZeroCopyResult, 2)
    cdef object n = nbytes                        # (typed object: each item
    cdef object flag = True if zerocopy else False  # is a reference of its own)
    Py_INCREF(n)
    PyTuple_SET_ITEM(result, 0, n)
    Py_INCREF(flag)
    PyTuple_SET_ITEM(result, 1, flag)
    return result


# The loop-wide defaults, read from the environment when a loop is made.
def _default_mode():
    value = os.environ.get('URINGLOOP_ZC_MODE', 'auto').lower()
    for mode, name in _MODE_NAMES.items():
        if name == value:
            return mode
    return ZC_AUTO


def _default_threshold():
    """URINGLOOP_ZC_THRESHOLD, or -1: each kind of transport's own."""
    try:
        return max(0, int(os.environ['URINGLOOP_ZC_THRESHOLD']))
    except (KeyError, ValueError):
        return -1


@cython.no_gc      # its one object is a str or None: no cycle, one tracked object less per connection
cdef class ZeroCopyPolicy:
    """Per transport: whether a chunk leaves with SEND_ZC, and what
    happened so far."""

    cdef bint wants(self, object chunk, Py_ssize_t size, Py_ssize_t plain_bytes) noexcept:
        """Whether this chunk (size bytes of it left) leaves with a
        zero-copy send; plain_bytes: what the transport sent ordinarily
        so far."""
        if self.skip_next:
            self.skip_next = False
            return False
        if not self.active():
            return False
        if type(chunk) is ZeroCopyFuture or self.mode == ZC_ALWAYS:
            return True
        # auto: large immutable chunks only (write() copies mutable ones),
        # once the connection is past its start (see AUTO_WARMUP_BYTES)
        return size >= self.threshold and plain_bytes >= self.warmup_bytes

    cdef bint may_want(self, Py_ssize_t size, Py_ssize_t plain_bytes) noexcept:
        """Whether wants() could say yes to a bytes chunk of this size (no
        side effect): if not, write() may send it with send(2) at once."""
        if not self.active():
            return False
        if self.mode == ZC_ALWAYS:
            return True
        return size >= self.threshold and plain_bytes >= self.warmup_bytes

    cdef bint active(self) noexcept:
        """Whether wants() can say yes to anything: a stream transport
        asks only then (StreamTransport.zc_maybe)."""
        return self.off_reason is None and self.mode != ZC_NEVER

    cdef bint absorb_error(self, int32_t res):
        """True when a failed SEND_ZC/SENDMSG_ZC should be sent again
        ordinarily, without an error to the user: EOPNOTSUPP (no zero-copy
        on this socket) for good, ENOMEM (RLIMIT_MEMLOCK: the pages could
        not be pinned) for this chunk, EINVAL for a kernel without
        IORING_SEND_ZC_REPORT_USAGE (6.1) without that flag."""
        if res == -EOPNOTSUPP:
            self.turn_off('the socket refused zero-copy send (EOPNOTSUPP)')
        elif res == -ENOMEM:
            self.skip_next = True
        elif res == -EINVAL and self.report_usage:
            self.report_usage = False
        else:
            return False
        return True

    cdef turn_off(self, str reason, bint log=True):
        if self.off_reason is None:
            self.off_reason = reason
            if log:
                logger.debug('uringloop: zero-copy send off for a transport: %s', reason)

    cdef note_notification(self, int32_t res):
        self.notifs_pending -= 1
        if not self.report_usage:
            return
        if <uint32_t>res & IORING_NOTIF_USAGE_ZC_COPIED:
            self.copied_reports += 1
            if (self.mode == ZC_AUTO and self.clean_reports == 0
                    and self.copied_reports >= AUTO_PROBE_REPORTS):
                self.turn_off('the kernel copied the data anyway (a local '
                              'path such as loopback): IORING_NOTIF_USAGE_ZC_COPIED')
        else:
            self.clean_reports += 1

    def _set_mode(self, int mode):
        # An explicit choice also lifts the start-up guess that the peer
        # is local (auto mode then probes with the kernel's reports).
        self.mode = mode
        if self.off_reason == LOCAL_PEER_REASON:
            self.off_reason = None

    def stats(self):
        return {
            'mode': _MODE_NAMES[self.mode],
            'threshold': self.threshold,
            'warmup_bytes': self.warmup_bytes,
            'active': self.active(),
            'zerocopy_sends': self.zc_sends,
            'zerocopy_bytes': self.zc_bytes,
            'registered_buffer_sends': self.fixed_sends,
            'batched_sends': self.batched_sends,
            'copied_reports': self.copied_reports,
            'zerocopy_reports': self.clean_reports,
            'notifications_pending': self.notifs_pending,
            'ordinary_sends': self.plain_sends,
            'ordinary_bytes': self.plain_bytes,
            'off_reason': self.off_reason,
        }


LOCAL_PEER_REASON = ('the peer is on this host (loopback or an address of '
                     'this socket): the kernel copies for local delivery')


cdef bytes IN6_LOOPBACK = bytes(15) + b'\x01'            # ::1
cdef bytes IN6_V4MAPPED_PREFIX = bytes(10) + b'\xff\xff'  # ::ffff:a.b.c.d


cdef bint is_local_peer(object peer, object local):
    """A TCP/UDP peer on this host: a loopback address (127/8, ::1, or
    127/8 mapped into IPv6), or the socket's own address.  The kernel
    copies zero-copy data delivered locally, and with a small receive
    buffer the peer even drops the page-sized segments and TCP stalls in
    retransmissions (docs/benchmarks.md, "Behind the comments").  Parsed with inet_pton(3), not
    the ipaddress module: it runs for every accepted connection."""
    cdef unsigned char raw[16]
    if not isinstance(peer, tuple) or not isinstance(local, tuple):
        return False
    host = peer[0]
    if not isinstance(host, str):
        return False
    if host == local[0]:
        return True
    encoded = (<str>host).partition('%')[0].encode('ascii', 'replace')
    if inet_pton(AF_INET, encoded, raw) == 1:
        return raw[0] == 127
    if inet_pton(AF_INET6, encoded, raw) != 1:
        return False
    if memcmp(raw, <const char *>IN6_LOOPBACK, 16) == 0:
        return True
    return memcmp(raw, <const char *>IN6_V4MAPPED_PREFIX, 12) == 0 and raw[12] == 127


# Settings made with set_zerocopy() on plain sockets, before a transport
# exists (create_connection(sock=...), create_server(sock=...)).
_socket_settings = weakref.WeakKeyDictionary()
# Listening sockets whose connections receive with zcrx (set_zerocopy(receive=)).
_receive_settings = weakref.WeakKeyDictionary()
# set_zerocopy() was called for some socket: until then a new transport
# looks in neither dictionary (an attribute of each, `.data`, read per
# accepted connection)
cdef bint zerocopy_settings_given = False


def set_zerocopy(sock, *, mode=None, threshold=None, receive=None):
    """Zero-copy settings for a socket that will be handed to the loop
    (create_connection/create_server/create_datagram_endpoint with sock=);
    transports made from it -- and, for a listening socket, the connections
    it accepts -- start with them.  mode is ZC_AUTO, ZC_ALWAYS or ZC_NEVER,
    threshold a byte count; None keeps the loop-wide default.  receive, for
    a listening socket, is a ZeroCopyReceive its connections use.  Raises
    ValueError for other values, TypeError for a receive of another type.  On a live transport use its socket's
    setsockopt(SOL_URINGLOOP, ...) instead."""
    if mode is not None and mode not in _MODE_NAMES:
        raise ValueError(f'mode must be ZC_AUTO, ZC_ALWAYS or ZC_NEVER, not {mode!r}')
    if threshold is not None and (not isinstance(threshold, int) or not 0 <= threshold <= 1 << 40):
        raise ValueError(f'threshold out of range: {threshold!r}')
    if receive is not None and not isinstance(receive, ZeroCopyReceive):
        raise TypeError(f'receive must be a ZeroCopyReceive, not {type(receive).__name__}')
    global zerocopy_settings_given
    zerocopy_settings_given = True
    _socket_settings[sock] = (mode, threshold)
    if receive is not None:
        _receive_settings[sock] = receive


cdef ZeroCopyPolicy new_policy(RingLoop loop, object sock=None, object listener=None,
                               Py_ssize_t kind_threshold=DEFAULT_ZC_THRESHOLD):
    """The policy of a new transport: the loop's defaults (threshold: the
    transport kind's own unless URINGLOOP_ZC_THRESHOLD is set), then what
    set_zerocopy() said for its socket or listener."""
    cdef ZeroCopyPolicy p = ZeroCopyPolicy.__new__(ZeroCopyPolicy)
    p.mode = loop.zc_default_mode
    p.threshold = (loop.zc_default_threshold if loop.zc_default_threshold >= 0
                   else kind_threshold)
    if zerocopy_settings_given:
        for owner in (listener, sock):
            if owner is not None and owner in _socket_settings:
                mode, threshold = _socket_settings[owner]
                if mode is not None:
                    p.mode = mode
                if threshold is not None:
                    p.threshold = threshold
    p.report_usage = True
    if not loop.ops_supported[47]:          # IORING_OP_SEND_ZC
        p.off_reason = 'the kernel has no IORING_OP_SEND_ZC'
    return p


cdef ZeroCopyFuture new_zerocopy_buffer(RingLoop loop, object buf):
    """Export buf for a zero-copy send (ValueError when it is not
    C-contiguous) and note whether it lies in a registered buffer."""
    cdef ZeroCopyFuture zb = ZeroCopyFuture.__new__(ZeroCopyFuture)
    try:
        hold_view(buf, &zb.view, PyBUF_SIMPLE)
    except BufferError as exc:
        raise ValueError(f'a zero-copy send needs a C-contiguous buffer: {exc}') from None
    zb.has_view = True
    zb.nbytes = zb.view.len
    zb.buf_index = -1
    if loop.buffer_pool is not None:
        zb.buf_index = loop.buffer_pool.index_of(<char *>zb.view.buf, zb.view.len)
    zb.loop = loop
    return zb


cdef enum:
    FUTURE_PENDING = 0
    FUTURE_RESULT = 1
    FUTURE_EXCEPTION = 2
    FUTURE_CANCELLED = 3


# (no __del__ of its own, or it could not come from a free list: an object
# reused from one keeps the mark of its first __del__, and a report of an
# unretrieved exception was lost so; UnretrievedError makes the report)
@cython.freelist(64)
cdef class ZeroCopyFuture:
    """What write_zerocopy() and sendto_zerocopy() return: the send's
    buffer, exported (a bytearray cannot be resized) until the kernel lets
    go of it, and the future that says when -- resolving to
    ZeroCopyResult(nbytes, zerocopy), or to the send's error.

    It behaves as an asyncio.Future (asyncio.isfuture() is True): await
    it, pass it to gather(), wait() or wait_for(), add_done_callback(),
    result(), exception(), cancel().  It is not an asyncio.Future because
    that costs a good part of the send it reports on (docs/benchmarks.md,
    "Behind the comments").  Only the loop settles it; cancelling it does
    not release the buffer earlier.
    An exception nobody retrieved is reported to the loop's exception
    handler when the object goes, as a Future's is (UnretrievedError)."""

    def __init__(self):
        raise TypeError('ZeroCopyFuture objects come from write_zerocopy() '
                        'and sendto_zerocopy()')

    cdef int finish_if_released(self) except -1:
        if not self.sent or self.zc_inflight:
            return 0
        if self.has_view:
            self.has_view = False
            drop_view(&self.view)
        if self.error is not None:
            return self.settle(FUTURE_EXCEPTION, self.error)
        # the ZeroCopyResult is made when asked for: a sender that only
        # looks at done() before reusing its buffer never needs it
        self.whole_zerocopy = self.any_zerocopy and not self.any_copied
        return self.settle(FUTURE_RESULT, None)

    cdef int fail(self, object exc) except -1:
        # dropped from the queue (abort, error): nothing more will be sent
        self.sent = True
        self.error = exc
        if self.zc_inflight:
            return 0           # still held by the kernel; released later
        if self.has_view:
            self.has_view = False
            drop_view(&self.view)
        return self.settle(FUTURE_EXCEPTION, exc)

    cdef int settle(self, int state, object outcome) except -1:
        """The loop's set_result()/set_exception(): once, and not after
        a cancel()."""
        cdef list callbacks = self.callbacks
        if self.state != FUTURE_PENDING:
            return 0
        self.state = state
        self.outcome = outcome
        if state == FUTURE_EXCEPTION:
            self.reporter = new_unretrieved_error(self)
        if callbacks is not None:
            self.callbacks = None
            for fn, context in callbacks:
                self.loop.call_soon(fn, self, context=context)
        return 0

    # -- the asyncio.Future interface ------------------------------------

    def done(self):
        return self.state != FUTURE_PENDING

    def cancelled(self):
        return self.state == FUTURE_CANCELLED

    def result(self):
        if self.state == FUTURE_RESULT:
            if self.outcome is None:
                self.outcome = zc_result(self.nbytes, self.whole_zerocopy)
            return self.outcome
        if self.state == FUTURE_CANCELLED:
            raise self.cancelled_error()
        if self.state == FUTURE_PENDING:
            raise exceptions.InvalidStateError('Result is not set.')
        self.retrieved()
        raise self.outcome

    def exception(self):
        if self.state == FUTURE_CANCELLED:
            raise self.cancelled_error()
        if self.state == FUTURE_PENDING:
            raise exceptions.InvalidStateError('Exception is not set.')
        self.retrieved()
        return self.outcome if self.state == FUTURE_EXCEPTION else None

    def add_done_callback(self, fn, *, context=None):
        if self.loop is None:
            raise RuntimeError('this ZeroCopyFuture was not made by a send')
        if context is None:
            context = contextvars.copy_context()
        if self.state != FUTURE_PENDING:
            self.loop.call_soon(fn, self, context=context)
        elif self.callbacks is None:
            self.callbacks = [(fn, context)]
        else:
            self.callbacks.append((fn, context))

    def remove_done_callback(self, fn):
        """Remove every registration of fn; return how many there were."""
        if not self.callbacks:
            return 0
        kept = [(f, c) for f, c in self.callbacks if f != fn]
        removed = len(self.callbacks) - len(kept)
        self.callbacks = kept or None
        return removed

    def cancel(self, msg=None):
        self.retrieved()
        if self.state != FUTURE_PENDING:
            return False
        self.cancel_message = msg
        self.settle(FUTURE_CANCELLED, None)
        return True

    def get_loop(self):
        return self.loop

    cdef object cancelled_error(self):
        if self.cancel_message is None:
            return exceptions.CancelledError()
        return exceptions.CancelledError(self.cancel_message)

    def __await__(self):
        if self.state == FUTURE_PENDING:
            self._asyncio_future_blocking = True
            yield self
        if self.state == FUTURE_PENDING:
            raise RuntimeError("await wasn't used with future")
        return self.result()

    def __iter__(self):
        return self.__await__()

    cdef int retrieved(self) except -1:
        if self.reporter is not None:
            self.reporter.exception = None
            self.reporter = None
        return 0

    def __repr__(self):
        state = ('pending', 'finished', 'finished', 'cancelled')[self.state]
        if self.state == FUTURE_RESULT:
            outcome = f' {zc_result(self.nbytes, self.whole_zerocopy)!r}'
        elif self.state == FUTURE_EXCEPTION:
            outcome = f' {self.outcome!r}'
        else:
            outcome = ''
        return f'<ZeroCopyFuture {state} {self.nbytes} bytes{outcome}>'

    def __dealloc__(self):
        if self.has_view:
            self.has_view = False
            drop_view(&self.view)


cdef UnretrievedError new_unretrieved_error(ZeroCopyFuture fut):
    cdef UnretrievedError r = UnretrievedError.__new__(UnretrievedError)
    r.loop = fut.loop
    r.exception = fut.outcome
    r.future_repr = repr(fut)
    return r


@cython.final
cdef class UnretrievedError:
    """Reports a ZeroCopyFuture's exception that nobody retrieved, when
    the future goes (it holds the only reference).  A __del__ of the
    future itself would run for every send, failed or not."""

    def __del__(self):
        if self.exception is None or self.loop is None:
            return
        self.loop.call_exception_handler({
            'message': 'ZeroCopyFuture exception was never retrieved',
            'exception': self.exception,
            'future': self.future_repr,
        })


cdef int zc_notified(ZeroCopyPolicy zc, object chunk, int32_t res) except -1:
    """A SEND_ZC(MSG)'s notification CQE: the kernel let go of the pages of
    `chunk` (bytes or ZeroCopyFuture, or a list of them: a stream's
    SENDMSG_ZC); res says whether it copied."""
    zc.note_notification(res)
    return chunk_released(chunk, res, True)


cdef int zc_failed_early(ZeroCopyPolicy zc, object chunk) except -1:
    """A SEND_ZC(MSG) whose first CQE came without IORING_CQE_F_MORE: it
    failed before taking the data, and no notification follows."""
    zc.notifs_pending -= 1
    return chunk_released(chunk, 0, False)


cdef int chunk_released(object chunk, int32_t res, bint notified) except -1:
    """The kernel let go of chunk (a list: of each of them); with
    `notified`, res is the notification's, saying whether it copied."""
    cdef ZeroCopyFuture zb
    if type(chunk) is list:
        for c in <list>chunk:
            chunk_released(c, res, notified)
        return 0
    if type(chunk) is not ZeroCopyFuture:
        return 0
    zb = <ZeroCopyFuture>chunk
    zb.zc_inflight -= 1
    if notified:
        if <uint32_t>res & IORING_NOTIF_USAGE_ZC_COPIED:
            zb.any_copied = True
        else:
            zb.any_zerocopy = True
    return zb.finish_if_released()


cdef Py_ssize_t zc_batch(StreamTransport tr, object head):
    """How many chunks from the head leave in one zero-copy request:
    one SENDMSG_ZC takes every zero-copy chunk queued behind the head
    (within queue_batch's bounds), as the copying path's SENDMSG takes
    every chunk; one SEND_ZC per chunk went one request, and one enter,
    per chunk, a small fraction of copying's rate (docs/benchmarks.md,
    "Behind the comments").  Chunks in registered buffers go together
    only when they lie in the same registered region (one request names
    one buffer index) and the kernel takes a vectored registered send
    (6.15, probed by its READV_FIXED); otherwise a registered chunk goes
    alone with SEND_ZC, the one zero-copy request that names a fixed
    buffer on every kernel (one enter per send before 6.15)."""
    cdef Py_ssize_t n = 1, size = queue_len(tr.write_queue), limit
    cdef int index = -1
    if size == 1 or not tr.loop.ops_supported[48]:     # IORING_OP_SENDMSG_ZC
        return 1
    if type(head) is ZeroCopyFuture and (<ZeroCopyFuture>head).buf_index >= 0:
        if not tr.loop.ops_supported[UL_OP_READV_FIXED]:
            return 1
        index = (<ZeroCopyFuture>head).buf_index
    limit = queue_batch(tr, size)       # MAX_IOV and SEND_BATCH_BYTES
    while n < limit:
        chunk = queue_at(tr.write_queue, n)
        if type(chunk) is ZeroCopyFuture:
            if (<ZeroCopyFuture>chunk).buf_index != index:
                break           # another region, or registered after plain
        elif index >= 0 or tr.zc.mode != ZC_ALWAYS:
            break
        n += 1
    return n


@cython.final
cdef class ZcSend(Operation):
    """One zero-copy send of a stream transport: its chunks stay held until
    the kernel's notification (F_NOTIF), after the send's own completion."""

    cdef object owner(self):
        return self.transport

    cdef int arm(self, object head, Py_ssize_t n) except -1:
        """SEND_ZC of the head chunk (n == 1), or SENDMSG_ZC of the n
        chunks queued from it (zc_batch); a chunk in a
        registered buffer names its slot and pins no pages."""
        cdef StreamTransport tr = self.transport
        cdef ZeroCopyPolicy zc = tr.zc
        cdef unsigned zc_flags = IORING_SEND_ZC_REPORT_USAGE if zc.report_usage else 0
        cdef int index = -1
        if type(head) is ZeroCopyFuture:
            index = (<ZeroCopyFuture>head).buf_index
        if n > 1:
            self.iov = <iovec *>PyMem_Malloc(n * sizeof(iovec))
            if self.iov == NULL:
                raise MemoryError()
            self.chunk = queue_message(tr, &self.msg, self.iov, n)
            for chunk in <list>self.chunk:
                if type(chunk) is ZeroCopyFuture:
                    (<ZeroCopyFuture>chunk).zc_inflight += 1
            if index >= 0:
                # all n in one registered region (zc_batch)
                ul_prep_sendmsg_zc_fixed(self.loop.sqe_for(self), tr.fd, &self.msg,
                                         MSG_NOSIGNAL, zc_flags, index)
                zc.fixed_sends += n
            else:
                ul_prep_sendmsg_zc(self.loop.sqe_for(self), tr.fd, &self.msg, MSG_NOSIGNAL,
                                   zc_flags)
            zc.batched_sends += 1
            return 0
        self.chunk = head
        if index >= 0:
            ul_prep_send_zc_fixed(self.loop.sqe_for(self), tr.fd,
                                  chunk_ptr(head) + tr.head_offset,
                                  <size_t>(chunk_len(head) - tr.head_offset), MSG_NOSIGNAL,
                                  zc_flags, index)
            zc.fixed_sends += 1
        else:
            ul_prep_send_zc(self.loop.sqe_for(self), tr.fd, chunk_ptr(head) + tr.head_offset,
                            <size_t>(chunk_len(head) - tr.head_offset), MSG_NOSIGNAL,
                            zc_flags)
        if type(head) is ZeroCopyFuture:
            (<ZeroCopyFuture>head).zc_inflight += 1
        return 0

    cdef int complete(self, int32_t res, uint32_t flags) except -1:
        cdef StreamTransport tr = self.transport
        chunk = self.chunk
        if flags & IORING_CQE_F_NOTIF:
            self.chunk = None
            return zc_notified(tr.zc, chunk, res)
        if not (flags & IORING_CQE_F_MORE):
            self.chunk = None
            zc_failed_early(tr.zc, chunk)
        return zc_send_completed(tr, res)

    cdef int release(self) except -1:
        self.chunk = None
        return 0

    def __dealloc__(self):
        PyMem_Free(self.iov)


class UringTransportSocket(trsock.TransportSocket):
    """The 'socket' extra info of a stream transport: asyncio's
    TransportSocket, plus uringloop's option level for zero-copy tuning.

    setsockopt(SOL_URINGLOOP, ZC_MODE, ZC_AUTO | ZC_ALWAYS | ZC_NEVER)
    setsockopt(SOL_URINGLOOP, ZC_THRESHOLD, nbytes)   # auto mode's minimum
    setsockopt(SOL_SOCKET, SO_ZEROCOPY, 0)            # also means ZC_NEVER
    Raises OSError(EINVAL) for a bad value, OSError(ENOPROTOOPT) for an
    unknown option of the level."""

    __slots__ = ('_policy', '_owner')

    def __init__(self, sock, policy, owner=None):
        super().__init__(sock)
        self._policy = policy
        # a stream transport, weakly: it keeps whether its policy is
        # active (zc_maybe), and this object is kept by it
        self._owner = weakref.ref(owner) if owner is not None else None

    def _changed(self):
        owner = self._owner() if self._owner is not None else None
        if owner is not None:
            zc_policy_changed(owner)

    def setsockopt(self, level, optname, value, *args):
        if level == SOL_URINGLOOP:
            if args or not isinstance(value, int) or isinstance(value, bool):
                raise OSError(_errno.EINVAL, 'uringloop options take an int')
            if optname == ZC_MODE:
                if value not in _MODE_NAMES:
                    raise OSError(_errno.EINVAL, f'ZC_MODE must be ZC_AUTO, ZC_ALWAYS or ZC_NEVER, not {value}')
                self._policy._set_mode(value)
                self._changed()
                return
            if optname == ZC_THRESHOLD:
                if not 0 <= value <= 1 << 40:
                    raise OSError(_errno.EINVAL, f'ZC_THRESHOLD out of range: {value}')
                self._policy.threshold = value
                return
            raise OSError(_errno.ENOPROTOOPT, f'unknown uringloop option {optname}')
        self._sock.setsockopt(level, optname, value, *args)
        if level == socket.SOL_SOCKET and optname == SO_ZEROCOPY and not args:
            self._policy.mode = ZC_NEVER if not value else (
                ZC_AUTO if self._policy.mode == ZC_NEVER else self._policy.mode)
            self._changed()

    def getsockopt(self, level, optname, *args):
        if level == SOL_URINGLOOP:
            if optname == ZC_MODE:
                return self._policy.mode
            if optname == ZC_THRESHOLD:
                return self._policy.threshold
            raise OSError(_errno.ENOPROTOOPT, f'unknown uringloop option {optname}')
        return self._sock.getsockopt(level, optname, *args)


# ---- a stream's zero-copy send (its send state SEND_ZEROCOPY) ----------------

cdef int submit_send_zc(StreamTransport tr, object head) except -1:
    """The head chunk with SEND_ZC, or it and the zero-copy chunks
    behind it with one SENDMSG_ZC (zc_batch); they stay held until the
    kernel's notification."""
    cdef ZcSend op = ZcSend.__new__(ZcSend)
    op.sends = True
    op.loop = tr.loop
    op.context = tr.context
    op.transport = tr
    tr.set_send_state(SEND_ZEROCOPY)
    op.arm(head, zc_batch(tr, head))
    tr.zc.notifs_pending += 1
    tr.send_request = op
    return tr.op_started()


cdef int zc_send_completed(StreamTransport tr, int32_t res) except -1:
    tr.send_request = None
    if tr.zc.absorb_error(res):
        # refused before it sent a byte: the policy turned zero-copy
        # off (or skips it once), and the queue goes again
        tr.op_finished()
        if queue_len(tr.write_queue) and not tr.conn_lost:
            return submit_send(tr)
        tr.set_send_state(SEND_IDLE)
        return return_sender(tr)
    if res > 0:
        tr.zc.zc_sends += 1
        tr.zc.zc_bytes += res
    return send_completed(tr, res, True)
