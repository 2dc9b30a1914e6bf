# Declarations of the file requests (bodies in file_requests.pyx).


cdef class FileRequests:
    cdef readonly Py_ssize_t in_flight
    cdef object idle_waiter          # a future resolved when in_flight is 0
    cdef list orphan_fds             # closed when in_flight reaches 0
    cdef int started(self) except -1
    cdef int ended(self) except -1


cdef class FileRequest(Operation):
    cdef int fd
    cdef int64_t offset              # -1: the file's own position
    cdef FileRequests requests       # the file's count, told at the final CQE
    cdef int arm(self) except -1
    cdef int finish(self, int32_t res) except -1
    cdef int ended(self) except -1


cdef class FileOpen(FileRequest):
    cdef bytes path
    cdef int flags
    cdef unsigned mode


cdef class FileRead(FileRequest):
    cdef PyObject *data              # the bytes the kernel fills (owned)
    cdef Py_ssize_t size
    cdef object orphan               # told of bytes nobody waits for, or None


cdef class FileTransfer(FileRequest):
    cdef Py_buffer view              # read into or written from
    cdef bint has_view
    cdef bint writes
    cdef object account              # told the count of a write, or None
    cdef int release_view(self) except -1


cdef class FileSync(FileRequest):
    cdef unsigned flags


cdef class FileTruncate(FileRequest):
    pass


cdef class FileClose(FileRequest):
    pass


cdef class FileStat(FileRequest):
    cdef bytes path
    cdef int flags
    cdef statx buf


cdef class Splice(FileRequest):
    cdef int fd_out
    cdef int64_t offset_out
    cdef unsigned size
