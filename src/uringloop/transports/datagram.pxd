# Declarations of the datagram transport (bodies in transports/datagram.pyx).

# The read state (DatagramTransport.read_state, changed by set_read_state();
# docs/design.md, "Datagram transport states")
cdef enum:
    DGRAM_READING       # the RECVMSG is armed, or is at the next chance
    DGRAM_PAUSED        # pause_reading(): the RECVMSG is cancelled; what it
                        # posted before the cancel landed is kept
    DGRAM_HANDING_OVER  # reading is on, and what was kept is handed over first
                        # (_deliver_kept); what completes meanwhile is kept
    DGRAM_CLOSED        # close(), abort(), a fatal error: nothing is delivered


cdef class DatagramTransport(BaseTransport):
    cdef object address              # the connected peer, or None
    cdef int read_state              # DGRAM_*
    cdef DatagramRecv recv_op
    cdef list kept                   # (data, addr) that came while paused, or
                                     # before those were handed over; or None
    cdef object write_queue          # deque of DatagramSend, oldest first
    cdef object queue_append         # its bound append and popleft (not
    cdef object queue_popleft        # looked up per call)
    cdef int links_in_flight         # requests of the chain the kernel holds
    cdef bint flush_scheduled        # in loop.send_flushes (also: a datagram
                                     # went direct this iteration, the next queue)
    cdef bint blocked                # the socket said EAGAIN: wait for POLLOUT
    cdef DatagramWritable writable_op
    cdef DatagramSend spare_ops      # DatagramSends to reuse, linked by next_spare
    cdef Py_ssize_t spare_count
    cdef Py_ssize_t chain_limit      # links in the next chain (see flush_sends)
    cdef Py_ssize_t chain_sent       # links of the chain in flight sent so far
    cdef Py_ssize_t chains, links, links_again   # get_extra_info('send_chains')
    cdef ZeroCopyPolicy zc

    cdef int set_read_state(self, int state) except -1
    cdef int start_reading(self) except -1
    cdef int release_ops(self) except -1
    cdef int deliver(self, object data, object addr) except -1
    cdef int recv_completed(self, int32_t res, object data, object addr,
                            bint final) except -1
    cdef bint send_now(self, bytes data, object addr) except -1
    cdef ssize_t send_direct(self, char *buf, size_t size, sockaddr_storage *addr,
                             socklen_t addrlen) noexcept
    cdef DatagramSend new_send_op(self)
    cdef DatagramSend take_send_op(self)
    cdef int keep_send_op(self, DatagramSend op) except -1
    cdef int address_to_c(self, object addr, sockaddr_storage *out) except -1
    cdef int enqueue(self, object data, object addr, Py_ssize_t size) except -1
    cdef int schedule_flush(self) except -1
    cdef int wait_writable(self) except -1
    cdef int flush_sends(self) except -1
    cdef int link_completed(self, DatagramSend op, int32_t res) except -1
    cdef int chain_done(self) except -1
    cdef int send_op_done(self, DatagramSend op) except -1
    cdef int send_queued_now(self) except -1
    cdef int drop_queue(self, object exc) except -1
    cdef datagram_failed(self, DatagramSend op, object exc)


cdef class DatagramRecv(Operation):
    cdef DatagramTransport transport
    cdef msghdr msg                  # only the name/control sizes are used

    cdef int arm(self) except -1


cdef class DatagramSend(Operation):
    # One queued datagram, and the request that sends it.
    cdef DatagramTransport transport
    cdef object data                 # bytes or ZeroCopyFuture, held while
                                     # queued and until the last CQE (F_NOTIF
                                     # for ZC)
    cdef iovec iov                   # where the datagram is, and its size
    cdef sockaddr_storage addr
    cdef socklen_t addrlen           # 0: to the connected peer
    cdef bint zerocopy               # the request is a SEND_ZC
    cdef bint queued                 # in the transport's write_queue
    cdef DatagramSend next_spare     # in the transport's spares

    cdef int arm(self, bint link) except -1


cdef class DatagramWritable(Operation):
    # POLL_ADD for POLLOUT after a send said EAGAIN.
    cdef DatagramTransport transport

    cdef int arm(self) except -1
