# Declarations of zero-copy receive (bodies in zcrx.pyx).

cdef class RefillQueue:
    cdef ul_zcrx_rq rq
    cdef object memory               # the region's owner, kept alive
    cdef Py_buffer view
    cdef bint has_view

    cdef int check_ready(self) except -1


cdef class ZeroCopyPiece:
    cdef ZeroCopyReceive owner       # None once given back
    cdef object area                 # keeps the area mapped while a view lives
    cdef char *ptr
    cdef uint64_t rqe_off            # what goes back through the refill queue
    cdef uint32_t length
    cdef Py_ssize_t exports          # live buffer views
    cdef bint delivered              # the protocol's callback has returned
    cdef bint held                   # hold() called: back only on release()

    cdef int give_back(self) except -1
    cdef int delivered_now(self) except -1


cdef class ZeroCopyReceive:
    cdef readonly str interface
    cdef readonly unsigned queue
    cdef readonly size_t area_size
    cdef readonly unsigned refill_entries
    cdef bint tried
    cdef readonly bint registered
    cdef readonly object reason       # why zero-copy receive is not active
    cdef Ring ring                    # the dedicated CQE32 ring (open once set up)
    cdef object area                  # mmap of the payload area
    cdef char *area_base
    cdef object region                # mmap of the refill queue region
    cdef readonly RefillQueue refill
    cdef readonly uint32_t zcrx_id
    cdef readonly uint64_t area_token

    # the data path (bound to the loop whose thread registered the queue)
    cdef RingLoop loop
    cdef int efd                      # the ring's eventfd, watched by the loop
    cdef bint simulated               # SimulatedZeroCopyReceive (zcrx_simulated.pyx)
    cdef set readers                  # ZeroCopyReaders whose RECV_ZC is armed
    cdef list returns_waiting         # (off, len) the full refill queue refused
    cdef list starved                 # ZeroCopyReaders stopped for area pressure
    cdef bint in_batch
    cdef bint draining                # close(): RECV_ZC requests are being ended
    cdef readonly Py_ssize_t outstanding_bytes   # pieces not given back
    cdef readonly Py_ssize_t held_area   # ... and the area buffers they pin
    cdef readonly uint64_t zerocopy_bytes
    cdef readonly uint64_t pieces
    cdef readonly uint64_t fallbacks  # connections whose RECV_ZC was refused
    cdef readonly Py_ssize_t high_water
    cdef readonly Py_ssize_t low_water

    cdef int attempt(self) except -1
    cdef int open_ring(self) except -1
    cdef release_ring(self)
    cdef bint bind(self, RingLoop loop) except -1
    cdef bint serves(self, RingLoop loop) noexcept
    cdef bint arm(self, ZeroCopyReader reader) except -1
    cdef int disarm(self, ZeroCopyReader reader) except -1
    cdef int submit(self) except -1
    cdef int reap(self) except -1
    cdef ZeroCopyPiece new_piece(self, uint64_t off, int32_t res)
    cdef bint past_high_water(self) noexcept
    cdef int refused(self, int32_t res) except -1
    cdef int give(self, uint64_t off, uint32_t length) except -1
    cdef int commit(self) except -1
    cdef int drain(self) except -1
    cdef int detach(self, bint rearm) except -1
    cdef log_off(self)
