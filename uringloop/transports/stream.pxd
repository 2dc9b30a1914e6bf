# Declarations of the stream transport (bodies in transports/stream.pyx).
# Which reading mode and writing state each combination of these flags is,
# and how they change: docs/design.md, "Stream transport states".

cdef class StreamTransport(BaseTransport):
    cdef bint buffered_protocol      # protocol is an asyncio.BufferedProtocol
    cdef bint reading_paused
    cdef bint eof_seen               # the peer's FIN has arrived
    cdef bint eof_pending            # ...and waits for resume_reading
    cdef object error_pending        # a read error that came while paused, or None
    cdef list paused_data            # received while reading was paused, or None
    cdef Py_ssize_t paused_bytes
    cdef StreamRecv recv_op
    cdef bint recv_armed             # recv_op (or poll_op, direct reads) in flight
    cdef bint direct_wanted          # large reads: readiness + recv(2) into bytes,
                                     # from the next arming on
    cdef unsigned direct_small_reads # consecutive small reads in that mode
    cdef Py_ssize_t direct_bytes     # received by direct reads (no copy of ours)
    cdef Py_ssize_t direct_switches  # times it moved to direct reads
    cdef Py_ssize_t direct_sends     # writes sent whole by send(2) in write()
    cdef StreamPoll poll_op          # made at the first direct read

    cdef object write_queue          # deque of bytes / ZeroCopyFuture, oldest first;
                                     # send_op's, None while nothing is queued
    cdef Py_ssize_t head_offset      # bytes of write_queue[0] already sent
    cdef bint eof_written            # write_eof() was called
    cdef StreamSend send_op          # from the loop's pool while writing, or None
    cdef Operation zc_send_op        # the SEND_ZC in flight (until its first CQE)
    cdef bint send_armed             # a send in flight, or owed
    cdef bint send_owed              # queued since the last enter: the loop
                                     # submits it before its next one
    cdef object empty_waiter         # future resolved when the queue drains
    cdef ZeroCopyPolicy zc
    cdef ZeroCopyReceive zcrx        # the server's zero-copy receive, or None
    cdef bint zc_rx                  # receives with RECV_ZC through zcrx
    cdef uint64_t zc_token           # that RECV_ZC's user_data on zcrx's ring
    cdef bint zc_starved             # stopped until the area has room again
    cdef uint64_t zc_received_bytes
    cdef object sockname, peername   # extra info kept apart from the dict
    cdef object transport_socket     # extra info 'socket', once asked for
    cdef Py_ssize_t bytes_received   # received with ordinary RECV (copied)

    cdef int start_reading(self) except -1
    cdef int stop_reading(self) except -1
    cdef int recv_completed(self, int32_t res, uint32_t flags, object data,
                            bint direct) except -1
    cdef int deliver(self, object data) except -1
    cdef int poll_completed(self, int32_t res, uint32_t flags) except -1
    cdef int read_direct(self) except -1
    cdef int received(self, object data, Py_ssize_t n) except -1
    cdef int received_eof(self) except -1
    cdef int keep(self, object data, Py_ssize_t n) except -1
    cdef int zc_armed(self, uint64_t token) except -1
    cdef int zc_received(self, ZeroCopyPiece piece, bint starve) except -1
    cdef int zc_room_again(self) except -1
    cdef int zc_refused(self) except -1
    cdef int zc_off(self, bint rearm) except -1
    cdef int zc_piece(self, ZeroCopyPiece piece) except -1
    cdef int deliver_piece(self, ZeroCopyPiece piece) except -1
    cdef int deliver_eof(self) except -1
    cdef int schedule_send(self) except -1
    cdef int flush_sends(self) except -1
    cdef int force_close(self, object exc) except -1
    cdef object send_owed_now(self)
    cdef int submit_send(self) except -1
    cdef int submit_send_zc(self, object head) except -1
    cdef Py_ssize_t send_batch(self, Py_ssize_t n)
    cdef Py_ssize_t zc_batch(self, object head)
    cdef int submit_sendmsg_zc(self, ZcSend op, Py_ssize_t n, unsigned zc_flags) except -1
    cdef list queued_message(self, msghdr *msg, iovec *iov, Py_ssize_t n)
    cdef int zc_send_completed(self, int32_t res) except -1
    cdef int send_completed(self, int32_t res, bint zerocopy) except -1
    cdef int send_result(self, int32_t res, bint zerocopy) except -1
    cdef int sent_from_queue(self, Py_ssize_t n) except -1
    cdef int take_sender(self) except -1
    cdef int give_back_sender(self) except -1


cdef class StreamRecv(Operation):
    cdef StreamTransport transport
    cdef Py_buffer *view             # a BufferedProtocol's buffer, or NULL ...
    cdef object view_protocol        # ... and the protocol it belongs to

    cdef int hold(self, object buf) except -1


cdef class StreamPoll(Operation):
    cdef StreamTransport transport


cdef class StreamSend(Operation):
    cdef StreamTransport transport
    cdef object held                 # the chunks the kernel is reading
    cdef object queue                # the write queue of the transport it serves
    cdef object queue_append         # its bound append and popleft: a method
    cdef object queue_popleft        # looked up per call cost 5% of a 1 KiB echo
    cdef StreamSend next_spare       # in the loop's list of idle ones
    cdef msghdr msg
    cdef iovec *iov                  # MAX_IOV entries, allocated at the first SENDMSG
