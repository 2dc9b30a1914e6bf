# Declarations of the sock_* operations (bodies in sockops.pyx).


cdef class SocketOperation(Operation):
    cdef object sock
    cdef int fd
    cdef Py_buffer view
    cdef bint has_view
    cdef int hold_buffer(self, object buf, int flags) except -1
    cdef int release_buffer(self) except -1
    cdef int release(self) except -1
    cdef int arm(self) except -1
    cdef int finish_with_count(self, int32_t res) except -1
    cdef bint should_retry(self, int32_t res)


cdef class SendAllOp(SocketOperation):
    cdef Py_ssize_t offset
    cdef bint counted                # in loop.sendalls_in_flight
    cdef int release_buffer(self) except -1
    cdef int arm(self) except -1
    cdef int complete(self, int32_t res, uint32_t flags) except -1


cdef class SocketPoll(SocketOperation):
    cdef unsigned mask
    cdef int arm(self) except -1
    cdef int complete(self, int32_t res, uint32_t flags) except -1


cdef class SendMsgOp(SocketOperation):
    cdef msghdr msg
    cdef iovec iov
    cdef sockaddr_storage addr
    cdef socklen_t addrlen
    cdef int arm(self) except -1
    cdef int complete(self, int32_t res, uint32_t flags) except -1
