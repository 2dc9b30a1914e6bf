# Declarations of the datagram transport (bodies in transports/datagram.pyx).

cdef class DatagramTransport(BaseTransport):
    cdef object address              # the connected peer, or None
    cdef DatagramRecv recv_op
    cdef bint recv_armed
    cdef bint reading_paused
    cdef list paused_datagrams       # arrived while the RECVMSG was being cancelled
    cdef bint send_armed
    cdef object write_queue          # deque of (bytes or ZeroCopyBuffer, address)
    cdef ZeroCopyPolicy zc

    cdef int start_reading(self) except -1
    cdef bint deliver(self, object data, object addr) except -1
    cdef int zc_send_completed(self, int32_t res) except -1
    cdef int recv_completed(self, int32_t res, object data, object addr,
                            bint final) except -1
    cdef int submit_send(self) except -1
    cdef bint send_now(self, bytes data, object addr) except -1
    cdef int send_queued_now(self) except -1
    cdef int address_to_c(self, object addr, sockaddr_storage *out) except -1
    cdef DatagramSend prepare_send(self, object data, object addr)
    cdef io_uring_sqe *prep_sqe(self, DatagramSend op) except NULL
    cdef int send_completed(self, int32_t res) except -1
    cdef int drop_queue(self, object exc) except -1
    cdef datagram_failed(self, object exc)


cdef class DatagramRecv(Operation):
    cdef DatagramTransport transport
    cdef msghdr msg                  # only the name/control sizes are used

    cdef int arm(self) except -1


cdef class DatagramSend(Operation):
    cdef DatagramTransport transport
    cdef object data                 # bytes or ZeroCopyBuffer, held until the
                                     # last CQE (F_NOTIF for ZC)
    cdef msghdr msg
    cdef iovec iov
    cdef sockaddr_storage addr
    cdef bint zerocopy
