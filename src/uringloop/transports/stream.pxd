# Declarations of the stream transport (bodies in transports/stream.pyx, its
# readers in transports/stream_readers.pyx).  Its read and send states, and
# the moves between them: docs/design.md, "Stream transport states".

# The read state (StreamTransport.read_state, changed by set_read_state())
cdef enum:
    READ_ON             # the reader's request is armed, or is at the next chance
    READ_PAUSED         # pause_reading(): what completes is kept (kept)
    READ_HANDING_OVER   # reading is on, and what was kept is handed over first
                        # (_deliver_kept); what completes meanwhile is kept
    READ_ENDED          # eof_received() kept the transport open: nothing is armed
    READ_ENDED_PAUSED   # ... and pause_reading() since (is_reading() is False)
    READ_CLOSED         # close(), abort(), a fatal error: nothing more is delivered

# The send state (StreamTransport.send_state, changed by set_send_state())
cdef enum:
    SEND_IDLE           # nothing in flight (the queue may hold what close() left)
    SEND_OWED           # queued since the last enter: in loop.send_flushes, its
                        # request is written by flush_sends() before the next enter
    SEND_SENDING        # a SEND or SENDMSG (the StreamSend) in flight
    SEND_ZEROCOPY       # a SEND_ZC or SENDMSG_ZC (a ZcSend) before its first CQE

# The write end (StreamTransport.write_end, changed by set_write_end()):
# what the writer may still do, whatever the send state
cdef enum:
    WRITE_OPEN          # write() queues and sends
    WRITE_EOF_OWED      # write_eof(): write() refused; shut down once drained
    WRITE_SHUT_DOWN     # shutdown(SHUT_WR) made: write() refused

# The read modes (StreamReader.mode)
cdef enum:
    READS_RING          # RingReader: multishot RECV, provided buffers, copied
    READS_DIRECT        # DirectReader: POLL, then recv(2) into bytes
    READS_BUFFERED      # BufferedReader: RECV into the protocol's get_buffer()
    READS_ZEROCOPY      # ZeroCopyReader: multishot RECV_ZC on a zcrx queue


cdef class ChunkQueue:
    # a stream transport's write queue (bytes / ZeroCopyFuture, oldest
    # first): the oldest in `first`, the rest in a ring in a list (None
    # until a second chunk came), its length a power of 2, None where empty
    cdef object first
    cdef list items
    cdef Py_ssize_t head, count, mask    # count: all, first too; mask: len(items) - 1, 0 without

    cdef int append(self, object chunk) except -1
    cdef object popleft(self)
    cdef int clear(self) except -1


cdef class StreamTransport(BaseTransport):
    cdef bint buffered_protocol      # protocol is an asyncio.BufferedProtocol
    cdef object get_buffer_method    # its get_buffer as last looked up, and
    cdef MethodCheck get_buffer_check  # when that holds (as read_method)
    cdef int read_state              # READ_*
    cdef StreamReader reader         # the read mode in force, and its request
    cdef StreamReader next_reader    # the mode due once reader's request ended
    cdef list kept                   # completed while paused, or before those
                                     # were handed over: bytes, ZeroCopyPiece,
                                     # then KEPT_EOF or the read error; or None
    cdef Py_ssize_t kept_bytes
    cdef Py_ssize_t bytes_received   # received and copied (ring, buffered)
    cdef Py_ssize_t direct_bytes     # received by direct reads (no copy of ours)
    cdef Py_ssize_t direct_switches  # times it moved to direct reads
    cdef Py_ssize_t direct_sends     # writes sent whole by send(2) in write()
    cdef ZeroCopyReceive zcrx        # the server's zero-copy receive, or None
    cdef uint64_t zc_received_bytes

    cdef ChunkQueue write_queue      # send_op's queue, None while no sender is lent
    cdef Py_ssize_t head_offset      # bytes of write_queue[0] already sent
    cdef int write_end               # WRITE_*
    cdef int send_state              # SEND_*
    cdef StreamSend send_op          # from the loop's pool while writing, or None
    cdef Operation send_request      # what SENDING / ZEROCOPY waits for: the lent
                                     # send_op or a ZcSend, until its (first) CQE
    cdef object empty_waiter         # future resolved when the queue drains
    cdef ZeroCopyPolicy zc
    cdef bint zc_maybe               # zc.active(): write() and sends ask zc only then
    cdef Py_ssize_t plain_sends      # sends without zero-copy (send(2), SEND, SENDMSG)
    cdef Py_ssize_t plain_bytes      # and their bytes (zc's warm-up counts them)
    cdef object sockname, peername   # extra info kept apart from the dict
    cdef object transport_socket     # extra info 'socket', once asked for

    # reading (what the readers call)
    @cython.final
    cdef int set_read_state(self, int state) except -1
    cdef int start_reading_in_context(self) except -1
    @cython.final
    cdef int start_reading(self) except -1
    cdef int stop_reading(self) except -1
    cdef int switch_reader(self, StreamReader reader) except -1
    cdef int reader_done(self) except -1
    @cython.final
    cdef int received(self, object data, Py_ssize_t n) except -1
    cdef int received_in_buffer(self, Py_ssize_t n) except -1
    cdef int received_eof(self) except -1
    cdef int read_failed(self, int32_t res) except -1
    cdef int read_error(self, object exc) except -1
    cdef int keep(self, object item, Py_ssize_t n) except -1
    cdef int hand_over(self, object item) except -1
    @cython.final
    cdef int deliver(self, object data) except -1
    cdef int deliver_copied(self, object data) except -1
    cdef int keep_first(self, bytes rest) except -1
    cdef int deliver_eof(self) except -1
    cdef int eof_to_protocol(self) except -1
    cdef int release_ops(self) except -1
    cdef int take_protocol(self, object protocol) except -1
    # writing
    @cython.final
    cdef int set_send_state(self, int state) except -1
    cdef int flush_sends(self) except -1
    cdef int force_close(self, object exc) except -1
    cdef int connection_lost_now(self, object exc) except -1
    # (the send state's other moves: transports/stream_writing.pyx's
    # schedule_send(), submit_send(), send_result(); zerocopy.pyx's
    # submit_send_zc())


cdef class StreamReader(Operation):
    # A read mode of a StreamTransport, as the Operation of its request
    # (transports/stream_readers.pyx).
    cdef StreamTransport transport
    cdef int mode                    # READS_*
    cdef bint stops_at_pause         # pause_reading() cancels its request
    # whether a short read is followed by another recv(2) (gather_want())
    cdef unsigned char gather_score  # 0: not, but once in GATHER_PROBE
    cdef unsigned char gather_idle   # short reads since that score was 0
    cdef Py_ssize_t recent           # the largest recent read, less an eighth a read

    cdef int arm(self) except -1     # 1 when a request was written
    cdef int stop(self) except -1


cdef class RingReader(StreamReader):
    pass


cdef class DirectReader(StreamReader):
    cdef unsigned small_reads        # reads under DIRECT_SMALL in a row
    cdef Py_ssize_t read_size        # the next recv(2)'s size (read_now)

    cdef int read_now(self, unsigned events) except -1


cdef class BufferedReader(StreamReader):
    cdef Py_buffer *view             # the protocol's buffer while armed, or NULL
    cdef object view_protocol        # ... and the protocol it belongs to

    cdef int hold(self, object buf) except -1


cdef class ZeroCopyReader(StreamReader):
    cdef ZeroCopyReceive zcrx
    cdef uint64_t cqe_off            # the completion's area offset (CQE32),
                                     # set by the queue before dispatch
    cdef bint starved                # stopped until the area has room again

    cdef int room_again(self) except -1


cdef class StreamSend(Operation):
    cdef StreamTransport transport
    cdef object held                 # the chunks the kernel is reading
    cdef ChunkQueue queue            # the write queue of the transport it serves
    cdef StreamSend next_spare       # in the loop's list of idle ones
    cdef msghdr msg
    cdef iovec *iov                  # MAX_IOV entries, allocated at the first SENDMSG

    cdef int arm(self) except -1


# recv(2) and send(2) from C for the stream transport and sock_recv()
cdef extern from "transports/stream_io.h":
    object ul_recv_bytes(int fd, Py_ssize_t size, Py_ssize_t *res)
    Py_ssize_t ul_recv_more(int fd, char *buf, Py_ssize_t got, Py_ssize_t size,
                            Py_ssize_t want, Py_ssize_t *after)
    object ul_recv_stream(int fd, ul_spare_bytes *sp, Py_ssize_t size, Py_ssize_t want,
                          Py_ssize_t *res, Py_ssize_t *first, Py_ssize_t *after,
                          Py_ssize_t *room)
    Py_ssize_t ul_send_now(int fd, const char *buf, Py_ssize_t len) nogil
    object ul_bytes_from_buf_ring(ul_spare_bytes *sp, ul_buf_ring *ring, unsigned bid,
                                  Py_ssize_t n, Py_ssize_t *room)