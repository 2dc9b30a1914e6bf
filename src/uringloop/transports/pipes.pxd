# Declarations of the pipe transports (bodies in transports/pipes.pyx).

cdef class PipeIO(Operation):
    cdef BaseTransport transport
    cdef bytes buf                   # the scratch buffer (reads) or the data
    cdef Py_ssize_t offset           # (writes) bytes of buf already written
    cdef bint writing

    cdef int arm(self) except -1


cdef class ReadPipeTransport(BaseTransport):
    cdef PipeIO read_op
    cdef bint read_armed
    cdef bint paused

    cdef int start_reading(self) except -1
    cdef int release_ops(self) except -1
    cdef int read_completed(self, int32_t res) except -1


cdef class WritePipeTransport(BaseTransport):
    cdef PipeIO write_op
    cdef bint write_armed
    cdef Operation hangup_op         # POLL for the reader going away
    cdef bint hangup_armed
    cdef object write_queue          # deque of bytes

    cdef int submit_write(self) except -1
    cdef int release_ops(self) except -1
    cdef int write_completed(self, int32_t res) except -1
    cdef int hangup(self) except -1
