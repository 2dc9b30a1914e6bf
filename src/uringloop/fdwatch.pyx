# add_reader / add_writer: readiness callbacks on a file descriptor.
# Included by core.pyx.
#
# The selector loops are level-triggered: a reader is called on every
# iteration while its fd stays readable.  A multishot poll is edge-triggered
# (it posts again only on a new wakeup), so each watch uses a one-shot
# POLL_ADD and arms it again after its callback has run: an fd that is still
# readable completes the new poll at once, on the next iteration.


cdef object fileobj_to_fd(object fileobj):
    if isinstance(fileobj, int):
        fd = fileobj
    else:
        try:
            fd = int(fileobj.fileno())
        except (AttributeError, TypeError, ValueError):
            raise ValueError(f"Invalid file object: {fileobj!r}") from None
    if fd < 0:
        raise ValueError(f"Invalid file descriptor: {fd}")
    return fd


cdef object find_watch_fd(dict watches, object fileobj):
    """The fd under which `fileobj` is watched, found by the object itself
    (a socket closed since add_reader() has no fileno() any more; the
    selector searches its keys the same way); ValueError if none."""
    try:
        return fileobj_to_fd(fileobj)
    except ValueError:
        for fd, watch in watches.items():
            if (<FdWatch>watch).fileobj is fileobj:
                return fd
        raise


cdef extern from "<fcntl.h>":
    int fcntl(int fd, int cmd, ...)
    int F_GETFD


cdef int check_fd_open(int fd) except -1:
    # as epoll_ctl() does for the selector: a closed fd is refused at once
    if fcntl(fd, F_GETFD) < 0:
        raise OSError(errno, os.strerror(errno))
    return 0


@cython.final
cdef class FdWatch(Operation):
    cdef int fd
    cdef object fileobj         # what add_reader/add_writer was given
    cdef unsigned mask
    cdef object handle          # the user's asyncio.Handle
    cdef object fire_handle     # queued on readiness; runs _fire
    cdef bint active

    cdef int arm(self) except -1:
        cdef io_uring_sqe *sqe
        if self.life != OP_IDLE or not self.active:
            return 0
        sqe = self.loop.sqe_for(self)
        ul_prep_poll_add(sqe, self.fd, self.mask)
        return 0

    cdef int stop(self) except -1:
        self.active = False
        # fire_handle runs self._fire: the two hold each other.  A stopped
        # watch is never armed again, so let the cycle go now rather than
        # leave it to the garbage collector (the selector loop makes none;
        # tornado's circlerefs tests check for cycle garbage).  A copy
        # already queued in _ready finds the watch inactive.
        self.fire_handle = None
        if self.handle is not None:
            self.handle.cancel()
        if self.life != OP_IDLE:
            self.loop.cancel_op(self)
        return 0

    cdef int complete(self, int32_t res, uint32_t flags) except -1:
        if not self.active:
            return 0
        if res < 0:
            if res == -ECANCELED:
                return 0
            # The fd is gone (closed without remove_reader): as a selector
            # would, stop watching it, and say so.
            self.active = False
            self.loop.call_exception_handler({
                'message': f'fd {self.fd} cannot be watched any more',
                'exception': convert_error(res),
                'handle': self.handle,
            })
            return 0
        ready_append(self.loop._ready, self.fire_handle)
        return 0

    def _fire(self):
        if not self.active:
            return
        handle = self.handle
        if handle._cancelled:
            return
        handle._run()
        self.arm()

    def __repr__(self):
        kind = 'reader' if self.mask & POLLIN else 'writer'
        return f'<FdWatch {kind} fd={self.fd} active={self.active}>'


cdef FdWatch new_fd_watch(RingLoop loop, int fd, unsigned mask):
    cdef FdWatch watch = FdWatch.__new__(FdWatch)
    watch.loop = loop
    watch.fd = fd
    watch.mask = mask
    watch.active = True
    watch.fire_handle = events.Handle(watch._fire, (), loop, None)
    return watch


# ---- the loop's methods (RingLoop takes them as they are) ----------------


cdef object add_watch(RingLoop loop, dict watches, object fileobj, unsigned mask,
                      object callback, tuple args):
    """add_reader() / add_writer(): callback(*args) whenever fd is ready for
    `mask`; the Handle."""
    cdef FdWatch watch
    loop._check_closed()
    fd = fileobj_to_fd(fileobj)
    loop._ensure_fd_no_transport(fd)
    watch = watches.get(fd)
    if watch is None:
        check_fd_open(fd)
    handle = events.Handle(callback, args, loop, None)
    if watch is None:
        watch = new_fd_watch(loop, fd, mask)
        watches[fd] = watch
    elif watch.handle is not None:
        watch.handle.cancel()
    watch.fileobj = fileobj
    watch.handle = handle
    watch.arm()
    return handle


cdef object remove_watch(RingLoop loop, dict watches, object fileobj):
    """remove_reader() / remove_writer(): True if fileobj was watched."""
    cdef FdWatch watch
    if loop.is_closed():
        if not isinstance(fileobj, int):
            try:
                int(fileobj.fileno())
            except (AttributeError, TypeError, ValueError):
                raise ValueError(f"Invalid file object: {fileobj!r}") from None
        return False
    fd = find_watch_fd(watches, fileobj)
    loop._ensure_fd_no_transport(fd)
    watch = watches.pop(fd, None)
    if watch is None:
        return False
    watch.stop()
    return True


def _ensure_fd_no_transport(RingLoop self, fd):
    ref = self._transports.get(fd)
    transport = ref() if ref is not None else None
    if transport is not None and not transport.is_closing():
        raise RuntimeError(
            f'File descriptor {fd!r} is used by transport {transport!r}')


def add_reader(RingLoop self, fd, callback, *args):
    """Call callback(*args) whenever fd is readable (level-triggered)."""
    add_watch(self, self.readers, fd, POLLIN, callback, args)


def remove_reader(RingLoop self, fd):
    """Stop watching fd for reading; True if it was watched."""
    return remove_watch(self, self.readers, fd)


def add_writer(RingLoop self, fd, callback, *args):
    """Call callback(*args) whenever fd is writable (level-triggered)."""
    add_watch(self, self.writers, fd, POLLOUT, callback, args)


def remove_writer(RingLoop self, fd):
    """Stop watching fd for writing; True if it was watched."""
    return remove_watch(self, self.writers, fd)
