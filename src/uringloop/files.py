"""Async files: uringloop.open(), stat(), and the file objects they give.

On a uringloop loop every request -- open, read, write, fsync, stat,
truncate, close -- goes through the loop's ring (file_requests.pyx); a read of a
page-cached file completes inside the loop's next io_uring_enter, with no
thread.  On any other loop (the stdlib's, after a fall-back; uvloop) the
same objects make the same calls through the loop's default executor, as
aiofiles does, so code that uses them runs everywhere.

The objects behave as the builtin open()'s do -- the same arguments, the
same flags for each mode (worked out by the builtin open() itself), the same
buffering, newline and encoding rules, the same exceptions -- with every
method that may touch the file a coroutine.  What differs, and why:

- The position of a seekable file lives in the object, and each request
  carries its offset (pread/pwrite).  A read cancelled at any await moves
  nothing: the next read returns the same bytes.  Bytes a cancelled read of
  a pipe got anyway are kept for the next read.
- A write the kernel has taken is never cancelled: a cancelled write() or
  flush() ends in the background, and its count is accounted when it does
  (the next call on the file waits for it).  So the file and the object
  always agree on what was written.
- One call on a file runs at a time; a second task's call waits its turn
  (the builtin's buffered files take a lock for the same reason).
  pread()/pwrite() carry their own offset and run side by side.

docs/files.md has the whole picture and the measurements.
"""

from __future__ import annotations

import asyncio
import codecs
import collections
import errno
import io
import locale
import os
import stat as _stat
import sys
import warnings
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Generator, Iterable
from typing import TYPE_CHECKING, Any, Generic, Literal, NoReturn, TypeVar, Union, overload

# the extension as uringloop/__init__.py found it, or None where the
# package was installed without it (_pure.py stands in)
from . import _core as core
if core is None:
    from . import _pure as core

if TYPE_CHECKING:
    from typing_extensions import Buffer as ReadableBuffer, Buffer as WriteableBuffer
else:
    ReadableBuffer = WriteableBuffer = Any

_F = TypeVar('_F')
_L = TypeVar('_L', bytes, str)

__all__ = ['open', 'stat', 'AsyncFile', 'AsyncTextFile']

_MAX_IO = 0x7ffff000          # the most one read(2)/write(2) moves
_DEFAULT_BUFFER = io.DEFAULT_BUFFER_SIZE


def _buffer_size(blksize: int) -> int:
    """The builtin open()'s buffer for buffering=-1: the file's st_blksize
    (before 3.14), or that within [io.DEFAULT_BUFFER_SIZE, 8 MiB] (3.14 on,
    whose default is 128 KiB)."""
    if sys.version_info >= (3, 14):
        return max(min(blksize, 8192 * 1024), _DEFAULT_BUFFER)
    return blksize if blksize > 1 else _DEFAULT_BUFFER


def _whole_buffer_goes_straight_out() -> bool:
    """Whether this CPython's BufferedWriter writes a write of exactly
    its buffer's size through at once (3.13 on) or keeps it (3.12 and
    before, which write through only what is larger).  Asked of the
    builtin itself, on a raw stream in memory that notes its writes."""
    class Noted(io.RawIOBase):
        wrote = False

        def writable(self):
            return True

        def write(self, b):
            Noted.wrote = True
            return len(b)
    writer = io.BufferedWriter(Noted(), buffer_size=2)
    writer.write(b'ab')
    return Noted.wrote


_WHOLE_BUFFER_DIRECT = _whole_buffer_goes_straight_out()
_NEWLINES = (None, '', '\n', '\r', '\r\n')
# (3.12 on: a buffered file's read(None) where it cannot read is a
# TypeError of its argument before the UnsupportedOperation)
_NONE_IS_NO_SIZE = sys.version_info >= (3, 12)


# ---- requests: on the ring, or in a thread -----------------------------------

class _RingRequests:
    """What a file asks of the kernel, on a uringloop loop's ring."""

    on_ring = True

    def __init__(self, loop):
        self.loop = loop

    def open(self, path, flags, mode):
        return core.file_open(self.loop, path, flags, mode)

    def read(self, fd, size, offset, requests, orphan=None):
        return core.file_read(self.loop, fd, size, offset, requests, orphan)

    def readinto(self, fd, buf, offset, requests):
        return core.file_readinto(self.loop, fd, buf, offset, requests)

    def write(self, fd, data, offset, requests, account=None):
        return core.file_write(self.loop, fd, data, offset, requests, account)

    def fsync(self, fd, datasync, requests):
        return core.file_fsync(self.loop, fd, datasync, requests)

    def fstat(self, fd, requests):
        return core.file_stat(self.loop, None, fd, True, requests)

    def stat(self, path, dir_fd, follow_symlinks):
        return core.file_stat(self.loop, path, dir_fd, follow_symlinks)

    def truncate(self, fd, length, requests):
        if core.ring_supports(self.loop, 'FTRUNCATE'):
            return core.file_truncate(self.loop, fd, length, requests)
        return _done(self.loop, os.ftruncate, fd, length)   # before 6.9

    def close(self, fd):
        return core.file_close(self.loop, fd)

    def ready(self, fd, writing):
        return core.fd_ready(self.loop, fd, 4 if writing else 1)   # POLLOUT/POLLIN


def _done(loop, fn, *args):
    fut = loop.create_future()
    try:
        fut.set_result(fn(*args))
    except OSError as exc:
        fut.set_exception(exc)
    return fut


def _read_at(fd, size, offset):
    return os.read(fd, size) if offset < 0 else os.pread(fd, size, offset)


def _readinto_at(fd, buf, offset):
    return os.readv(fd, [buf]) if offset < 0 else os.preadv(fd, [buf], offset)


def _write_at(fd, data, offset):
    return os.write(fd, data) if offset < 0 else os.pwrite(fd, data, offset)


class _ThreadRequests:
    """The same requests through the loop's default executor, for a loop
    that is not uringloop's.  Counted in the file's FileRequests like the
    ring's, until the thread is done; a result that comes for a waiter who
    gave up goes to `orphan`, as the ring's does."""

    on_ring = False

    def __init__(self, loop):
        self.loop = loop

    def _call(self, requests, orphan, fn, *args, account=None):
        loop = self.loop
        fut = loop.create_future()
        if requests is not None:
            requests._started()

        def deliver(ok, value):
            # the result first, then the count: callbacks of the result
            # (a cancelled write's accounting) run before a waiter for
            # the file's idle, as on the ring (file_requests.pyx)
            try:
                if ok and account is not None:
                    account(value)
                if fut.cancelled():
                    if ok and orphan is not None:
                        orphan(value)
                elif ok:
                    fut.set_result(value)
                else:
                    fut.set_exception(value)
            finally:
                if requests is not None:
                    requests._ended()

        def work():
            try:
                value = fn(*args)
                ok = True
            except BaseException as exc:    # handed to the waiter
                value = exc
                ok = False
            try:
                loop.call_soon_threadsafe(deliver, ok, value)
            except RuntimeError:
                pass                        # the loop is closed

        try:
            loop.run_in_executor(None, work)
        except BaseException:
            if requests is not None:
                requests._ended()
            raise
        return fut

    def open(self, path, flags, mode):
        return self._call(None, os.close, os.open, path, flags, mode)

    def read(self, fd, size, offset, requests, orphan=None):
        return self._call(requests, orphan, _read_at, fd, min(size, _MAX_IO), offset)

    def readinto(self, fd, buf, offset, requests):
        return self._call(requests, None, _readinto_at, fd, buf, offset)

    def write(self, fd, data, offset, requests, account=None):
        return self._call(requests, None, _write_at, fd, data, offset, account=account)

    def fsync(self, fd, datasync, requests):
        return self._call(requests, None, os.fdatasync if datasync else os.fsync, fd)

    def fstat(self, fd, requests):
        return self._call(requests, None, os.fstat, fd)

    def stat(self, path, dir_fd, follow_symlinks):
        return self._call(None, None, _stat_at, path, dir_fd, follow_symlinks)

    def truncate(self, fd, length, requests):
        return self._call(requests, None, os.ftruncate, fd, length)

    def close(self, fd):
        return self._call(None, None, os.close, fd)

    def ready(self, fd, writing):
        fut = self.loop.create_future()
        add, remove = ((self.loop.add_writer, self.loop.remove_writer) if writing
                       else (self.loop.add_reader, self.loop.remove_reader))

        def ready():
            remove(fd)
            if not fut.done():
                fut.set_result(None)
        add(fd, ready)
        fut.add_done_callback(lambda _: remove(fd))
        return fut


def _stat_at(path, dir_fd, follow_symlinks):
    return os.stat(path, dir_fd=None if dir_fd == _AT_FDCWD else dir_fd,
                   follow_symlinks=follow_symlinks)


_AT_FDCWD = -100


def _requests_for(loop):
    if isinstance(loop, core.RingLoop) and not loop.is_closed():
        return _RingRequests(loop)
    return _ThreadRequests(loop)


# ---- open() -------------------------------------------------------------------

class _Flags(Exception):
    """What the builtin open() would pass its opener (raised by our probe)."""


def _probe(path, flags):
    raise _Flags(path, flags)


def _open_arguments(file, mode, buffering, encoding, errors, newline, closefd, opener):
    """Check the arguments as the builtin open() does, with the same
    exceptions, and work out the os.open() flags it would use: the builtin
    open() itself does both, stopped by an opener that raises before
    anything is opened.  (An fd is checked with a stand-in name.)"""
    probe_file = 'uringloop-probe' if isinstance(file, int) else file
    try:
        io.open(probe_file, mode, buffering, encoding, errors, newline,
                True if isinstance(file, int) else closefd, opener=_probe)
    except _Flags as flags:
        path, os_flags = flags.args
    else:           # pragma: no cover -- the probe always raises
        raise AssertionError('open() did not call its opener')
    if isinstance(file, int):
        if isinstance(file, bool):
            warnings.warn("bool is used as a file descriptor", RuntimeWarning, 3)
        if file < 0:
            raise ValueError("negative file descriptor")
        path = None
    binary = 'b' in mode
    if buffering == 0 and not binary:
        raise ValueError("can't have unbuffered text I/O")
    if binary and buffering == 1:
        warnings.warn("line buffering (buffering=1) isn't supported in binary "
                      "mode, the default buffer size will be used",
                      RuntimeWarning, 3)
    if newline not in _NEWLINES:
        raise ValueError(f"illegal newline value: {newline}")
    return path, os_flags


def _text_encoding(encoding):
    if encoding is None:
        encoding = io.text_encoding(None, 4)
    if encoding == 'locale':
        encoding = (locale.getencoding() if hasattr(locale, 'getencoding')
                    else locale.getpreferredencoding(False))
    info = codecs.lookup(encoding)
    if not getattr(info, '_is_text_encoding', True):
        # (3.14 dropped the advice: codecs.open() is deprecated there)
        raise LookupError(f"{encoding!r} is not a text encoding" +
                          ("; use codecs.open() to handle arbitrary codecs"
                           if sys.version_info < (3, 14) else ""))
    return encoding


class _Opening(Generic[_F]):
    """What open() returns: await it for the file, or use it in
    `async with`, which closes the file at the end."""

    __slots__ = ('_coro', '_file')

    def __init__(self, coro: Coroutine[Any, Any, _F]) -> None:
        self._coro = coro
        self._file: _F | None = None

    def __await__(self) -> Generator[Any, None, _F]:
        return self._coro.__await__()

    async def __aenter__(self) -> _F:
        self._file = await self._coro
        return self._file

    async def __aexit__(self, *exc: object) -> None:
        assert self._file is not None
        await self._file.close()


_TextMode = Literal['r', 'w', 'a', 'x', 'r+', 'w+', 'a+', 'x+', 'rt', 'wt', 'at', 'xt',
                    'r+t', 'w+t', 'a+t', 'x+t', 'rt+', 'wt+', 'at+', 'xt+']
_BinaryMode = Literal['rb', 'wb', 'ab', 'xb', 'r+b', 'w+b', 'a+b', 'x+b', 'rb+', 'wb+',
                      'ab+', 'xb+', 'br', 'bw', 'ba', 'bx']
_File = Union[str, bytes, 'os.PathLike[str]', 'os.PathLike[bytes]', int]
_Opener = Callable[[Any, int], int]


@overload
def open(file: _File, mode: _TextMode = 'r', buffering: int = -1,
         encoding: str | None = None, errors: str | None = None,
         newline: str | None = None, closefd: bool = True,
         opener: _Opener | None = None, *,
         loop: asyncio.AbstractEventLoop | None = None) -> _Opening['AsyncTextFile']: ...
@overload
def open(file: _File, mode: _BinaryMode, buffering: int = -1,
         encoding: None = None, errors: None = None, newline: None = None,
         closefd: bool = True, opener: _Opener | None = None, *,
         loop: asyncio.AbstractEventLoop | None = None) -> _Opening['AsyncFile']: ...
@overload
def open(file: _File, mode: str, buffering: int = -1, encoding: str | None = None,
         errors: str | None = None, newline: str | None = None, closefd: bool = True,
         opener: _Opener | None = None, *,
         loop: asyncio.AbstractEventLoop | None = None) -> _Opening[Any]: ...


def open(file: Any, mode: str = 'r', buffering: int = -1, encoding: str | None = None,
         errors: str | None = None, newline: str | None = None, closefd: bool = True,
         opener: _Opener | None = None, *,
         loop: asyncio.AbstractEventLoop | None = None) -> _Opening[Any]:
    """Open file as the builtin open() does, for async use: returns an
    awaitable of an AsyncFile (binary modes) or AsyncTextFile (text modes),
    also usable as `async with uringloop.open(...) as f:`.

    On a uringloop loop the open and every later request go through the
    loop's ring; on another loop, through its default executor.

    Raises what the builtin open() raises for the same arguments and file:
    ValueError, TypeError, LookupError (encoding), FileNotFoundError,
    IsADirectoryError, PermissionError, FileExistsError and the other
    OSErrors, from the await.
    """
    path, flags = _open_arguments(file, mode, buffering, encoding, errors,
                                  newline, closefd, opener)
    return _Opening(_open(file, path, flags, mode, buffering, encoding, errors,
                          newline, closefd, opener, loop))


async def _open(file, path, flags, mode, buffering, encoding, errors, newline,
                closefd, opener, loop):
    if loop is None:
        loop = asyncio.get_running_loop()
    requests = _requests_for(loop)
    if path is None:
        fd = file
    elif opener is not None:
        fd = opener(path, flags)
        if not isinstance(fd, int):
            raise TypeError("expected integer from opener")
        if fd < 0:
            raise ValueError(f"opener returned {fd}")
    else:
        fut = requests.open(path, flags, 0o666)
        try:
            fd = await fut
        except asyncio.CancelledError:
            # opened, but the caller was cancelled before it resumed
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                os.close(fut.result())
            raise
        except OSError as exc:
            if exc.filename is None and exc.errno is not None:
                raise OSError(exc.errno, exc.strerror, path) from None
            raise
    try:
        return await _wrap(requests, fd, file, flags, mode, buffering, encoding,
                           errors, newline, closefd)
    except BaseException:
        if closefd:
            os.close(fd)
        raise


async def _wrap(requests, fd, name, flags, mode, buffering, encoding, errors,
                newline, closefd):
    counts = core.FileRequests()
    st = await requests.fstat(fd, counts)
    if _stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR),
                                name if isinstance(name, (str, bytes)) else os.fspath(name))
    binary = 'b' in mode
    tty = _stat.S_ISCHR(st.st_mode) and os.isatty(fd)
    line_buffering = buffering == 1 or (buffering < 0 and tty)
    if buffering < 0 or (binary and buffering == 1):
        buffering = _buffer_size(st.st_blksize)
    seekable = _seekable(fd, st)
    appending = bool(flags & os.O_APPEND)
    position = 0
    if seekable:
        # where the builtin's FileIO starts: the end in append mode, else
        # the descriptor's offset (0 for a file just opened)
        position = os.lseek(fd, 0, os.SEEK_END if appending else os.SEEK_CUR)
    accmode = flags & os.O_ACCMODE
    f = AsyncFile(requests, counts, fd, name, mode.replace('t', ''), closefd,
                  buffering, seekable, accmode != os.O_WRONLY,
                  accmode != os.O_RDONLY, appending, position, binary)
    if binary:
        return f
    try:
        encoding = _text_encoding(encoding)
        return AsyncTextFile(f, mode, encoding, errors, newline, line_buffering)
    except BaseException:
        f._detach_fd()
        raise


def _seekable(fd, st):
    if _stat.S_ISFIFO(st.st_mode) or _stat.S_ISSOCK(st.st_mode):
        return False
    try:
        os.lseek(fd, 0, os.SEEK_CUR)
    except OSError:
        return False
    return True


async def stat(path: _File, *, dir_fd: int | None = None, follow_symlinks: bool = True,
               loop: asyncio.AbstractEventLoop | None = None) -> os.stat_result:
    """os.stat(path, dir_fd=..., follow_symlinks=...) as a coroutine: STATX
    on a uringloop loop's ring, a thread elsewhere.  Raises what os.stat()
    raises."""
    if loop is None:
        loop = asyncio.get_running_loop()
    if isinstance(path, int):
        return await _requests_for(loop).fstat(path, None)
    path = os.fspath(path)
    try:
        return await _requests_for(loop).stat(
            path, _AT_FDCWD if dir_fd is None else dir_fd, follow_symlinks)
    except OSError as exc:
        if exc.filename is None and exc.errno is not None:
            raise OSError(exc.errno, exc.strerror, path) from None
        raise


# ---- the binary file ------------------------------------------------------------

_files_of_loops = weakref.WeakKeyDictionary()     # loop -> WeakSet of open files


def _close_files_of(loop):
    """Loop.close(), after the ring is drained: close what is still open."""
    files = _files_of_loops.pop(loop, None)
    for f in list(files or ()):
        f._close_now()


class AsyncFile:
    """A binary file (open() in a 'b' mode): the surface of the builtin's
    BufferedReader / BufferedWriter / BufferedRandom (FileIO with
    buffering=0), each I/O method a coroutine, plus pread() and pwrite()."""

    def __init__(self, requests, counts, fd, name, mode, closefd, buffer_size,
                 seekable, readable, writable, appending, position, binary):
        self._io = requests
        self._loop = requests.loop
        self._counts = counts                      # calls in turn
        self._positional = core.FileRequests()     # pread()/pwrite()
        self._fd = fd
        self.name = name
        self.mode = mode
        self._closefd = closefd
        self._buffer_size = buffer_size
        self._raw = binary and buffer_size == 0    # FileIO: no buffer
        self._seekable = seekable
        self._readable = readable
        self._writable = writable
        self._appending = appending
        self._pos = position        # the caller's position (seekable files)
        self._rbuf = b''            # read ahead: the file's bytes at _pos ...
        self._roff = 0              # ... from _rbuf[_roff:]
        self._wbuf = bytearray()    # written, not yet flushed: ends at _pos
        self._busy = False
        self._turns = collections.deque()
        self._closed = False
        self._closing = False
        self._reading = None        # the ring future of the read in progress
        if requests.on_ring:
            _files_of_loops.setdefault(self._loop, weakref.WeakSet()).add(self)

    # -- the builtin's attributes and checks

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def raw(self) -> 'AsyncFile':
        return self

    def fileno(self) -> int:
        self._check_open()
        return self._fd

    def readable(self) -> bool:
        self._check_open()
        return self._readable

    def writable(self) -> bool:
        self._check_open()
        return self._writable

    def seekable(self) -> bool:
        self._check_open()
        return self._seekable

    def isatty(self) -> bool:
        self._check_open()
        return os.isatty(self._fd)

    def __repr__(self):
        kind = 'closed ' if self._closed else ''
        return f'<uringloop.AsyncFile {kind}name={self.name!r} mode={self.mode!r}>'

    def _check_open(self, call=None):
        if self._closed:
            raise ValueError(self._closed_words(call))

    def _closed_words(self, call):
        # the builtin's words, which differ from call to call
        if call in ('flush', 'iterate', 'enter', 'readlines'):
            if call == 'flush' and self._writable and not self._raw:
                return 'flush of closed file'
            return 'I/O operation on closed file.'
        if self._raw or call is None:
            return 'I/O operation on closed file'
        if call == 'write':
            return 'write to closed file'
        return f'{call} of closed file'

    def _check_readable(self, call='read'):
        if self._raw:
            self._check_open()              # FileIO: closed first
        if not self._readable:
            # (the builtin's words: FileIO's, or its buffered file's)
            raise io.UnsupportedOperation('File not open for reading' if self._raw
                                          else 'read1' if call == 'read1' else 'read')
        self._check_open('read' if call == 'read1' else call)

    def _check_writable(self, call='write'):
        if call == 'truncate' or self._raw:
            self._check_open(call)
        if not self._writable:
            raise io.UnsupportedOperation('File not open for writing' if self._raw
                                          else call)
        self._check_open(call)

    # -- one call at a time

    async def _turn(self):
        """Wait until no other call runs on this file and the kernel holds
        none of their requests (a cancelled write still running)."""
        while self._busy or self._counts.in_flight:
            if self._busy:
                waiter = self._loop.create_future()
                self._turns.append(waiter)
                try:
                    await waiter
                except BaseException:
                    if not waiter.cancelled() and not self._busy:
                        self._wake_next()
                    raise
            else:
                await self._counts.wait_idle(self._loop)
        self._check_open()
        self._busy = True

    def _take_turn(self):
        """The turn at once, when it is free (no coroutine to await)."""
        if self._busy or self._counts.in_flight:
            return False
        self._busy = True
        return True

    def _end_turn(self):
        self._busy = False
        self._wake_next()

    def _wake_next(self):
        while self._turns:
            waiter = self._turns.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    # -- kernel requests

    async def _raw_read(self, size, at):
        """One read of up to size bytes at offset `at` (ignored when the
        file cannot seek): b'' at the end.  On a file that cannot seek, a
        read cancelled after its bytes came keeps them for the next read."""
        if not self._seekable and not self._io.on_ring:
            data = await self._read_stream_when_ready(size)
            if data is not None:
                return data
        while True:
            fut = self._io.read(self._fd, size, at if self._seekable else -1,
                                self._counts, None if self._seekable else self._keep)
            self._reading = fut
            try:
                return await fut
            except BlockingIOError:
                await self._io.ready(self._fd, False)    # O_NONBLOCK
            except asyncio.CancelledError:
                if (not self._seekable and fut.done() and not fut.cancelled()
                        and fut.exception() is None):
                    self._keep(fut.result())
                self._check_closed_under(fut)
                raise
            finally:
                self._reading = None

    async def _read_stream_when_ready(self, size):
        """A pipe's (a terminal's) read on a loop without a ring: wait in
        the loop's selector until it is readable, then read at once -- no
        thread blocked in read(2), which close() could not stop.  None for
        a file the selector cannot watch (a thread reads it then)."""
        while True:
            if not os.get_blocking(self._fd):
                try:
                    return os.read(self._fd, min(size, _MAX_IO))
                except BlockingIOError:
                    pass
            try:
                fut = self._io.ready(self._fd, False)
            except OSError:
                return None
            self._reading = fut
            try:
                await fut
            except asyncio.CancelledError:
                self._check_closed_under(fut)
                raise
            finally:
                self._reading = None
            try:
                return os.read(self._fd, min(size, _MAX_IO))
            except BlockingIOError:
                continue

    def _check_closed_under(self, fut):
        """A read's wait ended cancelled: if close() cancelled it, not the
        caller's task, the caller gets the closed file's ValueError."""
        if self._closing and fut.cancelled() and not _being_cancelled():
            raise ValueError("I/O operation on closed file.") from None

    def _keep(self, data):
        """Bytes of a pipe's read that nobody took: the next read's."""
        self._rbuf = self._rbuf[self._roff:] + data
        self._roff = 0

    def _rbuf_avail(self):
        return len(self._rbuf) - self._roff

    def _take(self, n):
        data = self._rbuf[self._roff:self._roff + n]
        self._roff += len(data)
        if self._roff >= len(self._rbuf):
            self._rbuf = b''
            self._roff = 0
        return data

    async def _fill(self, size=None):
        """Read up to size bytes (one buffer's worth) past what is
        buffered, into the buffer: the count, 0 at the end of the file."""
        avail = self._rbuf_avail()
        if size is None:
            size = max(self._buffer_size, 1)
        data = await self._raw_read(size, self._pos + avail)
        if data:
            self._rbuf = self._rbuf[self._roff:] + data if avail else data
            self._roff = 0
        return len(data)

    def _whole_blocks(self, size):
        # the part of a read the builtin makes straight from the file: all
        # but the last, partial, buffer's worth
        return (size // self._buffer_size) * self._buffer_size

    # -- reading

    async def read(self, size: int | None = -1) -> bytes:
        """Up to size bytes (all to the end when size is -1 or None)."""
        if size is None and not self._readable and not self._raw and _NONE_IS_NO_SIZE:
            raise TypeError("'NoneType' object cannot be interpreted as an integer")
        self._check_readable()
        size = _size(size, strict=not self._raw)
        if not self._take_turn():
            await self._turn()
        try:
            if self._wbuf:
                await self._flush_unlocked()
            if size < 0:
                return await self._read_all()
            if size == 0:
                return b''
            if self._raw:
                return await self._read_once(size)
            return await self._read_buffered(size)
        finally:
            self._end_turn()

    async def _read_once(self, size):
        """FileIO's read(): one read of the file -- or the bytes a cancelled
        read of a pipe left, if any."""
        avail = self._rbuf_avail()
        if avail:
            data = self._take(min(size, avail))
        else:
            data = await self._raw_read(min(size, _MAX_IO), self._pos)
        self._pos += len(data)
        return data

    async def _read_buffered(self, size):
        """BufferedReader.read(size): what is buffered, whole buffers'
        worth straight from the file, then the rest through the buffer
        (which keeps what is left of its last read)."""
        avail = self._rbuf_avail()
        if size <= avail:
            self._pos += size
            return self._take(size)
        start = self._pos
        parts = [self._take(avail)] if avail else []     # the buffer is empty now
        got = avail
        try:
            while got < size:
                blocks = self._whole_blocks(size - got)
                if not blocks:
                    break
                data = await self._raw_read(min(blocks, _MAX_IO), start + got)
                if not data:
                    break
                parts.append(data)
                got += len(data)
            else:
                blocks = -1
            filled = 0
            while blocks == 0 and got < size and filled < self._buffer_size:
                self._pos = start + got             # (the buffer's offset)
                n = await self._fill(self._buffer_size - filled)
                if not n:
                    break
                filled += n
                take = min(size - got, self._rbuf_avail())
                parts.append(self._take(take))
                got += take
        except BaseException:
            # a cancel or an error: what was read is the next read's
            self._rbuf = b''.join(parts) + self._rbuf[self._roff:]
            self._roff = 0
            raise
        finally:
            self._pos = start
        self._pos = start + got
        return b''.join(parts)

    async def _read_all(self):
        parts = []
        avail = self._rbuf_avail()
        start = self._pos
        got = 0
        if avail:
            parts.append(self._rbuf[self._roff:])
            got = avail
        self._rbuf, self._roff = b'', 0
        try:
            regular = self._seekable
            size_hint = 0
            if regular:
                st = await self._io.fstat(self._fd, self._counts)
                regular = _stat.S_ISREG(st.st_mode)
                size_hint = st.st_size - (start + got)
            while True:
                want = size_hint if size_hint > 0 else max(self._buffer_size, _DEFAULT_BUFFER)
                want = min(want + 1 if size_hint > 0 else want, _MAX_IO)
                data = await self._raw_read(want, start + got)
                if not data:
                    break
                parts.append(data)
                got += len(data)
                size_hint = 0
                if regular and len(data) < want:
                    break           # a short read of a regular file: its end
        except BaseException:
            self._rbuf, self._roff = b''.join(parts), 0
            raise
        self._pos = start + got
        return b''.join(parts)

    async def read1(self, size: int | None = -1) -> bytes:
        """At most one read of the file: what is buffered, or one read."""
        size = _size(size)
        self._check_readable('read1')
        if not self._take_turn():
            await self._turn()
        try:
            if self._wbuf:
                await self._flush_unlocked()
            if size == 0:
                return b''
            avail = self._rbuf_avail()
            if avail:
                n = avail if size < 0 else min(size, avail)
                self._pos += n
                return self._take(n)
            # nothing buffered: one read of the file, past the buffer
            if size < 0:
                size = max(self._buffer_size, 1)
            data = await self._raw_read(min(size, _MAX_IO), self._pos)
            self._pos += len(data)
            return data
        finally:
            self._end_turn()

    async def peek(self, size: int = 0) -> bytes:
        """Buffered bytes from the position on, without moving it (one read
        when none are buffered)."""
        self._check_readable('peek')
        if not self._take_turn():
            await self._turn()
        try:
            if self._wbuf:
                await self._flush_unlocked()
            if not self._rbuf_avail():
                await self._fill()
            return self._rbuf[self._roff:]
        finally:
            self._end_turn()

    async def readinto(self, buffer: WriteableBuffer) -> int:
        """Read into a writable bytes-like object: the count."""
        self._check_readable('readinto')
        view = memoryview(buffer)
        if view.readonly:
            raise TypeError(f"readinto() argument must be read-write bytes-like "
                            f"object, not {type(buffer).__name__}")
        view = view.cast('B')
        if not self._take_turn():
            await self._turn()
        try:
            if self._wbuf:
                await self._flush_unlocked()
            size = len(view)
            if size == 0:
                return 0
            if self._raw:
                if self._seekable and not self._rbuf_avail():
                    n = await self._io.readinto(self._fd, view[:_MAX_IO], self._pos,
                                                self._counts)
                    self._pos += n
                    return n
                data = await self._read_once(size)
                view[:len(data)] = data
                return len(data)
            return await self._readinto_buffered(view)
        finally:
            self._end_turn()

    async def _readinto_buffered(self, view):
        """BufferedReader.readinto(): what is buffered, then, while more
        than a buffer's worth is missing, reads straight into the caller's
        buffer, else through the buffer."""
        size = len(view)
        avail = self._rbuf_avail()
        if avail >= size:
            view[:] = self._take(size)
            self._pos += size
            return size
        start = self._pos
        view[:avail] = self._take(avail)
        written = avail
        try:
            while written < size:
                remaining = size - written
                if remaining > self._buffer_size:
                    if self._seekable:
                        n = await self._io.readinto(
                            self._fd, view[written:written + min(remaining, _MAX_IO)],
                            start + written, self._counts)
                    else:
                        data = await self._raw_read(min(remaining, _MAX_IO), -1)
                        view[written:written + len(data)] = data
                        n = len(data)
                else:
                    self._pos = start + written     # (the buffer's offset)
                    n = await self._fill()
                    if n:
                        n = min(n, remaining)
                        view[written:written + n] = self._take(n)
                        written += n
                        continue
                if n == 0:
                    break
                written += n
        except BaseException:
            if not self._seekable:
                # what the file gave is the next read's
                self._rbuf = bytes(view[:written]) + self._rbuf[self._roff:]
                self._roff = 0
            else:
                self._drop_read_ahead()
            raise
        finally:
            self._pos = start
        self._pos = start + written
        return written

    async def readinto1(self, buffer: WriteableBuffer) -> int:
        view = memoryview(buffer).cast('B')
        data = await self.read1(len(view))
        view[:len(data)] = data
        return len(data)

    async def readline(self, size: int | None = -1) -> bytes:
        """One line, with its b'\\n' (up to size bytes)."""
        size = _size(size)
        if size == 0:
            if self._readable and not self._raw:
                self._check_open('readline')
            return b''
        self._check_readable('readline')
        if not self._take_turn():
            await self._turn()
        try:
            if self._wbuf:
                await self._flush_unlocked()
            return await self._readline_unlocked(size)
        finally:
            self._end_turn()

    async def _readline_unlocked(self, size):
        scanned = 0
        while True:
            avail = self._rbuf_avail()
            end = self._rbuf.find(b'\n', self._roff + scanned)
            if end >= 0:
                n = end - self._roff + 1
                break
            scanned = avail
            if 0 <= size <= avail:
                n = avail
                break
            if not await self._fill():
                n = avail
                break
        if size >= 0:
            n = min(n, size)
        self._pos += n
        return self._take(n)

    async def readlines(self, hint: int | None = -1) -> list[bytes]:
        hint = _size(hint)
        self._check_open('readlines')
        return await read_lines(self.readline, hint)

    def __aiter__(self) -> 'AsyncFile':
        self._check_open('iterate')
        return self

    async def __anext__(self) -> bytes:
        line = await self.readline()
        if not line:
            raise StopAsyncIteration
        return line

    # -- positional reads and writes

    async def pread(self, size: int, offset: int) -> bytes:
        """os.pread(): up to size bytes at offset, the position unmoved
        (unflushed writes are flushed first).  Runs beside other calls."""
        self._check_readable()
        if size < 0:
            raise ValueError("negative size")
        if offset < 0:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        if self._wbuf:
            await self.flush()
        if size == 0:
            return b''
        return await self._io.read(self._fd, size, offset, self._positional)

    async def pwrite(self, data: ReadableBuffer, offset: int) -> int:
        """os.pwrite(): write data at offset, the position unmoved; the
        count (all of data unless the disk is full)."""
        self._check_writable()
        if offset < 0:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        if self._wbuf:
            await self.flush()
        view = memoryview(data).cast('B')
        done = 0
        while done < len(view):
            n = await self._io.write(self._fd, view[done:done + _MAX_IO], offset + done,
                                     self._positional)
            if n == 0:
                break
            done += n
        return done

    # -- writing

    async def write(self, data: ReadableBuffer) -> int:
        """Buffer data (writing the buffer out when full): len(data)."""
        self._check_writable()
        if isinstance(data, str):
            raise TypeError("a bytes-like object is required, not 'str'")
        view = memoryview(data).cast('B')
        size = len(view)
        if not self._take_turn():
            await self._turn()
        try:
            self._drop_read_ahead()
            if self._raw:
                return await self._write_direct(view, once=True)
            # The builtin's rule: keep what fits; else flush, then write
            # a whole buffer's worth or more straight out (3.12 and
            # before: only more than a buffer) and keep the rest.
            direct = (size >= self._buffer_size if _WHOLE_BUFFER_DIRECT
                      else size > self._buffer_size)
            if direct or len(self._wbuf) + size > self._buffer_size:
                await self._flush_unlocked()
                if direct:
                    await self._write_direct(view)
                    return size
            self._wbuf += view
            self._pos += size
            return size
        finally:
            self._end_turn()

    async def writelines(self, lines: Iterable[ReadableBuffer]) -> None:
        for line in lines:
            await self.write(line)

    def _drop_read_ahead(self):
        self._rbuf, self._roff = b'', 0

    async def _write_request(self, data, offset, account):
        """One WRITE, never cancelled in the kernel: a cancelled caller
        leaves it running, and account(count) runs at its completion
        either way, before the next call on the file may start."""
        while True:
            fut = self._io.write(self._fd, data, offset, self._counts, account)
            try:
                return await fut
            except BlockingIOError:
                await self._io.ready(self._fd, True)        # O_NONBLOCK

    async def _write_direct(self, view, once=False):
        """Write view at the position, moving it by the kernel's counts."""
        done = 0
        while done < len(view):
            n = await self._write_request(view[done:done + _MAX_IO],
                                          self._write_offset(self._pos), self._moved)
            done += n
            if once or n == 0:
                break
        return done

    def _write_offset(self, at):
        if self._appending or not self._seekable:
            return -1
        return at

    def _moved(self, n):
        """A direct write's count: the position follows it."""
        if self._appending and self._seekable:
            self._pos = os.lseek(self._fd, 0, os.SEEK_CUR)
        else:
            self._pos += n

    async def flush(self) -> None:
        """Write out what write() buffered.  A file open for reading and
        writing (the builtin's BufferedRandom) then drops its read-ahead,
        as the builtin's flush() does: the next read reads the file."""
        self._check_open('flush')
        if not self._take_turn():
            await self._turn()
        try:
            if self._wbuf:
                await self._flush_unlocked()
            if self._readable and self._writable and not self._raw:
                self._drop_read_ahead()
        finally:
            self._end_turn()

    async def _flush_unlocked(self):
        while self._wbuf:
            start = self._pos - len(self._wbuf)
            n = await self._write_request(self._wbuf, self._write_offset(start),
                                          self._flushed)
            if n == 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def _flushed(self, n):
        """A flush's count: those bytes leave the buffer."""
        del self._wbuf[:n]
        if self._appending and self._seekable:
            self._pos = os.lseek(self._fd, 0, os.SEEK_CUR) + len(self._wbuf)

    # -- position

    async def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        """Move the position (whence as os.lseek: SET, CUR, END, DATA,
        HOLE): the new position."""
        offset = _index(offset)
        whence = _index(whence)
        self._check_open('seek')
        if whence not in (0, 1, 2, os.SEEK_DATA, os.SEEK_HOLE):
            raise ValueError(f"whence value {whence} unsupported")
        if not self._seekable:
            raise OSError(errno.ESPIPE, os.strerror(errno.ESPIPE))
        if not self._take_turn():
            await self._turn()
        try:
            if self._wbuf:
                await self._flush_unlocked()
            if whence == os.SEEK_SET:
                if offset < 0:
                    raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
                target = offset
            elif whence == os.SEEK_CUR:
                target = self._pos + offset
                if target < 0:
                    raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
            else:
                # the kernel knows the end, the data and the holes: a
                # metadata call that does not wait (the descriptor's own
                # offset moves with it, as the builtin's does)
                target = os.lseek(self._fd, offset, whence)
            if self._rbuf_avail() and self._pos <= target < self._pos + self._rbuf_avail():
                self._roff += target - self._pos       # within the read-ahead
            else:
                self._drop_read_ahead()
            self._pos = target
            return target
        finally:
            self._end_turn()

    async def tell(self) -> int:
        """The position (once a write cancelled earlier has ended)."""
        self._check_open()
        if not self._seekable:
            raise OSError(errno.ESPIPE, os.strerror(errno.ESPIPE))
        if not self._take_turn():
            await self._turn()
        self._end_turn()
        return self._pos

    async def truncate(self, size: int | None = None) -> int:
        """Cut (or extend) the file to size bytes (the position's, by
        default); the position stays.  The new size."""
        self._check_writable('truncate')
        if size is not None:
            size = _index(size)
        if not self._take_turn():
            await self._turn()
        try:
            if self._wbuf:
                await self._flush_unlocked()
            if size is None:
                size = self._pos
            if size < 0:
                raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
            self._drop_read_ahead()
            await self._io.truncate(self._fd, size, self._counts)
            return size
        finally:
            self._end_turn()

    # -- durability and metadata

    async def fsync(self) -> None:
        """Flush, then os.fsync() the file."""
        await self.flush()
        await self._io.fsync(self._fd, False, self._positional)

    async def datasync(self) -> None:
        """Flush, then os.fdatasync() the file."""
        await self.flush()
        await self._io.fsync(self._fd, True, self._positional)

    async def stat(self) -> os.stat_result:
        """os.fstat() of the file (written data flushed first)."""
        await self.flush()
        return await self._io.fstat(self._fd, self._positional)

    # -- closing

    async def close(self) -> None:
        """Flush, wait for (or cancel, for reads) what the kernel holds,
        then close the file (with closefd).  Closing twice does nothing."""
        if self._closed or self._closing:
            return
        self._closing = True
        try:
            if self._reading is not None:
                self._reading.cancel()          # a read of a quiet pipe
            try:
                if self._wbuf:
                    await self.flush()
            finally:
                await self._counts.wait_idle(self._loop)
                await self._positional.wait_idle(self._loop)
        finally:
            self._closed = True
            self._closing = False
            self._wake_all()
            if self._closefd and self._fd >= 0:
                fd, self._fd = self._fd, -1
                await self._io.close(fd)

    def _wake_all(self):
        while self._turns:
            waiter = self._turns.popleft()
            if not waiter.done():
                waiter.set_result(None)

    def _detach_fd(self):
        self._closed = True
        self._fd = -1

    def _close_now(self):
        """The loop closes (its ring drained): write out and close at once."""
        if self._closed:
            return
        self._closed = True
        fd, self._fd = self._fd, -1
        try:
            if fd >= 0:
                self._write_out_now(fd)
        finally:
            if self._closefd and fd >= 0:
                os.close(fd)

    def __del__(self):
        if getattr(self, '_closed', True):
            return
        warnings.warn(f"unclosed file {self!r}", ResourceWarning, source=self)
        self._closed = True
        fd, self._fd = self._fd, -1
        if fd < 0:
            return
        try:
            if not self._counts.in_flight:
                self._write_out_now(fd)
        except OSError:
            pass
        finally:
            if self._closefd:
                core.close_when_idle(self._counts, fd)

    def _write_out_now(self, fd):
        """What write() buffered, written at once with plain system calls
        (the loop closes, or the file is collected): where a flush would
        have written it."""
        offset = self._write_offset(self._pos - len(self._wbuf))
        done = 0
        with memoryview(self._wbuf) as view:
            while done < len(view):
                if offset < 0:
                    done += os.write(fd, view[done:])
                else:
                    done += os.pwrite(fd, view[done:], offset + done)

    async def __aenter__(self) -> 'AsyncFile':
        self._check_open('enter')
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def detach(self) -> NoReturn:
        raise io.UnsupportedOperation('detach')




def _being_cancelled():
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


async def read_lines(readline: Callable[[], Awaitable[_L]], hint: int) -> list[_L]:
    """readlines(): lines until the end, or until they hold hint or more."""
    lines = []
    total = 0
    while True:
        line = await readline()
        if not line:
            return lines
        lines.append(line)
        total += len(line)     # type: ignore[arg-type]
        if 0 < hint <= total:
            return lines


def _size(size, strict=False):
    """A size argument: an int, -1 for None; any negative one means -1,
    except to a buffered read() (strict), which refuses it, as the
    builtin's does."""
    if size is None:
        return -1
    try:
        size = size.__index__()
    except AttributeError:
        raise TypeError(f"argument should be integer or None, not "
                        f"'{type(size).__name__}'") from None
    if size < -1:
        if strict:
            raise ValueError("read length must be non-negative or -1")
        return -1
    return size


def _index(value):
    try:
        return value.__index__()
    except AttributeError:
        raise TypeError(f"'{type(value).__name__}' object cannot be interpreted "
                        f"as an integer") from None


from .textfiles import AsyncTextFile  # noqa: E402  (it builds on AsyncFile)
