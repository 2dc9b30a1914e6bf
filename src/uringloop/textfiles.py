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

    def __init__(self, buffer, mode, encoding, errors, newline, line_buffering):
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
        if buffer._seekable and buffer._writable and buffer._pos != 0:
            self._get_encoder().setstate(0)          # no BOM mid-file

    # -- attributes

    name = property(lambda self: self.buffer.name)
    closed = property(lambda self: self.buffer.closed)
    encoding = property(lambda self: self._encoding)
    errors = property(lambda self: self._errors)
    line_buffering = property(lambda self: self._line_buffering)
    write_through = property(lambda self: False)

    @property
    def newlines(self):
        return getattr(self._decoder, 'newlines', None)

    def fileno(self):
        return self.buffer.fileno()

    def readable(self):
        return self.buffer.readable()

    def writable(self):
        return self.buffer.writable()

    def seekable(self):
        return self.buffer.seekable()

    def isatty(self):
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

    async def _read_chunk(self):
        """Decode one more chunk onto the text not yet taken: False at the
        end of the file.  Cancelled in read1(), it changed nothing."""
        decoder = self._get_decoder()
        dec_buffer, dec_flags = decoder.getstate()
        chunk = await self.buffer.read1(_CHUNK)
        eof = not chunk
        decoded = decoder.decode(chunk, eof)
        if self._used >= len(self._decoded) or self._snapshot is None:
            self._decoded = decoded
            self._used = 0
            self._snapshot = (dec_flags, dec_buffer + chunk)
        else:
            self._decoded += decoded
            flags, fed = self._snapshot
            self._snapshot = (flags, fed + chunk)
        return not eof

    def _take(self, n):
        text = self._decoded[self._used:self._used + n]
        self._used += len(text)
        return text

    async def read(self, size=-1):
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
            if not await self._read_chunk():
                break
        return self._take(size)

    async def readline(self, size=-1):
        """One line with its ending, as the newline argument defines lines
        (up to size characters)."""
        self._check_open()
        size = _size(size)
        self._get_decoder()
        scanned = 0
        eof = False
        while True:
            while self._used >= len(self._decoded) and not eof:
                # nothing to search: a chunk first, even for a limit of 0
                # (the builtin's order, which a tell() afterwards shows)
                eof = not await self._read_chunk()
            text, used = self._decoded, self._used
            end = self._line_end(text, used + scanned, eof)
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
        return line

    def _line_end(self, text, start, eof):
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
            if r + 1 < len(text):
                return r + 2 if text[r + 1] == '\n' else r + 1
            return r + 1 if eof else -1
        i = text.find(self._readnl, start)
        return i + len(self._readnl) if i >= 0 else -1

    async def readlines(self, hint=-1):
        hint = _size(hint)
        lines = []
        total = 0
        while True:
            line = await self.readline()
            if not line:
                break
            lines.append(line)
            total += len(line)
            if 0 < hint <= total:
                break
        return lines

    def __aiter__(self):
        self._check_open()
        return self

    async def __anext__(self):
        line = await self.readline()
        if not line:
            raise StopAsyncIteration
        return line

    # -- writing

    async def write(self, s):
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

    async def writelines(self, lines):
        for line in lines:
            await self.write(line)

    async def flush(self):
        self._check_open()
        await self.buffer.flush()

    async def close(self):
        if self.buffer.closed:
            return
        try:
            await self.flush()
        finally:
            await self.buffer.close()

    async def __aenter__(self):
        self._check_open()
        return self

    async def __aexit__(self, *exc):
        await self.close()

    # -- position

    async def tell(self):
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

    def _decode_prefix(self, dec_flags, fed, m, final=False):
        """(characters, decoder state) after decoding fed[:m] from
        (b'', dec_flags)."""
        decoder = self._decoder
        decoder.setstate((b'', dec_flags))
        n = len(decoder.decode(fed[:m], final))
        return n, decoder.getstate()

    def _cookie_at(self, position, dec_flags, fed, chars):
        # the shortest prefix of the bytes fed that decodes to `chars`
        # characters or more (the count only grows with the prefix)
        lo, hi = 0, len(fed)
        while lo < hi:
            mid = (lo + hi) // 2
            if self._decode_prefix(dec_flags, fed, mid)[0] >= chars:
                hi = mid
            else:
                lo = mid + 1
        end = lo
        produced, (buf, flags) = self._decode_prefix(dec_flags, fed, end)
        need_eof = False
        if produced < chars:
            need_eof = True          # only the end of the file gives them
        elif produced == chars and not buf:
            return _pack_cookie(position + end, flags)
        # start at the last point before it where the decoder holds nothing,
        # feed the bytes from there, and skip what is already taken
        start = end
        while start > 0:
            start -= 1
            n, (buf, flags) = self._decode_prefix(dec_flags, fed, start)
            if not buf and n <= chars:
                return _pack_cookie(position + start, flags, end - start, need_eof,
                                    chars - n)
        return _pack_cookie(position, dec_flags, end, need_eof, chars)

    async def seek(self, cookie, whence=0):
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
        if cookie == 0 and self._decoder is not None:
            self._decoder.reset()
        elif self._decoder is not None or dec_flags or chars_to_skip:
            self._get_decoder().setstate((b'', dec_flags))
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

    async def truncate(self, pos=None):
        await self.flush()
        if pos is None:
            pos = await self.tell()
        return await self.buffer.truncate(pos)

    # -- durability and metadata (as the binary file's)

    async def fsync(self):
        await self.buffer.fsync()

    async def datasync(self):
        await self.buffer.datasync()

    async def stat(self):
        return await self.buffer.stat()


def _size(size):
    if size is None:
        return -1
    try:
        return size.__index__()
    except AttributeError:
        raise TypeError(f"argument should be integer or None, not "
                        f"'{type(size).__name__}'") from None
