# sendfile for Loop: a transport's (loop.sendfile) and a socket's
# (loop.sock_sendfile), reading the file through the ring.  Included by
# core.pyx; Loop takes the methods below as they are.


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


async def _sock_sendfile_native(self, sock, file, offset, count):
    # READ from the file and SEND to the socket, both through the ring,
    # through one reused buffer: no thread, no blocking call.
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
    if remaining == 0:
        return 0
    buf = bytearray(min(remaining, 256 * 1024))
    view = memoryview(buf)
    total = 0
    try:
        while remaining > 0:
            n = await file_readinto(self, fileno, view[:min(remaining, len(buf))],
                                   offset + total)
            if n == 0:
                break
            progress = [0]
            try:
                await sendall_counted(self, sock, view[:n], progress)
            finally:
                total += progress[0]
            remaining -= n
        return total
    finally:
        view.release()
        if total > 0:
            file.seek(offset + total)


import io
import signal
import stat


_features = None
