"""The text layer of uringloop.open(): AsyncTextFile over an AsyncFile.

It follows the builtin TextIOWrapper's rules -- chunks of 8192 bytes read
with read1() and decoded incrementally, universal newlines through
io.IncrementalNewlineDecoder, '\\n' translated on write, a BOM written only
at the start of a file, tell() cookies that restore the decoder's state --
so that every text a builtin file reads, writes or reports, this one does
too (tests/test_files.py compares them call by call).

One difference is on purpose: a call takes the characters it returns only
at its end.  Decoded text is appended, never replaced, while a call still
needs more, so a read() or readline() cancelled at any await leaves the
text, the decoder and the position where they were.
"""

from __future__ import annotations

import codecs
import io
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .files import _size, read_lines

if TYPE_CHECKING:
    from .files import AsyncFile

_CHUNK = 8192


def _pack_cookie(position, dec_flags=0, bytes_to_feed=0, need_eof=False,
                 chars_to_skip=0):
    # the builtin (C) TextIOWrapper's layout, so that the numbers match:
    # a 64-bit position, then 32-bit decoder flags, bytes to feed and
    # characters to skip, then the need-EOF byte
    return (position | (dec_flags << 64) | (bytes_to_feed << 96)
            | (chars_to_skip << 128) | (int(need_eof) << 160))


def _unpack_cookie(cookie):
    position = cookie & ((1 << 64) - 1)
    dec_flags = (cookie >> 64) & 0xffffffff
    bytes_to_feed = (cookie >> 96) & 0xffffffff
    chars_to_skip = (cookie >> 128) & 0xffffffff
    need_eof = bool((cookie >> 160) & 0xff)
    return position, dec_flags, bytes_to_feed, need_eof, chars_to_skip


class AsyncTextFile:
    """A text file (open() in a text mode): the builtin TextIOWrapper's
    surface with every I/O method a coroutine.  `buffer` is its AsyncFile."""

    def __init__(self, buffer: 'AsyncFile', mode: str, encoding: str, errors: str | None,
                 newline: str | None, line_buffering: bool) -> None:
        if errors is None:
            errors = 'strict'
        self.buffer = buffer
        self.mode = mode
        self._encoding = encoding
        self._errors = errors
        self._readtranslate = newline is None
        self._readuniversal = not newline           # None or ''
        self._readnl = newline
        self._writetranslate = newline != ''
        self._writenl = newline or os.linesep
        self._line_buffering = line_buffering
        self._decoder = None
        self._encoder = None
        self._decoded = ''          # decoded text ...
        self._used = 0              # ... of which the caller has this much
        self._snapshot = None       # (decoder flags, bytes fed) at _decoded's start
        self._end_snapshot = None   # the same at the end of the file
        self._last = (0, None)      # where the last chunk's text starts, its snapshot
        self._b2cratio = 0.0        # bytes per character of the last chunk
        if buffer._seekable and buffer._writable and buffer._pos != 0:
            self._get_encoder().setstate(0)          # no BOM mid-file
        if buffer._readable:
            self._get_decoder()

    # -- attributes

    @property
    def name(self) -> Any:
        return self.buffer.name

    @property
    def closed(self) -> bool:
        return self.buffer.closed

    @property
    def encoding(self) -> str:
        return self._encoding

    @property
    def errors(self) -> str:
        return self._errors

    @property
    def line_buffering(self) -> bool:
        return self._line_buffering

    @property
    def write_through(self) -> bool:
        return False

    @property
    def newlines(self) -> str | tuple[str, ...] | None:
        return getattr(self._decoder, 'newlines', None)

    def fileno(self) -> int:
        return self.buffer.fileno()

    def readable(self) -> bool:
        return self.buffer.readable()

    def writable(self) -> bool:
        return self.buffer.writable()

    def seekable(self) -> bool:
        return self.buffer.seekable()

    def isatty(self) -> bool:
        return self.buffer.isatty()

    def __repr__(self):
        kind = 'closed ' if self.closed else ''
        return (f'<uringloop.AsyncTextFile {kind}name={self.name!r} '
                f'mode={self.mode!r} encoding={self._encoding!r}>')

    def _check_open(self):
        if self.buffer.closed:
            raise ValueError("I/O operation on closed file.")

    # -- codecs

    def _get_decoder(self):
        if self._decoder is None:
            if not self.buffer._readable:
                raise io.UnsupportedOperation("not readable")
            decoder = codecs.getincrementaldecoder(self._encoding)(self._errors)
            if self._readuniversal:
                decoder = io.IncrementalNewlineDecoder(decoder, self._readtranslate)
            self._decoder = decoder
        return self._decoder

    def _get_encoder(self):
        if self._encoder is None:
            self._encoder = codecs.getincrementalencoder(self._encoding)(self._errors)
        return self._encoder

    def _drop_decoded(self):
        self._decoded = ''
        self._used = 0
        self._snapshot = None

    # -- reading

    async def _read_chunk(self, size_hint=0):
        """Decode one more chunk onto the text not yet taken: False at the
        end of the file once it decodes to nothing more (a final '\\r' of
        universal newlines comes out of the end first).  Cancelled in
        read1(), it changed nothing.  The chunk is 8192 bytes, or more for
        a larger read, as the builtin's is."""
        decoder = self._get_decoder()
        dec_buffer, dec_flags = decoder.getstate()
        if size_hint > 0:
            size_hint = int(max(self._b2cratio, 1.0) * size_hint)
        chunk = await self.buffer.read1(max(_CHUNK, size_hint))
        eof = not chunk
        decoded = decoder.decode(chunk, eof)
        self._b2cratio = len(chunk) / len(decoded) if decoded else 0.0
        if eof and not decoded:
            # where the builtin's snapshot is then, once the text is taken
            self._end_snapshot = (dec_flags, dec_buffer)
            return False
        last = (dec_flags, dec_buffer + chunk)
        if self._used >= len(self._decoded) or self._snapshot is None:
            self._decoded = decoded
            self._used = 0
            self._snapshot = last
            self._last = (0, last)
        else:
            self._last = (len(self._decoded), last)
            self._decoded += decoded
            flags, fed = self._snapshot
            self._snapshot = (flags, fed + chunk)
        return True

    def _settle(self):
        """A call has taken its text: keep only the last chunk's text and
        snapshot, as the builtin (which takes each chunk's text before it
        reads the next) has them -- tell() works out its cookie from them."""
        start, snapshot = self._last
        if 0 < start <= self._used:
            self._decoded = self._decoded[start:]
            self._used -= start
            self._snapshot = snapshot
            self._last = (0, snapshot)

    def _take(self, n):
        text = self._decoded[self._used:self._used + n]
        self._used += len(text)
        return text

    async def read(self, size: int | None = -1) -> str:
        """Up to size characters (all to the end when size is -1 or None)."""
        self._check_open()
        size = _size(size)
        decoder = self._get_decoder()
        if size < 0:
            data = await self.buffer.read()
            text = self._decoded[self._used:] + decoder.decode(data, final=True)
            self._drop_decoded()
            return text
        while len(self._decoded) - self._used < size:
            if not await self._read_chunk(size - (len(self._decoded) - self._used)):
                text = self._take(size)
                if self._used >= len(self._decoded):
                    self._decoded, self._used = '', 0
                    self._snapshot = self._end_snapshot
                    self._last = (0, self._snapshot)
                return text
        text = self._take(size)
        self._settle()
        return text

    async def readline(self, size: int | None = -1) -> str:
        """One line with its ending, as the newline argument defines lines
        (up to size characters)."""
        self._check_open()
        size = _size(size)
        self._get_decoder()
        if size == 0 and self._decoded:
            # the builtin reads a chunk only when it holds no text at all,
            # taken or not: here it returns at once (a tell() afterwards
            # shows the difference, at the end of a file)
            return ''
        scanned = 0
        eof = False
        while True:
            while self._used >= len(self._decoded) and not eof:
                # nothing to search: a chunk first, even for a limit of 0
                # (the builtin's order, which a tell() afterwards shows)
                eof = not await self._read_chunk()
            text, used = self._decoded, self._used
            end = self._line_end(text, used + scanned)
            if end >= 0:
                n = end - used
                break
            avail = len(text) - used
            if 0 <= size <= avail:
                n = size
                break
            if eof:
                n = avail
                break
            scanned = max(avail - 1, 0)      # a '\r' may meet its '\n'
            eof = not await self._read_chunk()
        if 0 <= size < n:
            n = size
        line = self._take(n)
        if eof and self._used >= len(self._decoded):
            self._drop_decoded()     # as the builtin's: tell() is the plain end
        else:
            self._settle()
        return line

    def _line_end(self, text, start):
        """The index just past the first line ending at or after start, or
        -1 when there is none yet."""
        if self._readtranslate:
            i = text.find('\n', start)
            return i + 1 if i >= 0 else -1
        if self._readuniversal:
            n = text.find('\n', start)
            r = text.find('\r', start, n if n >= 0 else len(text))
            if r < 0:
                return n + 1 if n >= 0 else -1
            # (a '\r' ends the text only when no '\n' can follow: the
            # newline decoder holds a last '\r' back until it knows)
            if r + 1 < len(text) and text[r + 1] == '\n':
                return r + 2
            return r + 1
        i = text.find(self._readnl, start)
        return i + len(self._readnl) if i >= 0 else -1

    async def readlines(self, hint: int | None = -1) -> list[str]:
        return await read_lines(self.readline, _size(hint))

    def __aiter__(self) -> 'AsyncTextFile':
        self._check_open()
        return self

    async def __anext__(self) -> str:
        line = await self.readline()
        if not line:
            raise StopAsyncIteration
        return line

    # -- writing

    async def write(self, s: str) -> int:
        """Encode and buffer s ('\\n' translated as newline says): len(s)."""
        self._check_open()
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        if not self.buffer._writable:
            raise io.UnsupportedOperation("not writable")
        length = len(s)
        haslf = (self._writetranslate or self._line_buffering) and '\n' in s
        if haslf and self._writetranslate and self._writenl != '\n':
            s = s.replace('\n', self._writenl)
        data = self._get_encoder().encode(s)
        await self.buffer.write(data)
        if self._line_buffering and (haslf or '\r' in s):
            await self.buffer.flush()
        if self._snapshot is not None or self._decoded:
            self._drop_decoded()
            if self._decoder is not None:
                self._decoder.reset()
        return length

    async def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            await self.write(line)

    async def flush(self) -> None:
        self._check_open()
        await self.buffer.flush()

    async def close(self) -> None:
        if self.buffer.closed:
            return
        try:
            await self.flush()
        finally:
            await self.buffer.close()

    async def __aenter__(self) -> 'AsyncTextFile':
        self._check_open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- position

    async def tell(self) -> int:
        """An opaque number for seek(): the builtin's cookie."""
        self._check_open()
        if not self.buffer._seekable:
            raise io.UnsupportedOperation("underlying stream is not seekable")
        await self.buffer.flush()
        position = await self.buffer.tell()
        if self._decoder is None or self._snapshot is None:
            return position
        dec_flags, fed = self._snapshot
        position -= len(fed)
        chars = self._used
        if chars == 0:
            return _pack_cookie(position, dec_flags)
        decoder = self._decoder
        saved = decoder.getstate()
        try:
            return self._cookie_at(position, dec_flags, fed, chars)
        finally:
            decoder.setstate(saved)

    def _cookie_at(self, position, dec_flags, fed, chars):
        """The builtin's cookie for `chars` characters into the text decoded
        from `fed` (from decoder flags dec_flags at `position`): the last
        point before them where the decoder holds no bytes, the bytes to
        feed from there, the characters to skip.  The builtin's search, so
        that the numbers are its: a guess from the last chunk's bytes per
        character, backed off until safe, then a byte at a time."""
        decoder = self._decoder
        start, flags, to_skip = position, dec_flags, chars
        skip_bytes = int(self._b2cratio * chars)
        skip_back = 1
        while skip_bytes > 0:
            decoder.setstate((b'', dec_flags))
            n = len(decoder.decode(fed[:skip_bytes]))
            if n <= chars:
                buffered, state_flags = decoder.getstate()
                if not buffered:
                    start, flags, to_skip = position + skip_bytes, state_flags, chars - n
                    break
                skip_bytes -= len(buffered)
                skip_back = 1
            else:
                skip_bytes -= skip_back
                skip_back *= 2
        if skip_bytes <= 0:
            skip_bytes = 0
            decoder.setstate((b'', dec_flags))
        if to_skip == 0:
            return _pack_cookie(start, flags)
        # a byte at a time, each safe point on the way the new start
        if skip_bytes == 0:
            decoder.setstate((b'', flags))
        fed_since = 0
        decoded = 0
        need_eof = False
        for i in range(skip_bytes, len(fed)):
            decoded += len(decoder.decode(fed[i:i + 1]))
            fed_since += 1
            buffered, state_flags = decoder.getstate()
            if not buffered and decoded <= to_skip:
                start += fed_since
                to_skip -= decoded
                flags = state_flags
                fed_since = 0
                decoded = 0
            if decoded >= to_skip:
                break
        else:
            decoded += len(decoder.decode(b'', True))
            need_eof = True
            if decoded < to_skip:
                raise OSError("can't reconstruct logical file position")
        return _pack_cookie(start, flags, fed_since, need_eof, to_skip)

    async def seek(self, cookie: int, whence: int = 0) -> int:
        """Go to a position tell() gave (whence 0), or to the start of the
        file's end (seek(0, 2)) or stay (seek(0, 1)): the new cookie."""
        self._check_open()
        if not self.buffer._seekable:
            raise io.UnsupportedOperation("underlying stream is not seekable")
        cookie = cookie.__index__() if not isinstance(cookie, float) else int(cookie)
        if whence == os.SEEK_CUR:
            if cookie != 0:
                raise io.UnsupportedOperation("can't do nonzero cur-relative seeks")
            cookie = await self.tell()
            whence = os.SEEK_SET
        elif whence == os.SEEK_END:
            if cookie != 0:
                raise io.UnsupportedOperation("can't do nonzero end-relative seeks")
            await self.buffer.flush()
            position = await self.buffer.seek(0, os.SEEK_END)
            self._drop_decoded()
            if self._decoder is not None:
                self._decoder.reset()
            self._reset_encoder(position)
            return position
        if whence != os.SEEK_SET:
            raise ValueError(f"invalid whence ({whence}, should be 0, 1 or 2)")
        if cookie < 0:
            raise ValueError(f"negative seek position {cookie!r}")
        await self.buffer.flush()
        position, dec_flags, bytes_to_feed, need_eof, chars_to_skip = _unpack_cookie(cookie)
        await self.buffer.seek(position)
        self._drop_decoded()
        if self._decoder is not None:
            # (at the start, reset(): a utf-16 decoder's first state
            # expects a BOM, which (b'', 0) would not)
            if cookie == 0:
                self._decoder.reset()
            else:
                self._decoder.setstate((b'', dec_flags))
                self._snapshot = (dec_flags, b'')
        if chars_to_skip:
            data = await self.buffer.read(bytes_to_feed)
            self._decoded = self._decoder.decode(data, need_eof)
            self._snapshot = (dec_flags, data)
            if len(self._decoded) < chars_to_skip:
                raise OSError("can't restore logical file position")
            self._used = chars_to_skip
        self._reset_encoder(cookie)
        return cookie

    def _reset_encoder(self, position):
        if self._encoder is not None or self.buffer._writable:
            encoder = self._get_encoder()
            if position == 0:
                encoder.reset()
            else:
                encoder.setstate(0)

    async def truncate(self, pos: int | None = None) -> int:
        await self.flush()
        if pos is None:
            pos = await self.tell()
        return await self.buffer.truncate(pos)

    # -- durability and metadata (as the binary file's)

    async def fsync(self) -> None:
        await self.buffer.fsync()

    async def datasync(self) -> None:
        await self.buffer.datasync()

    async def stat(self) -> os.stat_result:
        return await self.buffer.stat()
