# Signal handling for Loop: signal.set_wakeup_fd() writes each signal's
# number to a socket on which the loop keeps a RECV (SignalWakeRecv), and
# the handlers run as callbacks, as on the selector loop.  Included by
# core.pyx; Loop takes the methods below as they are.


def _sighandler_noop(signum, frame):
    """Installed for handled signals: the C-level handler has already written
    the signal number to the wakeup socket, which the loop reads."""


@cython.final
cdef class SignalWakeRecv(Operation):
    """The standing RECV on the signal wakeup socket (signal.set_wakeup_fd
    writes one byte per signal)."""

    cdef int arm(self) except -1:
        cdef io_uring_sqe *sqe = self.loop.sqe_for(self)
        ul_prep_recv(sqe, self.fd, self.buf, sizeof(self.buf), 0)
        return 0

    cdef int complete(self, int32_t res, uint32_t flags) except -1:
        cdef int i
        if res == -ECANCELED or self.fd < 0:
            return 0
        if res > 0:
            for i in range(res):
                self.loop._handle_signal(<unsigned char>self.buf[i])
        if res != 0 and self.loop.ring.open and not self.loop.draining:
            self.arm()
        return 0


def _check_signal(self, sig):
    if not isinstance(sig, int):
        raise TypeError(f'sig must be an int, not {sig!r}')
    if sig not in signal.valid_signals():
        raise ValueError(f'invalid signal number {sig}')


def _ensure_signal_socket(self):
    cdef SignalWakeRecv op
    if self._signal_ssock is not None:
        return
    ssock, csock = socket.socketpair()
    ssock.setblocking(False)
    csock.setblocking(False)
    self._signal_ssock, self._signal_csock = ssock, csock
    op = SignalWakeRecv.__new__(SignalWakeRecv)
    op.loop = self
    op.fd = ssock.fileno()
    op.arm()
    self._signal_op = op


# the stdlib's own test of a coroutine function: 3.14 deprecates the public
# asyncio.iscoroutinefunction() and calls its private twin, which warns not
cdef object is_coroutine_function = getattr(
    asyncio.coroutines, '_iscoroutinefunction', asyncio.coroutines.iscoroutinefunction)


def add_signal_handler(self, sig, callback, *args):
    """Call callback(*args) from the loop when signal sig arrives.

    Raises RuntimeError when sig cannot be caught or the loop does not
    run in the main thread, ValueError for an invalid signal, TypeError
    for a coroutine callback."""
    if asyncio.iscoroutine(callback) or is_coroutine_function(callback):
        raise TypeError("coroutines cannot be used with add_signal_handler()")
    self._check_signal(sig)
    self._check_closed()
    self._ensure_signal_socket()
    try:
        signal.set_wakeup_fd(self._signal_csock.fileno())
    except (ValueError, OSError) as exc:
        raise RuntimeError(str(exc))
    handle = events.Handle(callback, args, self, None)
    self._signal_handlers[sig] = handle
    try:
        signal.signal(sig, _sighandler_noop)
        signal.siginterrupt(sig, False)
    except OSError as exc:
        del self._signal_handlers[sig]
        if not self._signal_handlers:
            try:
                signal.set_wakeup_fd(-1)
            except (ValueError, OSError) as nexc:
                logger.info('set_wakeup_fd(-1) failed: %s', nexc)
        if exc.errno == _errno.EINVAL:
            raise RuntimeError(f'sig {sig:d} cannot be caught')
        raise


def _handle_signal(self, sig):
    handle = self._signal_handlers.get(sig)
    if handle is None:
        return
    if handle._cancelled:
        self.remove_signal_handler(sig)
    else:
        self._add_callback_signalsafe(handle)


def remove_signal_handler(self, sig):
    """Remove the handler for sig; True if there was one."""
    self._check_signal(sig)
    try:
        del self._signal_handlers[sig]
    except KeyError:
        return False
    handler = signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL
    try:
        signal.signal(sig, handler)
    except OSError as exc:
        if exc.errno == _errno.EINVAL:
            raise RuntimeError(f'sig {sig:d} cannot be caught')
        raise
    if not self._signal_handlers:
        try:
            signal.set_wakeup_fd(-1)
        except (ValueError, OSError) as exc:
            logger.info('set_wakeup_fd(-1) failed: %s', exc)
    return True
