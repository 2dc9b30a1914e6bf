# StreamTransport: TCP and Unix stream sockets on io_uring.
#
# The transport is two state machines: a read state and a send state
# (stream.pxd, READ_* and SEND_*), each changed in one method that checks
# the move against its table below (READ_MOVES, SEND_MOVES); docs/design.md
# has the tables with what makes each move.  The read state says what
# happens to what arrives (delivered, kept, dropped); the reader -- the
# read mode, an Operation of its own (stream_readers.pyx) -- says which
# request brings it.  Why each mode:
#
# Reading: one multishot RECV per transport, its buffers picked by the kernel
# from the loop's provided-buffer ring; each completion is copied into a
# bytes object for data_received() and the buffer goes straight back to the
# ring.  That copy is cheap for small reads and costs what the data weighs
# for large ones, so a connection whose reads are large (a completion of
# DIRECT_FROM bytes or more) switches to direct reads: a multishot POLL
# reports readiness and each read is a recv(2) into a fresh bytes object,
# which data_received() gets as it is -- the kernel's copy is the only one,
# no buffer is parked while the connection idles, and what is not read stays
# in the socket (TCP throttles the peer).  DIRECT_BACK_AFTER small reads in
# a row switch it back.  1 and 4 KiB reads stay on the ring, where a POLL
# and a recv(2) per read cost more than the copy; from 8 KiB the copy
# costs more (docs/benchmarks.md, "Figures behind the code's constants").
# The bytes objects of both modes come from the loop's spares where one
# fits: blocks of reads and written chunks nobody refers to any more
# (read_bytes.h), instead of a malloc() and a free() per read.
# Incremental buffer consumption (IOU_PBUF_RING_INC, 6.12) was tried for
# the ring and not kept: it packs reads of all connections into one buffer,
# but splits a read where a buffer ends, and each split is one more
# data_received() and, for an echo, one more send; nor were smaller
# buffers (docs/benchmarks.md, "Behind the comments").
# A BufferedProtocol instead gets a single-shot RECV straight into the
# memory its get_buffer() returned.  While reading is paused, what arrives is
# kept and handed over on resume; past PAUSED_BYTES_LIMIT the request is
# cancelled, so the peer is throttled by TCP as with a selector loop.
#
# A connection accepted by a server with zero-copy receive (zcrx.pyx)
# receives with a multishot RECV_ZC on that queue's ring instead (its
# ZeroCopyReader): pieces of the area are handed over as received() data;
# the queue stops and restarts the reader for area pressure, and ends the
# mode (zc_off) when it closes.
#
# Writing: at most one send request in flight per socket -- two sends in
# flight on one TCP socket may be executed out of order.  write() queues the
# data (bytes are kept by reference, mutable buffers are copied because the
# caller may reuse them at once).  The request for the first chunk on an
# idle transport is written just before the loop's next io_uring_enter
# (schedule_send, loop.flush_sends), so what else is written in the same
# iteration leaves with it: two write()s in one callback are one SENDMSG,
# not a SEND and, one enter later, another (issue #16).  When a send
# completes, everything queued meanwhile leaves in one SENDMSG with an
# iovec per chunk.  This is the seam
# where the zero-copy policy plugs in (submit_send picks the opcode).
# A large write (DIRECT_SEND_FROM bytes or more) with nothing queued and no
# zero-copy in view is sent with send(2) inside write(), as the selector
# loop does; only what the socket does not take is queued for the ring.
# For large writes the request, its completion and the queue cost more than
# the system call; small writes gain more from leaving together, many per
# io_uring_enter (docs/benchmarks.md, "Figures behind the code's
# constants", and "Watched by perf" for small writes sent inside write()).
# The send request (StreamSend; its 1 KiB iovec array is allocated at its
# first SENDMSG) and the write queue (a ChunkQueue: 0.2 KiB) are the loop's, lent
# to a transport from the first write() until its queue is empty and no
# send is in flight: an idle connection holds neither (bench/memory.py).

cdef Py_ssize_t DEFAULT_HIGH_WATER = 64 * 1024
cdef int MAX_IOV = 64
cdef Py_ssize_t SEND_POOL_MAX = 256   # idle StreamSends a loop keeps
cdef unsigned short RECV_BUFFER_GROUP = 1
cdef unsigned RECV_BUFFER_COUNT = 64
cdef unsigned RECV_BUFFER_SIZE = 256 * 1024
# Received while reading is paused, kept before the RECV is cancelled.
cdef Py_ssize_t PAUSED_BYTES_LIMIT = 256 * 1024
# struct linger {l_onoff = 1, l_linger = 0}: close() resets the connection
LINGER_RESET = struct.pack('ii', 1, 0)


# Direct reads (see above): the size of each recv(2), as the stdlib's
# max_size; a ring completion this large or larger moves a connection to
# them; this many reads below DIRECT_SMALL in a row move it back; at most
# this many full reads per readiness report.
cdef Py_ssize_t DIRECT_READ_SIZE = 256 * 1024
# ... and the room a read leaves past the last short one (read_now): less
# than malloc's smallest block, so that no shrink splits one
cdef Py_ssize_t DIRECT_READ_SLACK = 16
cdef Py_ssize_t DIRECT_FROM = 8 * 1024
cdef Py_ssize_t DIRECT_SMALL = 4 * 1024
cdef unsigned DIRECT_BACK_AFTER = 16
cdef int DIRECT_READS_PER_WAKEUP = 8
# Gathering (stream_readers.pyx, gather_want()): a direct or buffered read
# shorter than the reads before it is followed at once by another recv(2),
# the rest of the peer's write being often on its way (a large write
# reaches the socket in segments, and the wakeup comes with the first).
# Each second recv(2) that brings more adds 2 to the reader's score, each
# that finds the socket empty takes 1 off; at 0 it is tried once in
# GATHER_PROBE short reads, so a stream whose reads are short for other
# reasons pays for about one recv(2) in that many.
cdef unsigned char GATHER_START = 4
cdef unsigned char GATHER_MAX = 16
cdef unsigned char GATHER_PROBE = 64
# Direct sends (see above): write() of this many bytes or more, with
# nothing queued, tries send(2) at once.
cdef Py_ssize_t DIRECT_SEND_FROM = 8 * 1024
# Flow control of the smaller writes, which wait for the iteration's
# submit: the selector loop's write() sends at once, so a protocol there
# sees nothing buffered (and no pause_writing()) while the socket takes
# the bytes.  Those written to an idle stream (nothing in flight, nothing
# left over) are "presumed sent" up to this many in one iteration:
# get_write_buffer_size() and the high-water mark leave them out until the
# send's completion says what the socket took; what it did not is buffered
# from there, and may pause the protocol then (issue #58, item 3).
cdef Py_ssize_t PRESUMED_SENT_MAX = 64 * 1024
# One send request takes queued chunks up to this many bytes (and always
# the head chunk whole).  A bulk sender kept 1 MiB queued, and one SENDMSG
# of up to 64 chunks handed the socket megabytes at a time, which it
# accepted to its 4 MiB send buffer: the receiver then copied out bytes
# long gone from the 1 MiB L2 cache.  A limit keeps what the receiver
# copies in cache (docs/benchmarks.md, "Figures behind the code's
# constants": 128 KiB against 32, 64 and 256).
cdef Py_ssize_t SEND_BATCH_BYTES = 128 * 1024
# The stdlib's writelines() joins the items on 3.11 and makes a memoryview
# of each from 3.12 on: the TypeError of a bad item is the one it raises.
cdef bint STDLIB_JOINS_WRITELINES = sys.version_info < (3, 12)
# 3.14 on, it skips the items that are false (an empty chunk is never
# drained, gh-155888); 3.15 queues each item as it goes, so the items
# before a bad one are sent.
cdef bint STDLIB_WRITELINES_SKIPS_EMPTY = sys.version_info >= (3, 14)
cdef bint STDLIB_WRITELINES_IN_TURN = sys.version_info >= (3, 15)

def _write_type_error():
    """What the selector loop's stream write() says of a non-bytes-like
    argument, up to ', not <type>': 'a bytes-like object' before 3.14,
    'a bytes, bytearray, or memoryview object' since (its first check,
    made before it touches the transport)."""
    cls = selector_events._SelectorSocketTransport
    try:
        cls.write(cls.__new__(cls), '')
    except TypeError as exc:
        head, sep, _ = str(exc).rpartition(', not ')
        if sep:
            return head
    except Exception:
        pass
    return 'data argument must be a bytes-like object'

cdef str WRITE_TYPE_ERROR = _write_type_error()

# The moves between read states (stream.pxd) that set_read_state() allows:
# for each state, a bit per state it may go to.  docs/design.md has the
# table with what makes each move.
cdef int[6] READ_MOVES
READ_MOVES[READ_ON] = ((1 << READ_PAUSED) | (1 << READ_HANDING_OVER) | (1 << READ_ENDED)
                       | (1 << READ_CLOSED))
READ_MOVES[READ_PAUSED] = (1 << READ_ON) | (1 << READ_HANDING_OVER) | (1 << READ_CLOSED)
READ_MOVES[READ_HANDING_OVER] = ((1 << READ_ON) | (1 << READ_PAUSED) | (1 << READ_ENDED)
                                 | (1 << READ_CLOSED))
READ_MOVES[READ_ENDED] = (1 << READ_ENDED_PAUSED) | (1 << READ_CLOSED)
READ_MOVES[READ_ENDED_PAUSED] = (1 << READ_ENDED) | (1 << READ_CLOSED)
READ_MOVES[READ_CLOSED] = 0
# ... and between send states (set_send_state()).  A send is written from
# OWED (the first since the last enter) or from the completion of the one
# before (SENDING or ZEROCOPY), never from IDLE.
cdef int[4] SEND_MOVES
SEND_MOVES[SEND_IDLE] = 1 << SEND_OWED
SEND_MOVES[SEND_OWED] = (1 << SEND_IDLE) | (1 << SEND_SENDING) | (1 << SEND_ZEROCOPY)
SEND_MOVES[SEND_SENDING] = (1 << SEND_IDLE) | (1 << SEND_SENDING) | (1 << SEND_ZEROCOPY)
SEND_MOVES[SEND_ZEROCOPY] = (1 << SEND_IDLE) | (1 << SEND_SENDING) | (1 << SEND_ZEROCOPY)

# (looked up once: take_protocol() runs for every connection)
cdef object BUFFERED_PROTOCOL = protocols.BufferedProtocol

# get_extra_info('reading')['mode'], by StreamReader.mode
READ_MODE_NAMES = ('ring', 'direct', 'buffered', 'zerocopy')


cdef class _KeptEof:
    def __repr__(self):
        return '<end of stream>'

# kept (StreamTransport.kept) behind the data before it when the peer's FIN
# arrives while reading is paused
KEPT_EOF = _KeptEof()


cdef class StreamTransport(BaseTransport):

    max_size = 256 * 1024       # as the stdlib's transports (read size)

    _start_tls_compatible = True
    _sendfile_compatible = constants._SendfileMode.TRY_NATIVE

    @property
    def __class__(self):
        return AsyncioStreamTransport

    # -- reading ------------------------------------------------------------
    # The read state (stream.pxd, READ_*) says what happens to what the
    # reader's completions bring: delivered (READ_ON), kept for
    # resume_reading() (READ_PAUSED) or behind what was kept before
    # (READ_HANDING_OVER), or dropped (READ_CLOSED).  The reader says which
    # request is armed.

    @cython.final
    cdef int set_read_state(self, int state) except -1:
        """The one place the read state changes; the debug build stops the
        process on a move its table (READ_MOVES) does not have."""
        check_move(READ_MOVES[self.read_state], state,
                   b'uringloop: a stream transport moved between read '
                   b'states its table does not join')
        self.read_state = state
        return 0

    @cython.final
    cdef int start_reading(self) except -1:
        """Arm the reader's request, when reading is on (nothing kept waits:
        READ_ON) and none is in flight; first take up a mode switched to."""
        cdef StreamReader reader = self.reader
        if reader.life != OP_IDLE:
            return 0
        if self.next_reader is not None:
            reader = self.reader = self.next_reader
            self.next_reader = None
        if self.read_state != READ_ON:
            return 0
        if reader.arm():
            self.op_started()
        return 0

    cdef int stop_reading(self) except -1:
        return self.reader.stop()

    cdef int release_ops(self) except -1:
        """(BaseTransport.release_ops) The transport and its reader hold
        each other: without this every connection was a reference cycle,
        freed only by the garbage collector (a fifth of the server's user
        CPU in bench/run_connect.py).  With no request in flight and
        READ_CLOSED, start_reading() arms nothing again, and a reader
        without a transport does nothing when woken (room_again())."""
        self.reader.transport = None
        if self.next_reader is not None:
            self.next_reader.transport = None
        return 0

    cdef int switch_reader(self, StreamReader reader) except -1:
        """The one place the read mode changes: `reader` takes over once
        the current reader's request has ended (its final completion calls
        reader_done()); stopped now if it is in flight."""
        self.next_reader = reader
        if self.reader.life != OP_IDLE:
            return self.reader.stop()
        return self.start_reading()

    cdef int reader_done(self) except -1:
        """The reader's request ended (its final completion; readers call
        this from a `finally`): armed again whatever a protocol callback
        raised -- a KeyboardInterrupt leaves the loop, and whoever runs it
        again reads on, as from the selector loop's reader."""
        self.op_finished()
        return self.start_reading()

    @cython.final
    cdef int received(self, object data, Py_ssize_t n) except -1:
        """n bytes (or a zero-copy piece) for the protocol: delivered now,
        or kept while reading is paused or kept data waits (order)."""
        if self.read_state == READ_CLOSED:
            if type(data) is ZeroCopyPiece:
                (<ZeroCopyPiece>data).give_back()
            return 0                # closed: the selector loop reads no more
        if type(data) is not ZeroCopyPiece:
            self.bytes_received += n
        if self.read_state == READ_PAUSED or self.read_state == READ_HANDING_OVER:
            self.keep(data, n)
            if (self.read_state == READ_PAUSED and self.kept_bytes >= PAUSED_BYTES_LIMIT
                    and self.reader.life != OP_IDLE):
                # kept while the multishot RECV stayed armed (pause_reading):
                # enough, the peer is throttled by TCP from here on
                self.reader.stop()
            return 0
        return self.deliver(data)

    cdef int received_in_buffer(self, Py_ssize_t n) except -1:
        """n bytes already in the BufferedProtocol's buffer (reading on)."""
        self.bytes_received += n
        if read_method_status(self, self.protocol, 'buffer_updated', n) != 0:
            protocol_call_failed(self, 'Fatal error: protocol.buffer_updated() call failed.')
        return 0

    cdef int received_eof(self) except -1:
        if self.read_state == READ_CLOSED:
            return 0
        if self.read_state == READ_PAUSED or self.read_state == READ_HANDING_OVER:
            return self.keep(KEPT_EOF, 0)
        return self.deliver_eof()

    cdef int read_failed(self, int32_t res) except -1:
        """A read error: the selector loop meets it when it reads next, so
        while paused (or behind kept data) it waits for resume_reading(),
        after the data before it.  (sendfile pauses reading, and its send
        must be the one that reports a peer's reset, with the transport
        still open.)"""
        return self.read_error(convert_error(res))

    cdef int read_error(self, object exc) except -1:
        """read_failed() with the exception made: also a read whose bytes
        object could not be made (MemoryError), the selector loop's
        failed recv() -- fatal, as there: its bytes may be out of the
        socket already."""
        if self.read_state == READ_CLOSED:
            return 0
        if self.read_state == READ_PAUSED or self.read_state == READ_HANDING_OVER:
            return self.keep(exc, 0)
        return self.fatal_error(exc, 'Fatal read error on socket transport')

    cdef int keep(self, object item, Py_ssize_t n) except -1:
        """Hold what arrived while paused or handing over (the list is
        made when needed: most connections never pause)."""
        if self.kept is None:
            self.kept = []
        self.kept.append(item)
        self.kept_bytes += n
        return 0

    def _deliver_kept(self):
        """After resume_reading(): hand over what was kept, oldest first,
        while reading stays on (data_received() may pause it again), then
        arm the reader.  Rescheduled if a callback raised KeyboardInterrupt
        or SystemExit: the rest is handed over when the loop runs again."""
        try:
            while self.read_state == READ_HANDING_OVER:
                item = self.kept.pop(0)
                if not self.kept:
                    # the last: reading is plainly on while it is handed over
                    self.kept = None
                    self.set_read_state(READ_ON)
                self.hand_over(item)
        except BaseException:
            # (also when that was the last item: the call again arms the
            # request)
            self.loop.call_soon(self._deliver_kept)
            raise
        self.start_reading()

    cdef int hand_over(self, object item) except -1:
        if item is KEPT_EOF:
            return self.deliver_eof()
        if isinstance(item, BaseException):
            return self.fatal_error(item, 'Fatal read error on socket transport')
        self.kept_bytes -= len(item)
        return self.deliver(item)

    @cython.final
    cdef int deliver(self, object data) except -1:
        if type(data) is ZeroCopyPiece:
            return deliver_piece(self, <ZeroCopyPiece>data)
        if self.buffered_protocol:
            return self.deliver_copied(data)
        call_data_received(self, data)
        return 0

    cdef int deliver_copied(self, object data) except -1:
        """bytes for a BufferedProtocol (kept from a pause, or received
        before the protocol was swapped): copied into its buffers.  The
        protocol is asked anew for each buffer: one that set_protocol()
        from buffer_updated() made a plain Protocol gets the rest through
        data_received().  A KeyboardInterrupt or SystemExit leaves with
        the rest kept, handed over when the loop runs again (where the
        selector loop's bytes are still in the socket)."""
        cdef Py_ssize_t n, pos = 0, size
        size = len(data)
        view = memoryview(data)
        try:
            while pos < size:
                if not self.buffered_protocol:
                    call_data_received(self, bytes(view[pos:]))
                    return 0
                buf = self.protocol.get_buffer(size - pos)
                n = min(len(buf), size - pos)
                if n == 0:
                    raise RuntimeError('get_buffer() returned an empty buffer')
                memoryview(buf).cast('B')[:n] = view[pos:pos + n]
                pos += n
                self.protocol.buffer_updated(n)
        except (SystemExit, KeyboardInterrupt):
            if pos < size and self.read_state != READ_CLOSED:
                self.keep_first(bytes(view[pos:]))
            raise
        except BaseException as exc:
            self.fatal_error(exc, 'Fatal error: protocol.data_received() call failed.')
        return 0

    cdef int keep_first(self, bytes rest) except -1:
        """rest goes before anything kept, to the protocol when the loop
        runs again (_deliver_kept)."""
        if self.kept is None:
            self.kept = []
            if self.read_state == READ_ON:
                self.set_read_state(READ_HANDING_OVER)
                self.loop.call_soon(self._deliver_kept)
        self.kept.insert(0, rest)
        self.kept_bytes += len(rest)
        return 0

    cdef int deliver_eof(self) except -1:
        self.set_read_state(READ_ENDED)
        if self.loop._debug:
            logger.debug("%r received EOF", self)
        return self.eof_to_protocol()

    cdef int eof_to_protocol(self) except -1:
        try:
            keep_open = self.protocol.eof_received()
        except (SystemExit, KeyboardInterrupt):
            # the selector loop's reader stays registered: run again, it
            # reads the end again and asks eof_received() again
            self.loop.call_soon(self._eof_again)
            raise
        except BaseException as exc:
            self.fatal_error(exc, 'Fatal error: protocol.eof_received() call failed.')
            return 0
        if not keep_open:
            self.close()
        return 0

    def _eof_again(self):
        if self.read_state == READ_ENDED:
            self.eof_to_protocol()

    def is_reading(self):
        return (self.read_state == READ_ON or self.read_state == READ_HANDING_OVER
                or self.read_state == READ_ENDED)

    def pause_reading(self):
        """Stop calling data_received until resume_reading()."""
        if self.read_state == READ_ENDED:
            self.set_read_state(READ_ENDED_PAUSED)
            return
        if self.read_state != READ_ON and self.read_state != READ_HANDING_OVER:
            return
        self.set_read_state(READ_PAUSED)
        # The ring's multishot RECV stays armed: what arrives is kept (and
        # handed over on resume) until PAUSED_BYTES_LIMIT, then it is
        # cancelled.  Pauses are mostly short (a StreamReader above its
        # limit for one read()), and a cancel plus re-arm costs two
        # requests each time.  The other readers stop now (stops_at_pause).
        if self.reader.stops_at_pause or self.kept_bytes >= PAUSED_BYTES_LIMIT:
            self.reader.stop()
        if self.loop._debug:
            logger.debug("%r pauses reading", self)

    def resume_reading(self):
        if self.read_state == READ_ENDED_PAUSED:
            self.set_read_state(READ_ENDED)
            return
        if self.read_state != READ_PAUSED:
            return
        if self.kept is not None:
            self.set_read_state(READ_HANDING_OVER)
            self.loop.call_soon(self._deliver_kept)
        else:
            self.set_read_state(READ_ON)
            self.start_reading()
        if self.loop._debug:
            logger.debug("%r resumes reading", self)

    def set_protocol(self, protocol):
        self.take_protocol(protocol)

    cdef int take_protocol(self, object protocol) except -1:
        """set_protocol(); a new transport's first protocol too
        (new_stream_transport), without a Python-level call."""
        buffered = isinstance(protocol, BUFFERED_PROTOCOL)
        if (self.reader is not None and buffered != self.buffered_protocol
                and self.reader.mode != READS_ZEROCOPY):
            # the armed request is of the other kind: it ends, and the next
            # one is armed for the new protocol (zero-copy pieces are copied
            # into a BufferedProtocol's buffers: that mode stays)
            self.switch_reader(new_reader(BufferedReader if buffered else RingReader, self))
        if protocol is not self.protocol:
            # pause_writing() was said to the old protocol; the new one
            # starts unpaused and is paused by the next write if need be
            # (start_tls swaps protocols with writes still queued).
            self.protocol_paused = False
        self.protocol = protocol
        self.protocol_connected = True
        self.buffered_protocol = buffered
        return 0

    def _start_reading_cb(self):
        self.start_reading_in_context()

    cdef int start_reading_in_context(self) except -1:
        """The first start_reading(), run in the transport's context, as
        its completions are: arming a BufferedProtocol's request calls its
        get_buffer(), and the stdlib's reads all run in a copy of the
        context the transport was made in.  (From the ReadingHandle, after
        connection_made(), it ran in whatever context the loop was run
        in: uvloop's test_context caught get_buffer() seeing another
        value of a variable the first time.)"""
        cdef bint entered = enter_context(self.context)
        try:
            self.start_reading()
        finally:
            if entered:
                PyContext_Exit(self.context)
        return 0

    # -- writing ------------------------------------------------------------

    def write(self, data):
        """Queue data to be sent; never blocks.  Raises TypeError for a
        non-bytes-like object, RuntimeError after write_eof()."""
        if type(data) is not bytes:
            if not isinstance(data, (bytes, bytearray, memoryview)):
                raise TypeError(f'{WRITE_TYPE_ERROR}, not {type(data).__name__!r}')
        if self.write_end != WRITE_OPEN:
            raise RuntimeError('Cannot call write() after write_eof()')
        if self.empty_waiter is not None:
            raise RuntimeError('unable to write; sendfile is in progress')
        if type(data) is not bytes:
            data = bytes(data)     # the caller may reuse its buffer at once
        cdef Py_ssize_t size = len(<bytes>data)
        cdef Py_ssize_t sent = 0
        if size == 0:
            return
        if self.conn_lost:
            if self.conn_lost >= constants.LOG_THRESHOLD_FOR_CONNLOST_WRITES:
                logger.warning('socket.send() raised exception.')
            self.conn_lost += 1
            return
        if (size >= DIRECT_SEND_FROM and self.send_op is None
                and not (self.zc_maybe and self.zc.may_want(size, self.plain_bytes))):
            # A large write with nothing queued: send(2) now, as the
            # selector loop does; only what the socket does not take
            # goes to the ring (see the top of this file).
            sent = ul_send_now(self.fd, PyBytes_AS_STRING(data), size)
            if sent == size:
                self.plain_sends += 1
                self.plain_bytes += sent
                self.direct_sends += 1
                return
            if sent < 0:
                if sent != -EAGAIN:
                    self.fatal_error(convert_error(<int>sent),
                                     'Fatal write error on socket transport')
                    return
                sent = 0
            else:
                self.plain_bytes += sent
        if self.send_op is None:
            lend_sender(self)
        self.send_op.queue.append(data)
        self.write_buffer_size += size - sent
        if sent:
            self.head_offset = sent         # (the queue was empty)
        elif (size < DIRECT_SEND_FROM and self.presumed_sent + size == self.write_buffer_size
                and self.write_buffer_size <= PRESUMED_SENT_MAX
                and (self.send_state == SEND_IDLE or self.send_state == SEND_OWED)):
            # idle but for earlier such writes: see flow control, above
            self.presumed_sent = self.write_buffer_size
        if self.send_state == SEND_IDLE:
            schedule_send(self)
        self.maybe_pause_protocol()

    def writelines(self, list_of_data):
        """Queue each buffer of the iterable; they leave in one SENDMSG.
        Before 3.15 all or nothing, as on the stdlib loop: an item that is
        not bytes-like raises the stdlib's TypeError before any item is
        queued; from 3.15 the items before it are queued.  Any object
        with the buffer interface is taken."""
        if not STDLIB_JOINS_WRITELINES:
            # (3.11's writelines() is write() of the joined items)
            if self.write_end != WRITE_OPEN:
                raise RuntimeError('Cannot call writelines() after write_eof()')
            if self.empty_waiter is not None:
                raise RuntimeError('unable to writelines; sendfile is in progress')
        if STDLIB_WRITELINES_IN_TURN:
            for data in list_of_data:
                if data:
                    self.write(data if isinstance(data, (bytes, bytearray, memoryview))
                               else memoryview(data))
            return
        if STDLIB_WRITELINES_SKIPS_EMPTY:
            items = [data for data in list_of_data if data]
        else:
            items = list(list_of_data)
        for i in range(len(items)):
            data = items[i]
            if not isinstance(data, (bytes, bytearray, memoryview)):
                if STDLIB_JOINS_WRITELINES:
                    b''.join(items)     # 3.11's check, and its TypeError
                items[i] = memoryview(data)     # 3.12's, and its TypeError
        for data in items:
            self.write(data)

    @cython.final
    cdef int set_send_state(self, int state) except -1:
        """The one place the send state changes; the debug build stops the
        process on a move its table (SEND_MOVES) does not have, and on a
        send written while one is in flight (two sends in flight on one
        TCP socket may be executed out of order)."""
        check_move(SEND_MOVES[self.send_state], state,
                   b'uringloop: a stream transport moved between send '
                   b'states its table does not join')
        if UL_DEBUG_BUILD:
            if ((state == SEND_SENDING or state == SEND_ZEROCOPY)
                    and self.send_request is not None):
                Py_FatalError(b'uringloop: a stream transport wrote a send while '
                              b'one was in flight')
        self.send_state = state
        return 0

    cdef int flush_sends(self) except -1:
        if self.send_state != SEND_OWED:
            return 0            # sent or dropped meanwhile (send_owed_now, stop_io)
        if queue_len(self.write_queue) and not self.conn_lost and self.loop.ring.open:
            return submit_send(self)
        self.set_send_state(SEND_IDLE)
        return return_sender(self)

    def write_zerocopy(self, buf):
        """Send buf (any C-contiguous buffer: bytes, bytearray, memoryview,
        mmap, or a RegisteredBuffer from loop.zerocopy_buffer(), whose sends
        pin no pages) without copying it, in order with write().

        Returns a ZeroCopyFuture (an asyncio.Future in all but its type)
        that resolves, once the kernel has let go of buf, to
        ZeroCopyResult(nbytes, zerocopy) -- zerocopy False when the kernel
        copied after all or zero-copy is off for this transport.  Until then
        buf stays exported (a bytearray cannot be resized); cancelling the
        future does not release it earlier.  Counts toward the write buffer
        size like write().  Raises ValueError for a non-contiguous buffer,
        TypeError for a non-buffer, RuntimeError after write_eof()."""
        cdef ZeroCopyFuture zb
        if self.write_end != WRITE_OPEN:
            raise RuntimeError('Cannot call write_zerocopy() after write_eof()')
        if self.empty_waiter is not None:
            raise RuntimeError('unable to write; sendfile is in progress')
        zb = new_zerocopy_buffer(self.loop, buf)
        if zb.view.len == 0 or self.conn_lost:
            zb.sent = True
            if self.conn_lost:
                zb.fail(ConnectionError('the transport is closed'))
            else:
                zb.finish_if_released()
            return zb
        if self.send_op is None:
            lend_sender(self)
        self.send_op.queue.append(zb)
        self.write_buffer_size += zb.view.len
        if self.send_state == SEND_IDLE:
            schedule_send(self)
        self.maybe_pause_protocol()
        return zb

    def get_extra_info(self, name, default=None):
        """As BaseTransport; also 'zerocopy', 'reading', 'writing' and
        'zerocopy_receive' (stream_extra_info)."""
        return stream_extra_info(self, name, default)

    def write_eof(self):
        """Shut down the sending side once the queued data is sent."""
        if self.closing or self.write_end != WRITE_OPEN:
            return
        set_write_end(self, WRITE_EOF_OWED)
        if self.send_state == SEND_IDLE and not queue_len(self.write_queue):
            shut_down_if_owed(self)


    def can_write_eof(self):
        return True

    def _make_empty_waiter(self):
        if self.empty_waiter is not None:
            raise RuntimeError("Empty waiter is already set")
        self.empty_waiter = self.loop.create_future()
        if not queue_len(self.write_queue):
            self.empty_waiter.set_result(None)
        return self.empty_waiter

    def _reset_empty_waiter(self):
        self.empty_waiter = None

    # -- closing ------------------------------------------------------------

    def close(self):
        """Stop reading; send what is queued, then call connection_lost.
        What is written after close() is sent only if data was still
        queued when it was called, as on the selector loop: else it is
        dropped."""
        if self.closing or self.closed_with_loop():
            return
        if self.send_state == SEND_OWED and self.socket_holds_fd():
            # The selector loop's write() sent this at once, and its close()
            # finds in the buffer only what the socket did not take: the
            # same here, so that a write() after close() is dropped or sent
            # as it would be there (SSLProtocol's close_notify after a
            # close() with data still queued is sent, a stray write after a
            # close() with nothing queued is not).
            error = send_owed_now(self)
            if error is not None:
                self.fatal_error(error, 'Fatal write error on socket transport')
                return
        self.closing = True
        self.enter_closed()
        self.stop_reading()
        # What send_owed_now() sent may have taken the buffer below the
        # low-water mark: resume the protocol before looking whether
        # anything is left, as the selector loop's _write_ready() does
        # ("may append to buffer").  SSLProtocol holds records while
        # paused, close_notify last, and calls close() right after; left
        # paused, they were never written, and the peer got a FIN without
        # close_notify (CPython's test_remote_shutdown_receives_trailing_data
        # hung in 1 to 5 runs of 25).
        self.maybe_resume_protocol()
        if not queue_len(self.write_queue) and self.send_state == SEND_IDLE:
            self.conn_lost += 1
            self.loop.soon(call_connection_lost, (self, None), handle_context(self))

    cdef int force_close(self, object exc) except -1:
        cdef object send_error = None
        if (self.send_state == SEND_OWED and not self.conn_lost and not self.closed_with_loop()
                and self.socket_holds_fd()):
            send_error = send_owed_now(self)
        # The selector loop's write() met that error first and closed with
        # it: connection_lost() gets it, unless a fatal error came first.
        return BaseTransport.force_close(self, exc if exc is not None else send_error)

    cdef int enter_closed(self) except -1:
        if self.read_state != READ_CLOSED:
            self.set_read_state(READ_CLOSED)
        return 0

    cdef int stop_io(self) except -1:
        self.enter_closed()
        self.stop_reading()
        if queue_len(self.write_queue):
            for i in range(queue_len(self.write_queue)):
                chunk = queue_at(self.write_queue, i)
                if type(chunk) is ZeroCopyFuture:
                    (<ZeroCopyFuture>chunk).fail(
                        ConnectionError('the transport was closed before the data was sent'))
            self.write_queue.clear()
            self.write_buffer_size = 0
            self.presumed_sent = 0
            self.head_offset = 0
        if self.send_state == SEND_OWED:
            self.set_send_state(SEND_IDLE)
        if self.send_state == SEND_IDLE:
            return_sender(self)
        elif self.send_request is not None:
            # its completion finds the queue dropped (send_result)
            self.loop.cancel_op(self.send_request)
        if self.zc.notifs_pending and self.sock is not None and self.sock.fileno() >= 0:
            # Zero-copy data still in the socket's send queue holds the
            # caller's pages until the peer has acknowledged it, which a
            # peer that does not read never does.  Aborting drops it: with
            # SO_LINGER 0 the close resets the connection and frees the
            # queue, and the kernel's notifications (which release the
            # buffers and resolve write_zerocopy() futures) follow at once.
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                     LINGER_RESET)
            except OSError:
                pass
        if self.empty_waiter is not None and not self.empty_waiter.done():
            self.empty_waiter.set_exception(ConnectionError("Connection is closed by peer"))
        return 0

    cdef int connection_lost_now(self, object exc) except -1:
        if self.kept is not None:
            for item in self.kept:
                if type(item) is ZeroCopyPiece:
                    (<ZeroCopyPiece>item).give_back()
            self.kept = None
        self.kept_bytes = 0
        return BaseTransport.connection_lost_now(self, exc)


cdef int zc_policy_changed(StreamTransport tr) except -1:
    """zc_maybe follows the transport's zero-copy policy: once it is set
    up, after a change through the 'socket' extra info
    (UringTransportSocket.setsockopt), and when the policy turned a send
    down (it may have turned itself off)."""
    tr.zc_maybe = tr.zc.active()
    return 0


cdef object stream_extra_info(StreamTransport tr, object name, object default):
    """StreamTransport.get_extra_info(): 'zerocopy' gives the zero-copy
    statistics, 'reading' and 'writing' how the transport receives and
    sends, 'zerocopy_receive' its zcrx queue's figures; the rest as the
    stdlib's transports."""
    if name == 'zerocopy':
        stats = tr.zc.stats()
        stats['ordinary_sends'] = tr.plain_sends
        stats['ordinary_bytes'] = tr.plain_bytes
        return stats
    if name == 'reading':
        # how this transport receives (see the header of stream.pyx)
        return {'mode': READ_MODE_NAMES[tr.reader.mode], 'received_bytes': tr.bytes_received,
                'direct_bytes': tr.direct_bytes,
                'direct_switches': tr.direct_switches,
                'armed': tr.reader.life != OP_IDLE}
    if name == 'writing':
        return {'direct_sends': tr.direct_sends,
                'queued_bytes': tr.write_buffer_size}
    if name == 'zerocopy_receive':
        if tr.zcrx is None:
            return default
        stats = tr.zcrx.stats()
        stats['receiving_zerocopy'] = tr.reader.mode == READS_ZEROCOPY
        stats['receive_armed'] = tr.reader.life != OP_IDLE
        stats['connection_zerocopy_bytes'] = tr.zc_received_bytes
        stats['copied_bytes'] = tr.bytes_received    # received ordinarily
        return stats
    if tr.extra is not None and name in tr.extra:
        return tr.extra[name]
    if name == 'peername':
        return tr.peername
    if name == 'sockname':
        return tr.sockname
    if name == 'socket':
        # made at the first request: few ask, every connection would pay
        if tr.transport_socket is None:
            tr.transport_socket = UringTransportSocket(tr.sock, tr.zc, tr)
        return tr.transport_socket
    return default


cdef StreamTransport new_stream_transport(RingLoop loop, object sock, object protocol,
                                          object waiter, object extra, object server,
                                          object server_sock=None, int family=-1,
                                          int type=-1, tuple names=None,
                                          int fd=-1, int proto=-1, object context=None):
    """A transport for sock.  A server's accept path passes what it knows
    already: the family, type and protocol of its listening socket, the
    fd and the names (sockname, peername); otherwise they are asked of the
    socket."""
    cdef StreamTransport tr = make_transport(StreamTransport)
    if family < 0:
        family = socket_family(sock)
        type = socket_type(sock)
    tr.count_in(loop)
    tr.sock = sock
    tr.fd = fd if fd >= 0 else sock.fileno()
    # sockname and peername in fields, the rest (rarely any) in a dict, and
    # 'socket' made when asked for: see get_extra_info
    tr.sockname, tr.peername = names if names is not None else socket_names(sock, extra)
    if extra:
        rest = {k: v for k, v in extra.items() if k != 'sockname' and k != 'peername'}
        tr.extra = rest or None
    tr.server = server
    tr.set_limits(None, None)
    tr.take_protocol(protocol)
    tr.zc = new_policy(loop, sock, server_sock)
    tr.context = context if context is not None else PyContext_CopyCurrent()
    tr.shared_context = STDLIB_TRANSPORT_CONTEXT
    reads = BufferedReader if tr.buffered_protocol else RingReader
    if (server_sock is not None and zerocopy_settings_given
            and server_sock in _receive_settings):
        tr.zcrx = _receive_settings[server_sock]
        tr.zcrx.register()          # once per server; a refusal only logs
        if tr.zcrx.serves(loop) and tr.zcrx.bind(loop):
            reads = ZeroCopyReader
    tr.reader = new_reader(reads, tr)
    if type == SOCK_STREAM:
        tr.zc.warmup_bytes = AUTO_WARMUP_BYTES
    if family == AF_UNIX:
        tr.zc.turn_off('AF_UNIX sockets have no zero-copy send')
    elif tr.zc.mode == ZC_AUTO and is_local_peer(tr.peername, tr.sockname):
        tr.zc.turn_off(LOCAL_PEER_REASON, False)    # the usual case: not logged
    zc_policy_changed(tr)
    set_nodelay(sock, tr.fd, family, type, proto)
    tr.register()
    if server is not None:
        attach_to_server(server, tr)
    loop.soon_made(tr, protocol, handle_context(tr))
    if waiter is not None:
        loop.soon(futures._set_result_unless_cancelled, (waiter, None))
    return tr
