# The stream transport's sending: its write queue (ChunkQueue), the
# StreamSend that sends from it, lent by the loop with the queue while a
# transport has something to send, and the moves of the send state that
# a request's answer makes (submit_send(), send_result()).  The states and
# their table: stream.pxd and docs/design.md, "Stream transport states";
# why sends are batched, and when a write is sent inside write(): the top
# of stream.pyx.  Included by core.pyx after stream.pyx.

cdef inline char *chunk_ptr(object chunk):
    if type(chunk) is bytes:
        return PyBytes_AS_STRING(chunk)
    return <char *>(<ZeroCopyFuture>chunk).view.buf


# The write queue: a ring of chunks in a list, smaller than a deque, whose
# append and popleft were Python calls through bound methods and whose
# items were read through its type's slot (docs/benchmarks.md, "Behind the comments").
# The list keeps the references where the garbage collector sees them.  The
# oldest chunk is held by the queue object itself (`first`), and the list is
# made at the first second chunk (ChunkQueue).
cdef Py_ssize_t QUEUE_FIRST_SIZE = 8        # slots of a new queue
cdef Py_ssize_t QUEUE_KEPT_SIZE = 64        # ... and the most a lent one keeps


cdef inline object list_swap(list items, Py_ssize_t i, object value):
    """items[i] = value, returning what was there: the list's slots
    written as the macros do (Cython's item assignment is a call that
    checks the type, the index and the sign each time)."""
    old = <object>PyList_GET_ITEM(items, i)
    Py_INCREF(value)
    PyList_SET_ITEM(items, i, value)
    Py_DECREF(old)              # (the list's reference; `old` holds its own)
    return old


@cython.final
cdef class ChunkQueue:
    # The oldest chunk is held by the queue itself (`first`), the ones
    # behind it in the ring, whose list is made at the first second
    # chunk: most sends are of one chunk, and theirs touches neither the
    # list nor its slots (their first use after an enter, the kernel's
    # send work between, was a cache miss each: docs/benchmarks.md, "The
    # hot path's own calls").

    cdef int append(self, object chunk) except -1:
        cdef Py_ssize_t behind = self.count - 1, size, i
        cdef list bigger
        if self.count == 0:
            self.first = chunk
            self.count = 1
            return 0
        if self.items is None:
            self.items = [None] * QUEUE_FIRST_SIZE
            self.mask = QUEUE_FIRST_SIZE - 1
            self.head = 0
        size = self.mask + 1
        if behind == size:
            # full: twice as long, the oldest first
            bigger = [None] * (2 * size)
            for i in range(size):
                bigger[i] = self.items[(self.head + i) & self.mask]
            self.items = bigger
            self.head = 0
            self.mask = 2 * size - 1
        list_swap(self.items, (self.head + behind) & self.mask, chunk)
        self.count += 1
        return 0

    cdef object popleft(self):
        chunk = self.first
        self.count -= 1
        if self.count:
            self.first = list_swap(self.items, self.head, None)
            self.head = (self.head + 1) & self.mask
        else:
            self.first = None
        return chunk

    cdef int clear(self) except -1:
        """Empty it; a ring that grew past QUEUE_KEPT_SIZE goes (a lent
        queue serves any connection next)."""
        if self.mask >= QUEUE_KEPT_SIZE:
            self.items = None
            self.mask = 0
            self.first = None
        else:
            while self.count:
                self.popleft()
        self.head = self.count = 0
        return 0



cdef inline Py_ssize_t queue_len(ChunkQueue queue) noexcept:
    """How many chunks a transport's write queue holds, 0 while it has
    none (None: no sender lent)."""
    if queue is None:
        return 0
    return queue.count


cdef inline object queue_at(ChunkQueue queue, Py_ssize_t i):
    """queue[i], 0 <= i < queue_len(queue)."""
    if i == 0:
        return queue.first
    return <object>PyList_GET_ITEM(queue.items, (queue.head + i - 1) & queue.mask)


cdef inline Py_ssize_t chunk_len(object chunk) noexcept:
    if type(chunk) is bytes:
        return len(<bytes>chunk)
    return (<ZeroCopyFuture>chunk).view.len


@cython.final
cdef class StreamSend(Operation):

    cdef object owner(self):
        return self.transport

    cdef int arm(self) except -1:
        """A SEND of the transport's head chunk, or a SENDMSG of the chunks
        queued from it (queue_batch); held from when the request is in
        flight (sqe_for) until the completion, so that a StreamSend with
        none in flight holds nothing (return_sender)."""
        cdef StreamTransport tr = self.transport
        cdef Py_ssize_t n = queue_len(tr.write_queue)
        cdef io_uring_sqe *sqe
        head = queue_at(tr.write_queue, 0)
        if n == 1:
            sqe = self.loop.sqe_for(self)
            self.held = head
            ul_prep_send(sqe, tr.fd, chunk_ptr(head) + tr.head_offset,
                         <size_t>(chunk_len(head) - tr.head_offset), MSG_NOSIGNAL)
            return 0
        n = queue_batch(tr, n)
        if self.iov == NULL:
            # (most sends are of one chunk and need none: a connection
            # with a send in flight costs 1 KiB less)
            self.iov = <iovec *>PyMem_Malloc(MAX_IOV * sizeof(iovec))
            if self.iov == NULL:
                raise MemoryError()
        chunks = queue_message(tr, &self.msg, self.iov, n)
        sqe = self.loop.sqe_for(self)
        self.held = chunks
        ul_prep_sendmsg(sqe, tr.fd, &self.msg, MSG_NOSIGNAL)
        return 0

    cdef int complete(self, int32_t res, uint32_t flags) except -1:
        """Dispatched without a context (a lent StreamSend's is None):
        only a result that may reach the protocol or schedule a callback
        enters the transport's, as its other completions run -- entering
        and leaving it would be paid by every small echo."""
        cdef StreamTransport tr = self.transport
        cdef bint entered
        self.held = None
        if not send_calls_out(tr, res):
            return send_completed(tr, res, False)
        entered = enter_context(tr.context)
        try:
            return send_completed(tr, res, False)
        finally:
            if entered:
                PyContext_Exit(tr.context)

    cdef int release(self) except -1:
        self.held = None
        return 0

    def __dealloc__(self):
        PyMem_Free(self.iov)


# ---- the write queue: a ChunkQueue of chunks and the StreamSend that sends from
# it, lent by the loop together while a transport has something to send

cdef Py_ssize_t queue_batch(StreamTransport tr, Py_ssize_t n):
    """How many of the n queued chunks one SENDMSG takes: up to MAX_IOV,
    and no more than SEND_BATCH_BYTES once the first is in."""
    cdef Py_ssize_t i = 1, total = chunk_len(queue_at(tr.write_queue, 0)) - tr.head_offset
    if n > MAX_IOV:
        n = MAX_IOV
    while i < n and total < SEND_BATCH_BYTES:
        total += chunk_len(queue_at(tr.write_queue, i))
        i += 1
    return i


cdef list queue_message(StreamTransport tr, msghdr *msg, iovec *iov, Py_ssize_t n):
    """Point msg at the first n queued chunks (iov has room for n),
    the head from head_offset on; return the chunks, for the request
    to hold while the kernel reads them."""
    cdef Py_ssize_t i
    cdef list chunks = []
    for i in range(n):
        chunk = queue_at(tr.write_queue, i)
        chunks.append(chunk)
        iov[i].iov_base = chunk_ptr(chunk)
        iov[i].iov_len = chunk_len(chunk)
    iov[0].iov_base = <char *>iov[0].iov_base + tr.head_offset
    iov[0].iov_len -= tr.head_offset
    msg.msg_name = NULL
    msg.msg_namelen = 0
    msg.msg_iov = iov
    msg.msg_iovlen = n
    msg.msg_control = NULL
    msg.msg_controllen = 0
    msg.msg_flags = 0
    return chunks


cdef inline int sent_from_queue(StreamTransport tr, Py_ssize_t n) except -1:
    """n bytes from the head of the write queue have left: drop the
    chunks sent whole (a zero-copy one is told so), advance into the
    next."""
    tr.write_buffer_size -= n
    while n > 0:
        chunk = queue_at(tr.write_queue, 0)
        if n >= chunk_len(chunk) - tr.head_offset:
            n -= chunk_len(chunk) - tr.head_offset
            tr.head_offset = 0
            tr.write_queue.popleft()
            if type(chunk) is ZeroCopyFuture:
                (<ZeroCopyFuture>chunk).sent = True
                (<ZeroCopyFuture>chunk).finish_if_released()
            else:
                # nobody else holds it: the next read's (read_bytes.h)
                ul_bytes_sent(&tr.loop.spare_bytes, chunk)
        else:
            tr.head_offset += n
            n = 0
    return 0


cdef object send_owed_now(StreamTransport tr):
    """close(), abort() or a fatal error before the loop's next enter,
    with writes whose request is not yet written (schedule_send): the
    selector loop sent them inside write(), so they leave now with
    send(2), as far as the socket takes them, and leave the queue;
    the rest stays queued (close() sends it, abort() drops it, as
    there: aiohttp writes a response and aborts).  Plain chunks only,
    in order: a zero-copy chunk stops it.  Returns the error send(2)
    gave (the peer reset the connection), or None."""
    cdef Py_ssize_t left, sent
    tr.presumed_sent = 0        # (what the socket does not take is buffered)
    while queue_len(tr.write_queue):
        chunk = queue_at(tr.write_queue, 0)
        if type(chunk) is not bytes:
            break
        left = len(<bytes>chunk) - tr.head_offset
        sent = ul_send_now(tr.fd, PyBytes_AS_STRING(chunk) + tr.head_offset, left)
        if sent < 0:
            if sent != -EAGAIN:
                return convert_error(<int>sent)
            break
        tr.plain_bytes += sent
        sent_from_queue(tr, sent)
        if sent != left:
            break
    if not queue_len(tr.write_queue):
        # nothing left for the owed request: flush_sends() skips it
        tr.set_send_state(SEND_IDLE)
        return_sender(tr)
    return None


cdef inline bint send_calls_out(StreamTransport tr, int32_t res) noexcept:
    """A send's completion may call the protocol (resume_writing(), a
    fatal error's connection_lost()) or schedule a callback in the current
    context (close()'s connection_lost(), write_eof()'s shutdown after
    it): all of them follow an error or one of these states, which only a
    protocol's or the user's call sets.  Otherwise it just drops what was
    sent and writes the next send.  (A ZeroCopyFuture sent by a SENDMSG
    schedules its callbacks in the contexts they were added in.)"""
    return (res < 0 or tr.conn_lost or tr.protocol_paused or tr.closing
            or tr.write_end == WRITE_EOF_OWED or tr.empty_waiter is not None)


cdef inline int lend_sender(StreamTransport tr) except -1:
    """Borrow a StreamSend and its (empty) queue from the loop (its
    idle ones are a linked list: see DatagramTransport.take_send_op)."""
    cdef StreamSend op = <StreamSend>tr.loop.spare_sends
    if op is not None:
        tr.loop.spare_sends = op.next_spare
        tr.loop.spare_send_count -= 1
        op.next_spare = None
    else:
        op = StreamSend.__new__(StreamSend)
        op.sends = True
        op.loop = tr.loop
        op.queue = ChunkQueue.__new__(ChunkQueue)
    op.transport = tr           # (op.context stays None: StreamSend.complete)
    tr.send_op = op
    tr.write_queue = op.queue
    return 0


cdef inline int return_sender(StreamTransport tr) except -1:
    """Return the StreamSend once nothing is queued or in flight."""
    cdef StreamSend op = tr.send_op
    if op is None or tr.send_state != SEND_IDLE or op.life != OP_IDLE or queue_len(tr.write_queue):
        return 0
    tr.send_op = None
    tr.write_queue = None
    if op.queue.mask >= QUEUE_KEPT_SIZE:
        op.queue.clear()            # (empty: its grown ring goes)
    op.transport = None             # (op.held is None: none in flight, arm())
    if tr.loop.spare_send_count < SEND_POOL_MAX:
        op.next_spare = <StreamSend>tr.loop.spare_sends
        tr.loop.spare_sends = op
        tr.loop.spare_send_count += 1
    return 0


# ---- the send state's moves ----------------------------------------------

cdef int schedule_send(StreamTransport tr) except -1:
    """The first chunk queued on an idle transport: its request is
    written before the loop's next io_uring_enter (loop.flush_sends),
    so every chunk queued until then leaves with it in one SENDMSG."""
    tr.set_send_state(SEND_OWED)
    tr.loop.send_flushes.append(tr)
    return 0


cdef int submit_send(StreamTransport tr) except -1:
    """Write the request for the head of the queue: a SEND_ZC or
    SENDMSG_ZC where the zero-copy policy wants one, else the lent
    StreamSend's SEND or SENDMSG."""
    head = queue_at(tr.write_queue, 0)
    if tr.zc_maybe:
        if tr.zc.wants(head, chunk_len(head) - tr.head_offset, tr.plain_bytes):
            return submit_send_zc(tr, head)
        zc_policy_changed(tr)     # (turned off meanwhile?)
    tr.set_send_state(SEND_SENDING)
    tr.send_op.arm()
    tr.send_request = tr.send_op
    return tr.op_started()


cdef int send_completed(StreamTransport tr, int32_t res, bint zerocopy) except -1:
    tr.send_request = None
    try:
        return send_result(tr, res, zerocopy)
    finally:
        return_sender(tr)


cdef int send_result(StreamTransport tr, int32_t res, bint zerocopy) except -1:
    tr.op_finished()
    # the submit's answer is in: what it did not send is buffered
    tr.presumed_sent = 0
    if tr.conn_lost and not queue_len(tr.write_queue):
        return tr.set_send_state(SEND_IDLE)     # aborted: the queue was dropped
    if res < 0:
        if res == -EAGAIN:
            submit_send(tr)
            return tr.maybe_pause_protocol()
        tr.set_send_state(SEND_IDLE)
        if res != -ECANCELED:
            tr.fatal_error(convert_error(res), 'Fatal write error on socket transport')
        return 0
    if not zerocopy:
        tr.plain_sends += 1
        tr.plain_bytes += res
    sent_from_queue(tr, res)
    if queue_len(tr.write_queue):
        submit_send(tr)
        tr.maybe_pause_protocol()     # (the socket refused presumed bytes)
        tr.maybe_resume_protocol()
        return 0
    tr.set_send_state(SEND_IDLE)
    tr.maybe_resume_protocol()
    if queue_len(tr.write_queue):
        # resume_writing() wrote again (the stdlib's _write_ready: "may
        # append to buffer"); its send is owed.  A closing transport
        # sends that too before it goes: SSLProtocol writes the records
        # it held while paused, close_notify last, after close().
        return 0
    if tr.empty_waiter is not None:
        if not tr.empty_waiter.done():
            tr.empty_waiter.set_result(None)
    if tr.closing:
        if not tr.conn_lost:
            tr.conn_lost += 1
            tr.loop.soon(call_connection_lost, (tr, None), handle_context(tr))
    else:
        shut_down_if_owed(tr)
    return 0


# ---- the write end's moves (stream.pxd, WRITE_*) ---------------------------

# the moves set_write_end() allows: for each end, a bit per end it may go to
cdef int[3] WRITE_END_MOVES
WRITE_END_MOVES[WRITE_OPEN] = 1 << WRITE_EOF_OWED
WRITE_END_MOVES[WRITE_EOF_OWED] = 1 << WRITE_SHUT_DOWN
WRITE_END_MOVES[WRITE_SHUT_DOWN] = 0


cdef int set_write_end(StreamTransport tr, int end) except -1:
    """The one place the write end changes; the debug build stops the
    process on a move WRITE_END_MOVES does not have."""
    check_move(WRITE_END_MOVES[tr.write_end], end,
               b'uringloop: a stream transport moved between write '
               b'ends its table does not join')
    tr.write_end = end
    return 0


cdef int shut_down_if_owed(StreamTransport tr) except -1:
    """write_eof()'s shutdown, once nothing is left to send."""
    if tr.write_end == WRITE_EOF_OWED:
        set_write_end(tr, WRITE_SHUT_DOWN)
        tr.sock.shutdown(socket.SHUT_WR)
    return 0
