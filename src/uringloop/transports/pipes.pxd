# Declarations of the pipe transports (bodies in transports/pipes.pyx).
# Each is one state value, changed by its set_*_state() alone and checked
# against its table in the debug build (pipes.pyx; docs/design.md, "Pipe
# transport states"); whether a request is in flight is its op's life.

# A read pipe's state (ReadPipeTransport.read_state)
cdef enum:
    PIPE_READING        # the READ is armed, or is at the next chance
    PIPE_PAUSED         # pause_reading(): the READ is cancelled
    PIPE_READ_CLOSED    # end of file, close(), abort(), a fatal error

# A write pipe's state (WritePipeTransport.write_state)
cdef enum:
    PIPE_WRITABLE       # write() queues and sends
    PIPE_DRAINING       # write_eof() / close(): the queue is sent, then the end
    PIPE_WRITE_CLOSED   # ended: abort(), a fatal error, the reader gone, drained

cdef class PipeIO(Operation):
    cdef BaseTransport transport
    cdef bytes buf                   # the scratch buffer (reads) or the data
    cdef Py_ssize_t offset           # (writes) bytes of buf already written
    cdef bint writing

    cdef int arm(self) except -1


cdef class ReadPipeTransport(BaseTransport):
    cdef PipeIO read_op
    cdef int read_state              # PIPE_READING, PIPE_PAUSED, PIPE_READ_CLOSED

    cdef int set_read_state(self, int state) except -1
    cdef int start_reading(self) except -1
    cdef int cancel_read(self) except -1
    cdef int release_ops(self) except -1
    cdef int read_completed(self, int32_t res) except -1


cdef class WritePipeTransport(BaseTransport):
    cdef PipeIO write_op
    cdef Operation hangup_op         # POLL for the reader going away
    cdef object write_queue          # deque of bytes
    cdef int write_state             # PIPE_WRITABLE, PIPE_DRAINING, PIPE_WRITE_CLOSED

    cdef int set_write_state(self, int state) except -1
    cdef int submit_write(self) except -1
    cdef int release_ops(self) except -1
    cdef int write_completed(self, int32_t res) except -1
    cdef int hangup(self) except -1
