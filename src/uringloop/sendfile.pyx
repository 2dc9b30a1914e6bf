# sendfile for Loop: a transport's (loop.sendfile) and a socket's
# (loop.sock_sendfile), reading the file through the ring.  Included by
# core.pyx; Loop takes the methods below as they are.


# Where the file's position is left.  Up to 3.13 the stdlib moves it to
# offset + sent only when something was sent; from 3.14 its native path
# always leaves it there (the file not empty), and its fallback seeks to
# offset before reading.  The stdlib's own helper is asked which it does.
cdef bint STDLIB_SENDFILE_ALWAYS_SEEKS = (
    unix_events._UnixSelectorEventLoop
    ._sock_sendfile_update_filepos.__code__.co_argcount == 3)


async def _sendfile_native(self, transp, file, offset, count):
    # loop.sendfile(transport, ...) on a plain stream transport: wait
    # until its queued writes are sent, then send the file on its socket
    # through the ring (sock_sendfile); writes meanwhile raise.
    if type(transp) is not StreamTransport:
        raise exceptions.SendfileNotAvailableError(
            "sendfile is not supported for this transport")
    resume_reading = transp.is_reading()
    transp.pause_reading()
    await transp._make_empty_waiter()
    try:
        return await self.sock_sendfile(transp._sock, file, offset, count,
                                        fallback=False)
    finally:
        transp._reset_empty_waiter()
        if resume_reading:
            transp.resume_reading()


async def _sock_sendfile_native(RingLoop self, sock, file, offset, count):
    # The file's pages go to the socket without passing through user space.
    # By default with sendfile(2) on the loop's thread whenever the socket
    # has room (the stdlib's way), waiting for room with a POLL_ADD on the
    # ring; with URINGLOOP_SENDFILE=splice, by SPLICE on the ring, file to
    # pipe to socket, which never blocks the loop on a file that is not in
    # the page cache but costs more CPU per byte (two ring round trips per
    # pipe's worth, each in an io-wq worker: docs/files.md has the
    # measurements).  A file the kernel cannot splice from falls back to
    # READ and SEND through one reused buffer.
    try:
        fileno = file.fileno()
    except (AttributeError, io.UnsupportedOperation):
        raise exceptions.SendfileNotAvailableError("not a regular file")
    try:
        st = os.fstat(fileno)
    except OSError:
        raise exceptions.SendfileNotAvailableError("not a regular file")
    if not stat.S_ISREG(st.st_mode):
        raise exceptions.SendfileNotAvailableError("not a regular file")
    remaining = count if count else max(st.st_size - offset, 0)
    if not count and not st.st_size:
        return 0  # an empty file: the position stays where it was
    progress = [0]
    try:
        if remaining == 0:
            return 0
        try:
            if self.sendfile_splice:
                await sendfile_spliced(self, sock, fileno, offset, remaining, progress)
            else:
                await sendfile_direct(self, sock, fileno, offset, remaining, progress)
        except SpliceRefused:
            await sendfile_copied(self, sock, fileno, offset, remaining, progress)
        return progress[0]
    finally:
        if progress[0] > 0 or STDLIB_SENDFILE_ALWAYS_SEEKS:
            file.seek(offset + progress[0])


cdef extern from "<fcntl.h>":
    int F_SETPIPE_SZ, F_GETPIPE_SZ


class SpliceRefused(Exception):
    """The kernel cannot splice from this file (before any byte was sent:
    sendfile(2) splices too)."""


# A pipe holds 64 KiB by default; a larger one moves more per request (the
# kernel allows an unprivileged process up to fs.pipe-max-size, 1 MiB).
SPLICE_PIPE_SIZE = 1 << 20


async def sendfile_spliced(RingLoop self, sock, int fileno, int64_t offset,
                           int64_t remaining, list progress):
    cdef int sock_fd = sock.fileno()
    cdef int64_t chunk, moved, n, m
    r, w = os.pipe2(os.O_CLOEXEC)
    requests = FileRequests()
    try:
        chunk = fcntl(w, F_SETPIPE_SZ, <int>SPLICE_PIPE_SIZE)
        if chunk <= 0:
            chunk = fcntl(w, F_GETPIPE_SZ)
        if chunk <= 0:
            chunk = 65536
        while remaining > 0:
            try:
                n = await file_splice(self, fileno, offset + progress[0], w, -1,
                                      min(remaining, chunk), requests)
            except OSError as exc:
                if exc.errno == EINVAL and progress[0] == 0:
                    raise SpliceRefused() from None
                raise
            if n == 0:
                break                   # the file ended sooner
            moved = 0
            while moved < n:
                try:
                    m = await file_splice(self, r, -1, sock_fd, -1, n - moved, requests)
                except BlockingIOError:
                    await fd_ready(self, sock_fd, POLLOUT)
                    continue
                moved += m
                progress[0] += m
                self.sendfile_zero_copy += m
            remaining -= n
    finally:
        # (a request cancelled with its caller may still name the pipe)
        close_when_idle(requests, r)
        close_when_idle(requests, w)


async def sendfile_direct(RingLoop self, sock, int fileno, int64_t offset,
                          int64_t remaining, list progress):
    cdef int sock_fd = sock.fileno()
    cdef int64_t n
    while remaining > 0:
        try:
            n = os.sendfile(sock_fd, fileno, offset + progress[0], min(remaining, 1 << 30))
        except BlockingIOError:
            await fd_ready(self, sock_fd, POLLOUT)
            continue
        except OSError as exc:
            if exc.errno == EINVAL and progress[0] == 0:
                raise SpliceRefused() from None
            raise
        if n == 0:
            break
        progress[0] += n
        remaining -= n
        self.sendfile_zero_copy += n


async def sendfile_copied(RingLoop self, sock, int fileno, int64_t offset,
                          int64_t remaining, list progress):
    buf = bytearray(min(remaining, 256 * 1024))
    view = memoryview(buf)
    try:
        while remaining > 0:
            n = await file_readinto(self, fileno, view[:min(remaining, len(buf))],
                                    offset + progress[0])
            if n == 0:
                break
            sent = [0]
            try:
                await sendall_counted(self, sock, view[:n], sent)
            finally:
                progress[0] += sent[0]
                self.sendfile_copied += sent[0]
            remaining -= n
    finally:
        view.release()


import io
import signal
import stat


_features = None
