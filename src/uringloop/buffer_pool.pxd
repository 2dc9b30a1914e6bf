# Declarations of the registered-buffer pool (bodies in buffer_pool.pyx).

cdef class PoolRegion:
    # One mmap'ed piece of memory, registered with the ring as one buffer
    # (slot `index`) when the kernel allowed it.
    cdef char *base
    cdef size_t size
    cdef int index                   # slot in the ring's buffer table, -1: none
    cdef list free_runs              # sorted [offset, length] of free pages
    cdef Py_ssize_t live             # RegisteredBuffers cut from it
    cdef BufferPool pool             # told when the region falls idle

    cdef Py_ssize_t take(self, size_t length)
    cdef int give_back(self, size_t offset, size_t length) except -1


cdef class RegisteredBuffer:
    cdef PoolRegion region
    cdef size_t offset               # into the region
    cdef size_t length               # what the user asked for
    cdef size_t span                 # length rounded up to whole pages
    cdef int exports                 # buffer views handed out, not released
    cdef bint returned               # the pages went back to the region

    cdef int return_pages(self) except -1


cdef class BufferPool:
    cdef list regions
    cdef int table_slots             # size of the ring's sparse table, 0: none
    cdef object unregistered_reason  # why a region could not be registered
    cdef size_t registered_bytes
    cdef size_t unregistered_bytes
    cdef ul_ring *ring               # NULL once the loop closed
    cdef Py_ssize_t regions_dropped

    cdef RegisteredBuffer allocate(self, ul_ring *ring, size_t length)
    cdef int region_idle(self, PoolRegion region) except -1
    cdef int drop_region(self, PoolRegion region) except -1
    cdef register(self, ul_ring *ring, PoolRegion region)
    cdef note_refusal(self, str what, int ret)
    cdef int index_of(self, char *buf, size_t length)
    cdef int close(self) except -1
