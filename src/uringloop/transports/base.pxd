# Declarations shared by the transports (bodies in transports/base.pyx).

cdef class BaseTransport:
    cdef object __weakref__
    cdef dict __dict__               # lets tests and users set attributes
    cdef RingLoop loop
    cdef bint made_by_loop           # (make_transport); counted in debug.h
    cdef ul_loop_counts *counts      # its loop's (count_in), or NULL
    cdef object sock
    cdef int fd
    cdef object protocol
    cdef object read_method          # the function each read's protocol call
                                     # (data_received, datagram_received or
                                     # buffer_updated) found,
    cdef MethodCheck read_method_check  # and when it still is (base.pyx)
    cdef object context              # copy of the context it was made in:
                                     # protocol callbacks run in it
    cdef bint shared_context         # connection_made()/connection_lost()
                                     # run in `context` itself (3.15's socket
                                     # transports), not in a copy of their own
    cdef dict extra
    cdef object server
    cdef bint closing
    cdef bint protocol_connected
    cdef int conn_lost
    cdef int ops_pending            # our requests the kernel may still hold
    cdef bint sock_close_pending    # close the fd once ops_pending is 0
    cdef bint lost_reported         # _call_connection_lost() ran: release_ops()
                                    # once ops_pending is 0
    # write flow control (transports that write)
    cdef Py_ssize_t write_buffer_size
    cdef Py_ssize_t presumed_sent   # of it, small writes to an idle stream:
                                    # the kernel takes them at the submit
    cdef Py_ssize_t high_water
    cdef Py_ssize_t low_water
    cdef bint protocol_paused

    cdef int register(self) except -1
    cdef int count_in(self, RingLoop loop) except -1
    @cython.final
    cdef int op_started(self) except -1
    @cython.final
    cdef int op_finished(self) except -1
    cdef int close_socket(self) except -1
    cdef int fatal_error(self, object exc, str message) except -1
    cdef int force_close(self, object exc) except -1
    cdef bint closed_with_loop(self) except -1
    cdef int connection_lost_now(self, object exc) except -1
    cdef bint socket_holds_fd(self) except -1
    cdef int stop_io(self) except -1
    cdef int enter_closed(self) except -1
    cdef int flush_sends(self) except -1
    cdef int release_ops(self) except -1
    cdef int set_limits(self, object high, object low) except -1
    @cython.final
    cdef int maybe_pause_protocol(self) except -1
    cdef int pause_protocol(self) except -1
    @cython.final
    cdef int maybe_resume_protocol(self) except -1
    cdef int resume_protocol(self) except -1
