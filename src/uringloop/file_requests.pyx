# Files on the ring: OPENAT, READ, WRITE, FSYNC, STATX, FTRUNCATE, CLOSE and
# SPLICE as Operations.  Included by core.pyx; declared in file_requests.pxd.  The
# async file objects users hold (uringloop.open) are in files.py, which
# calls the functions at the end of this file; docs/files.md is the whole
# picture.
#
# Why a file request is made the way it is:
#   - A read of a page-cached file completes inside the io_uring_enter that
#     submits it (the kernel tries it inline, non-blocking, first; only a
#     read that has to wait for the disk goes to the ring's own workers).
#     So a read costs one enter, shared by every request of the iteration,
#     and no thread hop: the reason files are on the ring at all.
#   - Each request names its file by number (docs/design.md, fact 2): the
#     file's FileRequests counts the requests the kernel holds, and the fd
#     is closed only at zero -- by close(), which waits for it, or, for a
#     file collected with requests still out, by the count itself at its
#     last final CQE.
#   - Reads and writes carry their offset (pread/pwrite); the position of a
#     seekable file lives in the file object (files.py), so that a read
#     cancelled at any await moves nothing.  Only a file that cannot seek
#     (a pipe, a terminal) reads and writes at the file's own position
#     (offset -1); a read of one that completes for a waiter who gave up
#     hands its bytes to `orphan`, for the file's next read.
#   - read() returns the bytes object the kernel filled, shrunk to the
#     count: no copy.


@cython.final
cdef class FileRequests:
    """The requests of one file the kernel may still be working on."""

    def __cinit__(self):
        self.orphan_fds = []

    cdef int started(self) except -1:
        self.in_flight += 1
        return 0

    cdef int ended(self) except -1:
        self.in_flight -= 1
        if self.in_flight == 0:
            while self.orphan_fds:
                os.close(self.orphan_fds.pop())
            if self.idle_waiter is not None:
                waiter, self.idle_waiter = self.idle_waiter, None
                if not waiter.done():
                    waiter.set_result(None)
        return 0

    def _started(self):
        """A request of this file made elsewhere (a thread's) began."""
        self.started()

    def _ended(self):
        if self.in_flight <= 0:
            raise RuntimeError("no request of this file is in flight")
        self.ended()

    def wait_idle(self, loop):
        """A future resolved when the kernel holds none of these requests
        (at once when it holds none now)."""
        if self.in_flight == 0:
            fut = loop.create_future()
            fut.set_result(None)
            return fut
        if self.idle_waiter is None or self.idle_waiter.done():
            self.idle_waiter = loop.create_future()
        return self.idle_waiter



cdef class FileRequest(Operation):

    cdef int arm(self) except -1:
        return 0

    cdef int ended(self) except -1:
        if self.requests is not None:
            self.requests.ended()
        return 0

    cdef int finish(self, int32_t res) except -1:
        """The final CQE: the waiter gets the count, or the error."""
        if res < 0:
            return self.fail(res)
        if not self.waiter_gone():
            self.future.set_result(res)
        return 0

    cdef int complete(self, int32_t res, uint32_t flags) except -1:
        try:
            self.finish(res)
        finally:
            self.release()
            self.ended()
        return 0

    cdef int drained(self, int32_t res, uint32_t flags) except -1:
        self.release()
        self.ended()
        return 0


@cython.final
cdef class FileOpen(FileRequest):

    cdef int arm(self) except -1:
        ul_prep_openat(self.loop.sqe_for(self), self.fd, self.path, self.flags,
                       self.mode)
        return 0

    cdef int finish(self, int32_t res) except -1:
        if res >= 0 and self.waiter_gone():
            os.close(res)            # nobody will own it
            return 0
        return FileRequest.finish(self, res)

    cdef int drained(self, int32_t res, uint32_t flags) except -1:
        if res >= 0:
            os.close(res)
        return FileRequest.drained(self, res, flags)


cdef extern from "Python.h":
    # (raw pointers, not Cython's objects: the bytes a READ fills is ours
    # alone until the completion hands it on, so it can be resized)
    PyObject *new_bytes "PyBytes_FromStringAndSize"(const char *s, Py_ssize_t n)
    int resize_bytes "_PyBytes_Resize"(PyObject **b, Py_ssize_t n)
    char *bytes_data "PyBytes_AS_STRING"(PyObject *b)
    void drop_ref "Py_XDECREF"(PyObject *o)


@cython.final
cdef class FileRead(FileRequest):

    def __dealloc__(self):
        drop_ref(self.data)
        self.data = NULL

    cdef int arm(self) except -1:
        ul_prep_read(self.loop.sqe_for(self), self.fd, bytes_data(self.data),
                     <size_t>self.size, <uint64_t>self.offset)
        return 0

    cdef int release(self) except -1:
        drop_ref(self.data)
        self.data = NULL
        return 0

    cdef int finish(self, int32_t res) except -1:
        cdef object result
        if res < 0:                  # (-EAGAIN, O_NONBLOCK: files.py polls)
            return self.fail(res)
        if res != self.size:
            # (ours alone: a new object nobody else has seen; size > 0)
            if resize_bytes(&self.data, res) < 0:
                self.data = NULL
                raise MemoryError()
        result = <object>self.data
        if not self.waiter_gone():
            self.future.set_result(result)
        elif self.orphan is not None and res > 0:
            self.orphan(result)
        return 0


@cython.final
cdef class FileTransfer(FileRequest):
    """READ into, or WRITE from, a caller's buffer, held until the final
    CQE."""

    def __dealloc__(self):
        if self.has_view:
            self.has_view = False
            drop_view(&self.view)

    cdef int release_view(self) except -1:
        if self.has_view:
            self.has_view = False
            drop_view(&self.view)
        return 0

    cdef int release(self) except -1:
        return self.release_view()

    cdef int finish(self, int32_t res) except -1:
        # a write's count goes to account() before anything else: the
        # caller's buffer is let go first (it may resize it), and the
        # file's FileRequests drops to zero only after (complete())
        self.release_view()
        if self.account is not None and res >= 0:
            account, self.account = self.account, None
            account(res)
        return FileRequest.finish(self, res)

    cdef int arm(self) except -1:
        cdef io_uring_sqe *sqe = self.loop.sqe_for(self)
        if self.writes:
            ul_prep_write(sqe, self.fd, self.view.buf, <size_t>self.view.len,
                          <uint64_t>self.offset)
        else:
            ul_prep_read(sqe, self.fd, self.view.buf, <size_t>self.view.len,
                         <uint64_t>self.offset)
        return 0


@cython.final
cdef class FileSync(FileRequest):

    cdef int arm(self) except -1:
        ul_prep_fsync(self.loop.sqe_for(self), self.fd, self.flags)
        return 0


@cython.final
cdef class FileTruncate(FileRequest):

    cdef int arm(self) except -1:
        ul_prep_ftruncate(self.loop.sqe_for(self), self.fd, <uint64_t>self.offset)
        return 0


@cython.final
cdef class FileClose(FileRequest):

    cdef int arm(self) except -1:
        ul_prep_close(self.loop.sqe_for(self), self.fd)
        return 0


@cython.final
cdef class FileStat(FileRequest):

    cdef int arm(self) except -1:
        ul_prep_statx(self.loop.sqe_for(self), self.fd, self.path, self.flags,
                      STATX_BASIC_STATS, &self.buf)
        return 0

    cdef int finish(self, int32_t res) except -1:
        if res < 0:
            return self.fail(res)
        if not self.waiter_gone():
            self.future.set_result(stat_result_of(&self.buf))
        return 0


cdef object stat_result_of(statx *s):
    """os.stat_result with the fields os.stat() fills on Linux."""
    cdef object ns = 1000000000
    return _stat_result(
        (s.stx_mode, s.stx_ino, makedev(s.stx_dev_major, s.stx_dev_minor),
         s.stx_nlink, s.stx_uid, s.stx_gid, s.stx_size,
         s.stx_atime.tv_sec, s.stx_mtime.tv_sec, s.stx_ctime.tv_sec),
        {'st_atime': s.stx_atime.tv_sec + s.stx_atime.tv_nsec * 1e-9,
         'st_mtime': s.stx_mtime.tv_sec + s.stx_mtime.tv_nsec * 1e-9,
         'st_ctime': s.stx_ctime.tv_sec + s.stx_ctime.tv_nsec * 1e-9,
         'st_atime_ns': s.stx_atime.tv_sec * ns + s.stx_atime.tv_nsec,
         'st_mtime_ns': s.stx_mtime.tv_sec * ns + s.stx_mtime.tv_nsec,
         'st_ctime_ns': s.stx_ctime.tv_sec * ns + s.stx_ctime.tv_nsec,
         'st_blksize': s.stx_blksize, 'st_blocks': s.stx_blocks,
         'st_rdev': makedev(s.stx_rdev_major, s.stx_rdev_minor)})


@cython.final
cdef class Splice(FileRequest):
    """SPLICE up to size bytes from fd (at offset, or its position when -1)
    to fd_out (likewise); one of them is a pipe."""

    cdef int arm(self) except -1:
        ul_prep_splice(self.loop.sqe_for(self), self.fd, self.offset,
                       self.fd_out, self.offset_out, self.size, SPLICE_F_MOVE)
        return 0


# ---- what files.py calls ----------------------------------------------------
# Each queues one request on the loop's ring and returns the future it
# resolves; cancelling the future cancels the request (which keeps what
# the kernel may touch until its final CQE).  `requests` is the file's
# FileRequests (None for a request of no file).

cdef object start_file(RingLoop loop, FileRequest op, int fd, int64_t offset,
                       FileRequests requests, bint cancellable=True):
    fut = new_future(loop)
    op.loop = loop
    op.fd = fd
    op.offset = offset
    op.arm()
    op.requests = requests
    if requests is not None:
        requests.started()
    if cancellable:
        op.watch_future(fut)
    else:
        op.future = fut          # a cancelled waiter leaves it to the kernel
    return fut


cdef bytes fs_path(object path):
    cdef bytes raw = os.fsencode(path)
    if b'\0' in raw:
        raise ValueError("embedded null byte")
    return raw


def close_when_idle(FileRequests requests, int fd):
    """Close fd now, or at the final CQE of the last of `requests` that may
    name it (a file collected with requests in flight)."""
    if requests.in_flight == 0:
        os.close(fd)
    else:
        requests.orphan_fds.append(fd)


def file_open(RingLoop loop, path, int flags, unsigned mode=0o666, int dir_fd=AT_FDCWD):
    """openat(dir_fd, path, flags, mode): a future of the new fd."""
    cdef FileOpen op = FileOpen.__new__(FileOpen)
    op.path = fs_path(path)
    op.flags = flags
    op.mode = mode
    return start_file(loop, op, dir_fd, 0, None)


def file_read(RingLoop loop, int fd, Py_ssize_t size, int64_t offset,
              FileRequests requests=None, orphan=None):
    """Up to size bytes (size > 0; at most 0x7ffff000) at offset: a future
    of a new bytes object."""
    cdef FileRead op
    if size <= 0:
        raise ValueError("size must be positive")
    op = FileRead.__new__(FileRead)
    op.size = min(size, <Py_ssize_t>UL_MAX_IO_LEN)
    op.data = new_bytes(NULL, op.size)
    if op.data == NULL:
        raise MemoryError()
    op.orphan = orphan
    return start_file(loop, op, fd, offset, requests)


def file_readinto(RingLoop loop, int fd, buf, int64_t offset,
                  FileRequests requests=None):
    """READ into buf at offset: a future of the count."""
    cdef FileTransfer op = FileTransfer.__new__(FileTransfer)
    try:
        hold_view(buf, &op.view, PyBUF_WRITABLE)
    except BufferError:
        raise TypeError(f"readinto() argument must be read-write bytes-like "
                        f"object, not {type(buf).__name__}") from None
    op.has_view = True
    return start_file(loop, op, fd, offset, requests)


def file_write(RingLoop loop, int fd, data, int64_t offset,
               FileRequests requests=None, account=None):
    """WRITE data at offset: a future of the count written.  With
    `account`, the write is not cancelled with its future: it runs to its
    end, and account(count) is called at its completion, whoever waits."""
    cdef FileTransfer op = FileTransfer.__new__(FileTransfer)
    hold_view(data, &op.view, PyBUF_SIMPLE)
    op.has_view = True
    op.writes = True
    op.account = account
    return start_file(loop, op, fd, offset, requests, account is None)


def file_fsync(RingLoop loop, int fd, bint datasync=False, FileRequests requests=None):
    cdef FileSync op = FileSync.__new__(FileSync)
    op.flags = IORING_FSYNC_DATASYNC if datasync else 0
    return start_file(loop, op, fd, 0, requests)


def file_truncate(RingLoop loop, int fd, int64_t length, FileRequests requests=None):
    cdef FileTruncate op = FileTruncate.__new__(FileTruncate)
    if length < 0:
        raise OSError(EINVAL, os.strerror(EINVAL))
    return start_file(loop, op, fd, length, requests)


def file_close(RingLoop loop, int fd):
    cdef FileClose op = FileClose.__new__(FileClose)
    return start_file(loop, op, fd, 0, None)


def file_stat(RingLoop loop, path, int dir_fd=AT_FDCWD, bint follow_symlinks=True,
              FileRequests requests=None):
    """statx of path (relative to dir_fd), or of the file dir_fd itself when
    path is None: a future of an os.stat_result."""
    cdef FileStat op = FileStat.__new__(FileStat)
    if path is None:
        op.path = b''
        op.flags = AT_EMPTY_PATH
    else:
        op.path = fs_path(path)
        op.flags = 0 if follow_symlinks else AT_SYMLINK_NOFOLLOW
    return start_file(loop, op, dir_fd, 0, requests)


def file_splice(RingLoop loop, int fd_in, int64_t offset_in, int fd_out,
                int64_t offset_out, Py_ssize_t size, FileRequests requests=None):
    """SPLICE: a future of the count moved."""
    cdef Splice op = Splice.__new__(Splice)
    op.fd_out = fd_out
    op.offset_out = offset_out
    op.size = <unsigned>min(size, <Py_ssize_t>UL_MAX_IO_LEN)
    return start_file(loop, op, fd_in, offset_in, requests)


def fd_ready(RingLoop loop, int fd, unsigned mask):
    """A future resolved when fd is ready for mask (a one-shot POLL_ADD)."""
    cdef SocketPoll op = SocketPoll.__new__(SocketPoll)
    op.mask = mask
    return start(loop, op, None, fd)


def ring_supports(RingLoop loop, str name):
    """Whether the loop's kernel has the opcode `name` (OPCODES)."""
    return bool(loop.ops_supported[OPCODES[name]])


_stat_result = os.stat_result
