# Declarations of zero-copy receive (bodies in zcrx.pyx).

cdef class RefillQueue:
    cdef ul_zcrx_rq rq
    cdef object memory               # the region's owner, kept alive
    cdef Py_buffer view
    cdef bint has_view


cdef class ZeroCopyReceive:
    cdef readonly str interface
    cdef readonly unsigned queue
    cdef readonly size_t area_size
    cdef readonly unsigned refill_entries
    cdef bint tried
    cdef readonly bint registered
    cdef readonly object reason       # why zero-copy receive is not active
    cdef ul_ring ring                 # the dedicated CQE32 ring, once set up
    cdef bint ring_open
    cdef object area                  # mmap of the payload area
    cdef object region                # mmap of the refill queue region
    cdef readonly RefillQueue refill
    cdef readonly uint32_t zcrx_id
    cdef readonly uint64_t area_token

    cdef int attempt(self) except -1
    cdef release_ring(self)
