# The read modes of a StreamTransport: each a reader, which is the Operation
# of the one request it keeps in flight.  Included by core.pyx after
# stream.pyx; declarations in stream.pxd.
#
# A reader knows how to arm its request (arm(): 1 when it wrote one), how
# to stop it (stop(): a cancel, whose final completion still comes), and
# what its completions mean for the transport (complete()).  It tells the
# transport what arrived -- received(), received_in_buffer(),
# received_eof(), read_failed() -- and, at its final completion, always
# from a `finally`, reader_done(), which arms the request again in the mode
# that is due.  Whether to arm, deliver or keep is the transport's read
# state (READ_*), decided in one place (stream.pyx); which request to arm
# is the reader's.  A mode changes only through switch_reader(), and only
# once the old reader's request has ended: two receives in flight on one
# socket could take its bytes out of order.  (zc_off() below is
# the exception: a zcrx queue that goes away closes the ring its RECV_ZC
# was on, which ends it without a completion.)
#
#   RingReader      multishot RECV, buffers picked by the kernel from the
#                   loop's provided-buffer ring, each read copied into bytes
#   DirectReader    multishot POLL for readability, then recv(2) into a
#                   fresh bytes object: the kernel's copy is the only one
#   BufferedReader  single-shot RECV into the memory a BufferedProtocol's
#                   get_buffer() returned
#   ZeroCopyReader  multishot RECV_ZC on a zcrx queue's own ring (zcrx.pyx),
#                   pieces of its area handed over without a copy
#
# When each is used and why: the top of stream.pyx.


cdef StreamReader new_reader(type kind, StreamTransport tr):
    cdef StreamReader reader = kind.__new__(kind)
    reader.loop = tr.loop
    reader.transport = tr
    reader.context = tr.context
    if kind is RingReader:
        reader.mode = READS_RING
    elif kind is DirectReader:
        reader.mode = READS_DIRECT
        reader.stops_at_pause = True        # the data waits in the socket
        (<DirectReader>reader).read_size = DIRECT_READ_SIZE
        reader.gather_score = GATHER_START
    elif kind is BufferedReader:
        reader.mode = READS_BUFFERED
        reader.stops_at_pause = True        # it writes into the protocol's memory
        reader.gather_score = GATHER_START
    else:
        reader.mode = READS_ZEROCOPY
        reader.stops_at_pause = True        # its pieces take room in the shared area
        (<ZeroCopyReader>reader).zcrx = tr.zcrx
    return reader


cdef inline Py_ssize_t gather_want(StreamReader reader, Py_ssize_t want) noexcept:
    """The size up to which a read short of `want` (reader.recent: what
    the reads before it brought) is made up by recv(2)s straight after
    it: `want` while the reader's score says that brings more, else 0 --
    but `want` once in GATHER_PROBE short reads (stream.pyx, GATHER_*)."""
    if reader.gather_score or reader.gather_idle >= GATHER_PROBE:
        return want
    return 0


cdef inline void gathered(StreamReader reader, Py_ssize_t asked, Py_ssize_t first,
                          Py_ssize_t got) noexcept:
    """Account for a read: its first recv(2) brought `first` bytes, and
    with those after it (if `asked`) `got` in all."""
    cdef Py_ssize_t want = reader.recent
    reader.recent = max(got, want - (want >> 3))
    if first >= want:
        return                      # not short
    if not asked:
        if reader.gather_idle < GATHER_PROBE:
            reader.gather_idle += 1
        return
    reader.gather_idle = 0
    if got > first:
        reader.gather_score = min(reader.gather_score + 2, GATHER_MAX)
    elif reader.gather_score:
        reader.gather_score -= 1


cdef class StreamReader(Operation):

    cdef object owner(self):
        return self.transport

    cdef int arm(self) except -1:
        return 0

    cdef int stop(self) except -1:
        return self.loop.cancel_op(self)


@cython.final
cdef class RingReader(StreamReader):

    cdef int arm(self) except -1:
        self.loop.ensure_recv_buffers()
        ul_prep_recv_multishot(self.loop.sqe_for(self), self.transport.fd,
                               RECV_BUFFER_GROUP, 0)
        return 1

    cdef int complete(self, int32_t res, uint32_t flags) except -1:
        cdef StreamTransport tr = self.transport
        cdef unsigned bid
        cdef Py_ssize_t room = 0
        data = None
        try:
            if flags & IORING_CQE_F_BUFFER:
                bid = ul_cqe_buffer_id(flags)
                if res > 0:
                    data = ul_bytes_from_buf_ring(&self.loop.spare_bytes,
                                                  &self.loop.recv_buffers, bid, res, &room)
                    if room < 0:
                        # out of memory: the bytes are gone from the socket
                        return tr.read_error(data)
                else:
                    ul_buf_ring_recycle(&self.loop.recv_buffers, bid)
            if res > 0:
                tr.received(data, res)
                # the protocol did not keep it: the next read's (read_bytes.h)
                ul_bytes_done(&self.loop.spare_bytes, data, room)
                if (res >= DIRECT_FROM and tr.reader is self and tr.next_reader is None
                        and tr.read_state != READ_CLOSED):
                    # large reads: recv(2) into bytes from now on (stream.pyx)
                    tr.direct_switches += 1
                    tr.switch_reader(new_reader(DirectReader, tr))
            elif res == 0:
                tr.received_eof()
            elif res != -ECANCELED and res != -ENOBUFS:
                # (cancelled: stopped or switched; no buffer: the ring ran
                # dry, and the request is simply armed again)
                tr.read_failed(res)
        finally:
            if not (flags & IORING_CQE_F_MORE):
                tr.reader_done()
        return 0


@cython.final
cdef class DirectReader(StreamReader):
    """A multishot POLL for readability, armed once while reads are direct
    (a single-shot POLL armed again after each report cost a request, its
    SQE and its arming in the kernel per message).  It reports wakeups, not
    levels (docs/design.md, fact 6): each completion is for a wakeup after
    the events it carries were taken, and read_now() empties the socket.
    What a report would not bring back is taken care of there: the peer's
    FIN, which came before the report, is read past a short read; and
    where reading stops with data possibly left (the per-wakeup limit,
    reading paused, kept data waiting) the request is stopped -- its end
    arms it again when reading is on, and a POLL checks readiness when
    armed.  (Once, with a multishot POLL and no such rule, a 16 MiB echo in
    test_stream_echo_is_byte_exact hung on a FIN that came while the data
    before it was read.)"""

    cdef int arm(self) except -1:
        ul_prep_poll_multishot(self.loop.sqe_for(self), self.transport.fd,
                               POLLIN | UL_POLLRDHUP)
        return 1

    cdef int complete(self, int32_t res, uint32_t flags) except -1:
        cdef StreamTransport tr = self.transport
        try:
            if res > 0:
                self.read_now(<unsigned>res)
            elif res != -ECANCELED:
                tr.read_failed(res)
        except MemoryError as exc:
            # a read's bytes object could not be made (its bytes may be out
            # of the socket already), or the loop's bookkeeping after it
            self.stop()
            tr.read_error(exc)
        except BaseException:
            # a protocol callback raised out of the loop (KeyboardInterrupt,
            # SystemExit): what is left in the socket would wait for a
            # wakeup; the request ends, and its end arms it again
            self.stop()
            raise
        finally:
            if not (flags & IORING_CQE_F_MORE):
                tr.reader_done()
        return 0

    cdef int read_now(self, unsigned events) except -1:
        """Read what the socket holds: each recv(2) into its own bytes
        object (made up by more recv(2)s when short of the recent reads,
        gather_want()), handed over as it is, until a short read (the
        socket is empty, and what comes next is another wakeup) -- or,
        when `events` has the peer's FIN or an error, until the recv(2)
        that reports it.
        At most DIRECT_READS_PER_WAKEUP full reads: then the request is
        stopped and armed again, and its report of the rest comes after
        the other connections' turn.

        Each read's bytes object is made the size of the largest recent
        read and a little more (DIRECT_READ_SLACK), coming down from
        DIRECT_READ_SIZE by an eighth a read at most: shrinking a 256 KiB
        block to what came split it in malloc each time (the split, the
        free of the rest and its sorting were a tenth of a 10 KiB echo's
        user CPU), and messages of one connection are mostly alike.  A
        read that fills it is followed by reads of DIRECT_READ_SIZE, and
        they come down again."""
        cdef StreamTransport tr = self.transport
        cdef Py_ssize_t n = 0, size, asked, first, after, room
        cdef bint to_the_end = (events & (UL_POLLRDHUP | POLLHUP | POLLERR)) != 0
        cdef int i
        for i in range(DIRECT_READS_PER_WAKEUP):
            if tr.reader is not self or tr.next_reader is not None:
                return 0            # switched: its stop is under way
            if tr.read_state != READ_ON:
                return self.stop()  # paused, ended or closed meanwhile
            size = self.read_size
            # a read short of the recent ones is made up from what came
            # since, if that was worth it lately (gather_want)
            asked = gather_want(self, self.recent)
            data = ul_recv_stream(tr.fd, &self.loop.spare_bytes, size, asked,
                                  &n, &first, &after, &room)
            if n > 0:
                gathered(self, asked, first, n)
                if n < DIRECT_SMALL:
                    self.small_reads += 1
                    if self.small_reads >= DIRECT_BACK_AFTER:
                        # small reads again: back to the ring's buffers
                        tr.switch_reader(new_reader(RingReader, tr))
                else:
                    self.small_reads = 0
                tr.direct_bytes += n
                if n < size:
                    # down to the largest of the recent reads, an eighth a
                    # read at most
                    self.read_size = max(min(n + DIRECT_READ_SLACK, DIRECT_READ_SIZE),
                                         size - (size >> 3))
                else:
                    self.read_size = DIRECT_READ_SIZE
                try:
                    tr.received(data, n)
                    # the protocol did not keep it: the next read's
                    # (read_bytes.h); dropped here, as the next read may
                    # resize it
                    ul_bytes_done(&self.loop.spare_bytes, data, room)
                    data = None
                finally:
                    if after < 0:
                        # met making up the read: the kernel reports it once
                        tr.read_failed(<int32_t>after)
                if after < 0:
                    return self.stop()
                if after == 0:
                    to_the_end = True   # the next recv(2) reports the end
                if n < size and not to_the_end:
                    return 0        # the socket is empty for now
            elif n == 0:
                tr.received_eof()
                return self.stop()
            elif n == -EAGAIN:
                return 0
            else:
                tr.read_failed(<int32_t>n)
                return self.stop()
        return self.stop()


@cython.final
cdef class BufferedReader(StreamReader):
    """Single-shot RECV straight into the buffer the protocol's get_buffer()
    returned (its Py_buffer is allocated only then: most protocols never
    are BufferedProtocols)."""

    cdef int arm(self) except -1:
        cdef StreamTransport tr = self.transport
        cdef object protocol = tr.protocol
        # (the method kept as data_received is: read_method_status())
        cdef int kept = method_kept(&tr.get_buffer_check, protocol, 'get_buffer')
        if kept < 0:
            tr.get_buffer_method = look_up_method(&tr.get_buffer_check, protocol, 'get_buffer')
            kept = method_kept(&tr.get_buffer_check, protocol, 'get_buffer')
        try:
            if kept > 0:
                method = tr.get_buffer_method
                self.hold(ul_mc_call2(method, protocol, -1))
            else:
                self.hold(protocol.get_buffer(-1))
            self.view_protocol = tr.protocol
            if self.view.len == 0:
                raise RuntimeError('get_buffer() returned an empty buffer')
        except (SystemExit, KeyboardInterrupt):
            # it leaves the loop; run again, the loop asks get_buffer()
            # again, as the selector loop's reader, still registered, does
            self.release()
            tr.loop.call_soon(tr._start_reading_cb)
            raise
        except BaseException as exc:
            self.release()
            tr.fatal_error(exc, 'Fatal error: protocol.get_buffer() call failed.')
            return 0
        ul_prep_recv(self.loop.sqe_for(self), tr.fd, self.view.buf, <size_t>self.view.len, 0)
        return 1

    cdef int complete(self, int32_t res, uint32_t flags) except -1:
        cdef StreamTransport tr = self.transport
        cdef Py_ssize_t got = res, asked, after = 1
        try:
            if res > 0:
                if self.view_protocol is tr.protocol and tr.read_state == READ_ON:
                    # short of the recent completions: made up from what
                    # came since, if that was worth it lately (gather_want)
                    asked = gather_want(self, self.recent)
                    if got < asked:
                        got = ul_recv_more(tr.fd, <char *>self.view.buf, got,
                                           self.view.len, asked, &after)
                    gathered(self, asked, res, got)
                    try:
                        tr.received_in_buffer(got)
                    finally:
                        if after < 0:
                            # met making up the read: the kernel reports
                            # it once (an end is seen again by the next RECV)
                            tr.read_failed(<int32_t>after)
                else:
                    # the protocol was replaced meanwhile (start_tls): the
                    # data belongs to the new one; or reading was paused
                    # before the cancel reached the kernel: the data is kept
                    # for resume_reading() (no buffer_updated() while paused)
                    try:
                        data = PyBytes_FromStringAndSize(<char *>self.view.buf, res)
                    except MemoryError as exc:
                        tr.read_error(exc)      # its bytes are out of the socket
                    else:
                        tr.received(data, res)
            elif res == 0:
                tr.received_eof()
            elif res != -ECANCELED:
                tr.read_failed(res)
        finally:
            self.view_protocol = None
            self.release()
            tr.reader_done()
        return 0

    cdef int hold(self, object buf) except -1:
        cdef Py_buffer *view = <Py_buffer *>PyMem_Malloc(sizeof(Py_buffer))
        if view == NULL:
            raise MemoryError()
        try:
            hold_view(buf, view, PyBUF_WRITABLE)
        except BaseException:
            PyMem_Free(view)
            raise
        self.view = view
        return 0

    cdef int release(self) except -1:
        cdef Py_buffer *view = self.view
        if view != NULL:
            self.view = NULL
            drop_view(view)
            PyMem_Free(view)
        return 0

    def __dealloc__(self):
        self.release()


@cython.final
cdef class ZeroCopyReader(StreamReader):
    """Multishot RECV_ZC on its queue's ring (zcrx.pyx), tagged with this
    object as on the loop's ring; the queue reaps that ring and hands each
    completion to RingLoop.dispatch(), after setting cqe_off."""

    cdef int arm(self) except -1:
        if self.starved:
            return 0                # until room_again()
        if not self.zcrx.arm(self):
            # the queue closed (or its loop did) meanwhile: ordinary reads
            zc_off(self.transport, True)
            return 0
        return 1

    cdef int stop(self) except -1:
        return self.zcrx.disarm(self)

    cdef int room_again(self) except -1:
        self.starved = False
        if self.transport is None:
            return 0                # its connection was lost meanwhile
        return self.transport.start_reading()

    cdef int complete(self, int32_t res, uint32_t flags) except -1:
        cdef StreamTransport tr = self.transport
        cdef ZeroCopyReceive zcrx = self.zcrx
        cdef ZeroCopyPiece piece
        cdef bint final = (flags & IORING_CQE_F_MORE) == 0
        try:
            if res > 0:
                piece = zcrx.new_piece(self.cqe_off, res)
                tr.zc_received_bytes += res
                if (zcrx.past_high_water() and not self.starved
                        and tr.read_state != READ_CLOSED):
                    # the area fills: stop until it has room again (zcrx.give)
                    self.starved = True
                    zcrx.starved.append(self)
                    self.stop()
                tr.received(piece, res)
            elif res == 0:
                tr.received_eof()
            elif (final and (res == -EINVAL or res == -EOPNOTSUPP)
                    and tr.zc_received_bytes == 0):
                # the kernel refused RECV_ZC for this socket before it
                # consumed a byte: ordinary reads from now on
                zcrx.refused(res)
                tr.switch_reader(new_reader(RingReader, tr))
            elif res != -ECANCELED and res != -ENOSPC and res != -ENOBUFS:
                # (no space: the CQ overflowed; armed again, as after a dry
                # buffer ring)
                tr.read_failed(res)
        finally:
            if final:
                zcrx.readers.discard(self)
                tr.reader_done()
        return 0


cdef int deliver_piece(StreamTransport tr, ZeroCopyPiece piece) except -1:
    """A piece of a zcrx area to the protocol: zerocopy_received(piece), or
    data_received() with its bytes where the protocol has no such method."""
    receiver = getattr(tr.protocol, 'zerocopy_received', None)
    if receiver is None:
        data = piece.tobytes()          # one copy; the piece goes back now
        piece.delivered_now()
        return tr.deliver(data)
    try:
        receiver(piece)
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as exc:
        tr.fatal_error(exc, 'Fatal error: protocol.zerocopy_received() call failed.')
    finally:
        piece.delivered_now()
    return 0


cdef int zc_off(StreamTransport tr, bint rearm) except -1:
    """The zero-copy receive queue is gone (closed, or its loop closed):
    its ring is closed, so the RECV_ZC is over without a completion;
    with rearm, ordinary reads from now on."""
    cdef StreamReader reader = tr.reader
    if reader.mode != READS_ZEROCOPY:
        return 0
    if reader.life != OP_IDLE:
        tr.loop.forget(reader)
        tr.op_finished()
    tr.reader = new_reader(RingReader, tr)
    tr.next_reader = None
    if rearm:
        tr.start_reading()
    return 0
