# Declarations of the zero-copy send machinery (transports/zerocopy.pyx).

cdef class ZeroCopyPolicy:
    cdef public int mode
    cdef public Py_ssize_t threshold
    cdef object off_reason
    cdef bint report_usage
    cdef bint skip_next              # send the head chunk with a copy once
    cdef Py_ssize_t zc_sends, zc_bytes, copied_reports, clean_reports
    cdef Py_ssize_t notifs_pending, plain_sends, plain_bytes
    cdef Py_ssize_t fixed_sends      # zero-copy sends from registered buffers
    cdef Py_ssize_t warmup_bytes     # auto mode: sent ordinarily before probing

    cdef bint wants(self, object chunk, Py_ssize_t size)
    cdef bint may_want(self, Py_ssize_t size)
    cdef bint absorb_error(self, int32_t res)
    cdef turn_off(self, str reason, bint log=*)
    cdef note_notification(self, int32_t res)


cdef class ZeroCopyBuffer:
    cdef Py_buffer view
    cdef bint has_view
    cdef object future
    cdef int zc_inflight             # SEND_ZC requests still holding it
    cdef bint sent                   # left the write queue
    cdef bint any_copied
    cdef bint any_zerocopy
    cdef object error                # set when dropped before it was sent
    cdef int buf_index               # registered-buffer slot holding it, or -1

    cdef int finish_if_released(self) except -1
    cdef int fail(self, object exc) except -1


cdef class ZcSend(Operation):
    cdef StreamTransport transport
    cdef object chunk                # bytes or ZeroCopyBuffer, until F_NOTIF
