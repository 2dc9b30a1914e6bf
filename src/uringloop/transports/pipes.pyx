# Pipe transports (connect_read_pipe / connect_write_pipe, subprocess pipes).
#
# The stdlib makes pipe fds non-blocking, and io_uring answers -EAGAIN to a
# READ or WRITE on an O_NONBLOCK file instead of waiting.  So each transfer
# is a linked pair: POLL_ADD then the READ/WRITE, which runs only once the
# poll reported readiness.  The poll's own CQE (user_data 0) is ignored; it
# must not carry IOSQE_CQE_SKIP_SUCCESS: on a failed link head that flag
# makes the kernel skip the CQEs of the rest of the chain too, and the READ's
# -ECANCELED would never arrive.

cdef Py_ssize_t PIPE_MAX_READ = 256 * 1024

# The moves of each state (pipes.pxd): a bit per state it may go to
cdef int[3] PIPE_READ_MOVES
PIPE_READ_MOVES[PIPE_READING] = (1 << PIPE_PAUSED) | (1 << PIPE_READ_CLOSED)
PIPE_READ_MOVES[PIPE_PAUSED] = (1 << PIPE_READING) | (1 << PIPE_READ_CLOSED)
PIPE_READ_MOVES[PIPE_READ_CLOSED] = 1 << PIPE_READ_CLOSED
cdef int[3] PIPE_WRITE_MOVES
PIPE_WRITE_MOVES[PIPE_WRITABLE] = (1 << PIPE_DRAINING) | (1 << PIPE_WRITE_CLOSED)
PIPE_WRITE_MOVES[PIPE_DRAINING] = 1 << PIPE_WRITE_CLOSED
PIPE_WRITE_MOVES[PIPE_WRITE_CLOSED] = 1 << PIPE_WRITE_CLOSED


@cython.final
cdef class PipeIO(Operation):

    cdef int arm(self) except -1:
        cdef io_uring_sqe *poll_sqe
        cdef io_uring_sqe *sqe
        cdef int fd = self.transport.fd
        poll_sqe = self.loop.ring.sqe()        # (user_data 0: its completion is skipped)
        ul_prep_poll_add(poll_sqe, fd, POLLOUT if self.writing else POLLIN)
        ul_sqe_set_flags(poll_sqe, IOSQE_IO_LINK)
        sqe = self.loop.sqe_for(self)
        if self.writing:
            ul_prep_write(sqe, fd, PyBytes_AS_STRING(self.buf) + self.offset,
                          <size_t>(len(self.buf) - self.offset), <uint64_t>-1)
        else:
            ul_prep_read(sqe, fd, PyBytes_AS_STRING(self.buf),
                         <size_t>PIPE_MAX_READ, <uint64_t>-1)
        return 0

    cdef object owner(self):
        return self.transport

    cdef int complete(self, int32_t res, uint32_t flags) except -1:
        if self.writing:
            return (<WritePipeTransport>self.transport).write_completed(res)
        return (<ReadPipeTransport>self.transport).read_completed(res)


@cython.final
cdef class HangupWatch(Operation):
    """A write pipe's POLL_ADD for POLLIN: the reading end went away."""
    cdef WritePipeTransport transport

    cdef int arm(self) except -1:
        ul_prep_poll_add(self.loop.sqe_for(self), self.transport.fd, POLLIN)
        return 0

    cdef object owner(self):
        return self.transport

    cdef int complete(self, int32_t res, uint32_t flags) except -1:
        self.transport.op_finished()
        if res >= 0 and self.transport.write_state == PIPE_WRITABLE:
            self.transport.hangup()
        return 0


cdef int check_pipe_fd(int fd) except -1:
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)):
        raise ValueError("Pipe transport is for pipes/sockets only.")
    return 0


cdef int pipe_data_received(ReadPipeTransport tr, object data) except -1:
    """data_received() of a read pipe.  What it raises goes to the
    exception handler and the pipe reads on, as on the selector loop,
    whose _UnixReadPipeTransport._read_ready() calls it outside its try
    block (SystemExit and KeyboardInterrupt go on).  It was the pipe's
    fatal error until 2026-12-04: the pipe closed, and its writer got
    EPIPE."""
    if ul_mc_method2_status(tr.protocol, 'data_received', data) != 0:
        report_callback_error(tr, raised_exception(), 'data_received')
    return 0


cdef class ReadPipeTransport(BaseTransport):

    max_size = 256 * 1024       # as the stdlib's transports (read size)

    @property
    def __class__(self):
        return AsyncioReadPipeTransport

    cdef int set_read_state(self, int state) except -1:
        """The one place the read state changes; the debug build stops the
        process on a move PIPE_READ_MOVES does not have."""
        check_move(PIPE_READ_MOVES[self.read_state], state,
                   b'uringloop: a pipe transport moved between read '
                   b'states its table does not join')
        self.read_state = state
        return 0

    cdef int start_reading(self) except -1:
        """Arm the READ when reading and none is in flight (a cancelled
        one still is, until its completion)."""
        if self.read_op.life != OP_IDLE or self.read_state != PIPE_READING:
            return 0
        self.read_op.arm()
        self.op_started()
        return 0

    def _start_reading_cb(self):
        self.start_reading()

    cdef int read_completed(self, int32_t res) except -1:
        self.op_finished()
        if self.read_state == PIPE_READ_CLOSED:
            return 0
        if res > 0:
            try:
                data = PyBytes_FromStringAndSize(PyBytes_AS_STRING(self.read_op.buf), res)
            except MemoryError as exc:
                # read, and not to be handed over: the stream has a hole
                self.fatal_error(exc, 'Fatal read error on pipe transport')
                return 0
            try:
                pipe_data_received(self, data)
            finally:
                # armed again whatever data_received() raised (a
                # KeyboardInterrupt too): the selector loop's reader stays
                # registered
                self.start_reading()
            return 0
        elif res == 0:
            if self.loop._debug:
                logger.info("%r was closed by peer", self)
            self.closing = True
            self.set_read_state(PIPE_READ_CLOSED)
            self.loop.call_soon(self.protocol.eof_received)
            self.loop.soon(call_connection_lost, (self, None))
            return 0
        elif res == -ECANCELED or res == -EAGAIN:
            pass
        else:
            self.fatal_error(convert_error(res), 'Fatal read error on pipe transport')
            return 0
        self.start_reading()
        return 0

    cdef int enter_closed(self) except -1:
        self.set_read_state(PIPE_READ_CLOSED)
        return 0

    cdef int stop_io(self) except -1:
        """close(), abort(), a fatal error: no more reads."""
        self.enter_closed()
        return self.cancel_read()

    cdef int cancel_read(self) except -1:
        if self.read_op.life != OP_IDLE:
            self.loop.cancel_fd(self.fd)   # the READ waits behind a POLL_ADD
        return 0

    cdef int release_ops(self) except -1:
        self.read_op.transport = None
        return 0

    cdef int fatal_error(self, object exc, str message) except -1:
        if isinstance(exc, OSError) and exc.errno == _errno.EIO:
            if self.loop._debug:
                logger.debug("%r: %s", self, message, exc_info=True)
            self.force_close(exc)
            return 0
        return BaseTransport.fatal_error(self, exc, message)

    def is_reading(self):
        return self.read_state == PIPE_READING

    def pause_reading(self):
        if not self.is_reading():
            return
        self.set_read_state(PIPE_PAUSED)
        self.cancel_read()

    def resume_reading(self):
        if self.read_state != PIPE_PAUSED:
            return
        self.set_read_state(PIPE_READING)
        self.start_reading()

    def __repr__(self):
        return f'<ReadPipeTransport fd={self.fd} {"closing" if self.closing else "open"}>'


cdef class WritePipeTransport(BaseTransport):

    @property
    def __class__(self):
        return AsyncioWritePipeTransport

    # asyncio's _UnixWritePipeTransport is an asyncio.Transport: these are
    # its answers (see DatagramTransport on why not a __getattr__)
    def is_reading(self):
        raise NotImplementedError

    def pause_reading(self):
        raise NotImplementedError

    def resume_reading(self):
        raise NotImplementedError

    def writelines(self, list_of_data):
        self.write(b''.join(list_of_data))

    cdef int release_ops(self) except -1:
        self.write_op.transport = None
        (<HangupWatch>self.hangup_op).transport = None
        return 0

    cdef int enter_closed(self) except -1:
        self.set_write_state(PIPE_WRITE_CLOSED)
        return 0

    cdef int set_write_state(self, int state) except -1:
        """The one place the write state changes; the debug build stops
        the process on a move PIPE_WRITE_MOVES does not have."""
        check_move(PIPE_WRITE_MOVES[self.write_state], state,
                   b'uringloop: a pipe transport moved between write '
                   b'states its table does not join')
        self.write_state = state
        return 0

    def _watch_hangup(self):
        if self.write_state != PIPE_WRITABLE or self.hangup_op.life != OP_IDLE:
            return
        (<HangupWatch>self.hangup_op).arm()
        self.op_started()

    cdef int hangup(self) except -1:
        # The reading end went away.
        if self.loop._debug:
            logger.info("%r was closed by peer", self)
        self.force_close(BrokenPipeError() if self.write_queue else None)
        return 0

    def write(self, data):
        """Queue data for the pipe. Raises TypeError for non-bytes data."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f'data argument must be a bytes-like object, '
                            f'not {type(data).__name__!r}')
        data = bytes(data)
        if not data:
            return
        if self.conn_lost or self.write_state != PIPE_WRITABLE:
            if self.conn_lost >= constants.LOG_THRESHOLD_FOR_CONNLOST_WRITES:
                logger.warning('pipe closed by peer or '
                               'os.write(pipe, data) raised exception.')
            self.conn_lost += 1
            return
        if not self.write_queue:
            # As the stdlib does: write at once what the pipe takes, so a
            # reader on the other end sees it without another iteration.
            try:
                n = os.write(self.fd, data)
            except (BlockingIOError, InterruptedError):
                n = 0
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                # (fatal_error() counts the connection lost, as the stdlib's
                # count ends at one; counted first, it found the transport
                # lost already and closed nothing)
                self.fatal_error(exc, 'Fatal write error on pipe transport')
                return
            if n == len(data):
                return
            data = data[n:]
        self.write_queue.append(data)
        self.write_buffer_size += len(data)
        if self.write_op.life == OP_IDLE:
            self.submit_write()
        self.maybe_pause_protocol()

    cdef int submit_write(self) except -1:
        self.write_op.buf = self.write_queue[0]
        self.write_op.offset = 0
        self.write_op.arm()
        self.op_started()
        return 0

    cdef int write_completed(self, int32_t res) except -1:
        cdef PipeIO op = self.write_op
        self.op_finished()
        if not self.write_queue:
            return 0        # aborted
        if res == -EAGAIN:
            op.arm()
            self.op_started()
            return 0
        if res < 0:
            if res != -ECANCELED:
                self.write_queue.clear()
                self.write_buffer_size = 0
                self.fatal_error(convert_error(res), 'Fatal write error on pipe transport')
            return 0
        self.write_buffer_size -= res
        op.offset += res
        if op.offset < len(op.buf):
            op.arm()
            self.op_started()
            return 0
        self.write_queue.popleft()
        op.buf = None
        if self.write_queue:
            self.submit_write()
        elif self.write_state == PIPE_DRAINING:
            self.stop_io()
            self.loop.soon(call_connection_lost, (self, None))
        self.maybe_resume_protocol()
        return 0

    cdef int stop_io(self) except -1:
        """Drained after write_eof(), or abort(), a fatal error, the
        reader gone: nothing more is written."""
        self.enter_closed()
        if self.write_queue:
            self.write_queue.clear()
            self.write_buffer_size = 0
        if self.hangup_op.life != OP_IDLE or self.write_op.life != OP_IDLE:
            self.loop.cancel_fd(self.fd)   # the WRITE waits behind a POLL_ADD
        return 0

    def can_write_eof(self):
        return True

    def write_eof(self):
        """Close the pipe once the queued data is written."""
        if self.closing or self.closed_with_loop():
            return
        self.closing = True
        self.set_write_state(PIPE_DRAINING)
        if not self.write_queue:
            self.stop_io()
            self.loop.soon(call_connection_lost, (self, None))

    def close(self):
        if self.sock is not None and not self.closing:
            self.write_eof()

    def __repr__(self):
        return f'<WritePipeTransport fd={self.fd} {"closing" if self.closing else "open"}>'


cdef BaseTransport new_pipe_transport(RingLoop loop, object pipe, object protocol,
                                      object waiter, object extra, bint writing):
    cdef BaseTransport tr
    cdef PipeIO op
    cdef HangupWatch watch
    fd = pipe.fileno()
    check_pipe_fd(fd)
    os.set_blocking(fd, False)
    if writing:
        tr = make_transport(WritePipeTransport)
        (<WritePipeTransport>tr).write_queue = collections.deque()
        tr.set_limits(None, None)
    else:
        tr = make_transport(ReadPipeTransport)
    tr.count_in(loop)
    tr.sock = pipe
    tr.fd = fd
    tr.extra = {} if extra is None else dict(extra)
    tr.extra['pipe'] = pipe
    tr.protocol = protocol
    tr.protocol_connected = True
    tr.context = PyContext_CopyCurrent()
    op = PipeIO.__new__(PipeIO)
    op.loop = loop
    op.context = tr.context
    op.transport = tr
    op.writing = writing
    if writing:
        (<WritePipeTransport>tr).write_op = op
        watch = HangupWatch.__new__(HangupWatch)
        watch.loop = loop
        watch.context = tr.context
        watch.transport = <WritePipeTransport>tr
        (<WritePipeTransport>tr).hangup_op = watch
    else:
        op.buf = PyBytes_FromStringAndSize(NULL, PIPE_MAX_READ)
        (<ReadPipeTransport>tr).read_op = op
    tr.register()
    loop.call_soon(protocol.connection_made, tr)
    if writing:
        mode = os.fstat(fd).st_mode
        if stat.S_ISSOCK(mode) or stat.S_ISFIFO(mode):
            loop.call_soon(tr._watch_hangup)
    else:
        loop.call_soon(tr._start_reading_cb)
    if waiter is not None:
        loop.call_soon(futures._set_result_unless_cancelled, waiter, None)
    return tr
