# Child processes: the loop's subprocess transports learn of a child's exit
# from a pidfd polled through the ring, so no child watcher (no SIGCHLD
# handler, no thread) is involved.  Included by core.pyx; ChildWatch is
# declared in core.pxd.


@cython.final
cdef class ChildWatch(Operation):
    """A POLL_ADD on a pidfd: readable once the child has exited."""

    cdef int arm(self) except -1:
        cdef io_uring_sqe *sqe = self.loop.sqe_for(self)
        ul_prep_poll_add(sqe, self.pidfd, POLLIN)
        return 0

    cdef int complete(self, int32_t res, uint32_t flags) except -1:
        if res == -ECANCELED or res == -EAGAIN:
            if not self.loop.draining:
                self.arm()
            return 0
        os.close(self.pidfd)
        self.pidfd = -1
        try:
            _, status = os.waitpid(self.pid, 0)
            returncode = os.waitstatus_to_exitcode(status)
        except ChildProcessError:
            # someone else (a child watcher of another loop) reaped it
            logger.warning("Unknown child process pid %d, will report "
                           "returncode 255", self.pid)
            returncode = 255
        transp = self.transp
        self.transp = None
        if transp._returncode is None:
            transp._process_exited(returncode)
        return 0

    def __dealloc__(self):
        if self.pidfd >= 0:
            close(self.pidfd)


# ---- the loop's methods (RingLoop takes them as they are) ---------------

async def _make_subprocess_transport(RingLoop self, protocol, args, shell, stdin,
                                     stdout, stderr, bufsize, extra=None,
                                     **kwargs):
    # The process is started by the stdlib's Unix subprocess transport;
    # its exit is learnt from a pidfd polled through the ring, so no
    # child watcher (and no SIGCHLD handler or thread) is involved.
    waiter = self.create_future()
    transp = unix_events._UnixSubprocessTransport(
        self, protocol, args, shell, stdin, stdout, stderr, bufsize,
        waiter=waiter, extra=extra, **kwargs)
    self._watch_child(transp)
    try:
        await waiter
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException:
        transp.close()
        await transp._wait()
        raise
    return transp


def _watch_child(RingLoop self, transp):
    cdef ChildWatch watch = ChildWatch.__new__(ChildWatch)
    watch.loop = self
    watch.context = PyContext_CopyCurrent()
    watch.pid = transp.get_pid()
    watch.transp = transp
    watch.pidfd = os.pidfd_open(watch.pid)
    watch.arm()
