# Declarations of the zero-copy send machinery (transports/zerocopy.pyx).

cdef class ZeroCopyPolicy:
    cdef public int mode
    cdef public Py_ssize_t threshold
    cdef object off_reason
    cdef bint report_usage
    cdef bint skip_next              # send the head chunk with a copy once
    cdef Py_ssize_t zc_sends, zc_bytes, copied_reports, clean_reports
    cdef Py_ssize_t notifs_pending
    cdef Py_ssize_t plain_sends, plain_bytes    # a datagram transport's (a stream
                                                # transport counts its own)
    cdef Py_ssize_t fixed_sends      # zero-copy sends from registered buffers
    cdef Py_ssize_t batched_sends    # SENDMSG_ZC requests of several chunks
    cdef Py_ssize_t warmup_bytes     # auto mode: sent ordinarily before probing

    cdef bint wants(self, object chunk, Py_ssize_t size, Py_ssize_t plain_bytes) noexcept
    cdef bint may_want(self, Py_ssize_t size, Py_ssize_t plain_bytes) noexcept
    cdef bint active(self) noexcept
    cdef bint absorb_error(self, int32_t res)
    cdef turn_off(self, str reason, bint log=*)
    cdef note_notification(self, int32_t res)


cdef class UnretrievedError:
    cdef object loop
    cdef object exception
    cdef str future_repr


cdef class ZeroCopyFuture:
    # the send: the caller's buffer, exported until the kernel lets go
    cdef Py_buffer view
    cdef bint has_view
    cdef Py_ssize_t nbytes
    cdef int zc_inflight             # SEND_ZC requests still holding it
    cdef bint sent                   # left the write queue
    cdef bint any_copied
    cdef bint any_zerocopy
    cdef object error                # set when dropped before it was sent
    cdef int buf_index               # registered-buffer slot holding it, or -1
    # the future
    cdef RingLoop loop
    cdef int state                   # FUTURE_PENDING, _RESULT, _EXCEPTION, _CANCELLED
    cdef object outcome              # the exception, or the ZeroCopyResult once made
    cdef bint whole_zerocopy         # the result's zerocopy
    cdef object cancel_message
    cdef list callbacks              # [(fn, context)], or None
    cdef UnretrievedError reporter   # with an exception nobody retrieved yet
    cdef public bint _asyncio_future_blocking

    cdef int finish_if_released(self) except -1
    cdef int fail(self, object exc) except -1
    cdef int settle(self, int state, object outcome) except -1
    cdef object cancelled_error(self)
    cdef int retrieved(self) except -1


cdef class ZcSend(Operation):
    cdef StreamTransport transport
    cdef object chunk                # bytes or ZeroCopyFuture, until F_NOTIF;
                                     # a list of them for a SENDMSG_ZC
    cdef msghdr msg                  # (SENDMSG_ZC)
    cdef iovec *iov

    cdef int arm(self, object head, Py_ssize_t n) except -1
