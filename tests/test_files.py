"""uringloop.open() against the builtin open(), call by call.

Every test runs on a uringloop loop (requests on the ring) and on the
stdlib loop (the same objects through the loop's executor); the builtin
file on the same file is the reference for every result, position and
exception.
"""
import asyncio
import errno
import gc
import itertools
import os
import threading
import warnings

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import uringloop
from conftest import on_both_loops, turns, until
from protocols import collected_connection

_names = itertools.count()


def outcome(call):
    """A call's result or its exception, comparably."""
    try:
        return ('ok', call())
    except Exception as exc:      # compared, not swallowed
        return ('raise', type(exc), getattr(exc, 'errno', None) or str(exc))


async def async_outcome(call):
    try:
        return ('ok', await call())
    except Exception as exc:
        return ('raise', type(exc), getattr(exc, 'errno', None) or str(exc))


def run(loop, coro):
    return loop.run_until_complete(coro)


# ---- random sequences of calls ------------------------------------------------

binary_calls = st.one_of(
    st.tuples(st.just('read'), st.sampled_from([-5, -1, 0, 1, 2, 7, 100, 5000, 20000, None])),
    st.tuples(st.just('read1'), st.sampled_from([-5, -1, 0, 1, 3, 100, 9000])),
    st.tuples(st.just('readline'), st.sampled_from([-5, -1, 0, 1, 5, 50])),
    st.tuples(st.just('readinto'), st.sampled_from([0, 1, 10, 5000, 20000])),
    st.tuples(st.just('seek'), st.integers(-3, 30000), st.sampled_from([0, 1, 2])),
    st.tuples(st.just('tell')),
    st.tuples(st.just('write'), st.binary(max_size=300) | st.sampled_from(
        [b'\n' * 9000, bytes(range(256)) * 40])),
    st.tuples(st.just('flush')),
    st.tuples(st.just('truncate'), st.sampled_from([None, 0, 3, 10000])),
    st.tuples(st.just('readlines')),
)

text_chars = st.sampled_from(['a', 'b', '\n', '\r', '\r\n', 'é', '€', '𝄞', 'x' * 50])
text_calls = st.one_of(
    st.tuples(st.just('read'), st.sampled_from([-5, -1, 0, 1, 2, 7, 100, 9000])),
    st.tuples(st.just('readline'), st.sampled_from([-5, -1, 0, 1, 5, 50])),
    st.tuples(st.just('tell')),
    st.tuples(st.just('seek_told')),           # back to a position tell() gave
    st.tuples(st.just('seek'), st.sampled_from([0]), st.sampled_from([0, 1, 2])),
    st.tuples(st.just('readlines')),
)


def initial_content(draw_bytes):
    return draw_bytes


async def apply(f, call, told, sync):
    name, *args = call
    if name == 'readinto':
        buf = bytearray(args[0])
        n = f.readinto(buf) if sync else await f.readinto(buf)
        return (n, bytes(buf))
    if name == 'seek_told':
        if not told:
            return None
        args = [told[-1]]
        name = 'seek'
    result = getattr(f, name)(*args)
    if not sync:
        result = await result
    if name == 'tell':
        told.append(result)
    return result


def reference_run(opener, path, mode, calls, content, kwargs):
    """The outcomes of calls on a builtin file, and the file's bytes then."""
    with open(path, 'wb') as w:
        w.write(content)
    f = opener(path, mode, **kwargs)
    told = []
    outcomes = []
    try:
        for call in calls:
            if call[0] != 'seek_told' and not hasattr(f, call[0]):
                outcomes.append(None)       # FileIO (buffering=0) has no read1()
                continue
            outcomes.append(outcome(lambda: _sync(apply(f, call, told, True))))
    finally:
        f.close()
    with open(path, 'rb') as r:
        return outcomes, r.read()


async def compare_calls(path, mode, calls, content, **kwargs):
    """Make calls on a uringloop file and on a builtin one over the same
    bytes; every outcome and the bytes at the end must be the same."""
    expected, expected_bytes = reference_run(open, f'{path}.c', mode, calls, content, kwargs)
    with open(path, 'wb') as w:
        w.write(content)
    ours = await uringloop.open(path, mode, **kwargs)
    told = []
    try:
        for i, call in enumerate(calls):
            if expected[i] is None:
                continue
            got = await async_outcome(lambda: apply(ours, call, told, False))
            assert got == expected[i], (i, call, calls[:i + 1])
    finally:
        await ours.close()
    with open(path, 'rb') as r:
        assert r.read() == expected_bytes, calls


def _sync(coro):
    """Run a coroutine that never awaits anything (the builtin side)."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    raise AssertionError('the builtin side awaited')


SETTINGS = settings(max_examples=int(os.environ.get("FILES_EXAMPLES", 60)), deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


READS = {'read', 'read1', 'readline', 'readinto', 'readlines'}


def append_write_over_read_ahead(calls):
    """How many of calls to make on an 'a+b' file with a buffer: up to
    and including the first write made while the builtin may hold
    read-ahead (a read since the last flush or truncate, which drop it).
    From there CPython 3.11's BufferedRandom reads stale bytes and tells
    positions past the end of the file:
    test_append_mode_reads_on_from_the_end_after_a_write."""
    read_ahead = False
    for i, (name, *_) in enumerate(calls):
        if name in READS:
            read_ahead = True
        elif name in ('flush', 'truncate'):
            read_ahead = False
        elif name == 'write' and read_ahead:
            return i + 1
    return len(calls)


@SETTINGS
@given(mode=st.sampled_from(['rb', 'r+b', 'w+b', 'a+b', 'wb', 'ab']),
       buffering=st.sampled_from([-1, 0, 1, 16, 4096]),
       content=st.binary(max_size=200) | st.sampled_from([b'line\n' * 3000, b'x' * 20000]),
       calls=st.lists(binary_calls, max_size=25))
def test_binary_files_answer_every_call_as_the_builtin_does(any_loop, tmp_path, mode,
                                                           buffering, content, calls):
    names = [c[0] for c in calls]
    if 'write' in names and 'read1' in names[names.index('write'):]:
        # the builtin's BufferedRandom.read1() after a write is wrong in
        # CPython 3.11: test_read1_after_write_reads_at_the_position
        calls = [c for c in calls if c[0] != 'read1']
    if mode == 'a+b' and buffering != 0:
        calls = calls[:append_write_over_read_ahead(calls)]
    path = tmp_path / f'f{next(_names)}'
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', RuntimeWarning)     # buffering=1, binary
        run(any_loop, compare_calls(path, mode, calls, content, buffering=buffering))


@SETTINGS
@given(mode=st.sampled_from(['r', 'r+', 'rt']),
       encoding=st.sampled_from(['utf-8', 'latin-1', 'utf-16', 'utf-8-sig', 'cp1252']),
       newline=st.sampled_from([None, '', '\n', '\r', '\r\n']),
       text=st.lists(text_chars, max_size=3000).map(''.join),
       calls=st.lists(text_calls, max_size=25))
def test_text_files_read_seek_and_tell_as_the_builtin_does(any_loop, tmp_path, mode, encoding,
                                                         newline, text, calls):
    content = text.encode(encoding, 'replace')
    path = tmp_path / f'f{next(_names)}'
    run(any_loop, compare_calls(path, mode, calls, content, encoding=encoding,
                                newline=newline, errors='replace'))


@SETTINGS
@given(encoding=st.sampled_from(['utf-8', 'utf-16', 'utf-8-sig', 'latin-1']),
       newline=st.sampled_from([None, '', '\n', '\r', '\r\n']),
       pieces=st.lists(st.lists(text_chars, max_size=30).map(''.join), max_size=20),
       mode=st.sampled_from(['w', 'a', 'w+']))
def test_text_writes_make_the_bytes_the_builtin_makes(any_loop, tmp_path, encoding, newline,
                                                     pieces, mode):
    path = tmp_path / f'f{next(_names)}'
    calls = [('write', p) for p in pieces] + [('tell',)]
    run(any_loop, compare_calls(path, mode, calls, b'', encoding=encoding, newline=newline,
                                errors='replace'))


@pytest.mark.parametrize("mode", ['rb', 'r+b'])
@pytest.mark.parametrize("buffering", [-1, 16, 4096])
def test_flush_of_a_file_open_for_both_drops_its_read_ahead(any_loop, tmp_path, mode, buffering):
    """flush() of a file open for reading and writing drops what it read
    ahead, as the builtin's BufferedRandom does (read1() then reads a
    buffer's worth from the position); a file open for reading only keeps
    it.  Found by the randomized test above on a 3.12 debug run."""
    path = tmp_path / 'f'
    calls = [('readline', -5), ('flush',), ('read1', -5), ('flush',), ('read1', 3)]
    run(any_loop, compare_calls(path, mode, calls, b'line\n' * 3000, buffering=buffering))


@pytest.mark.parametrize("mode", ['a+b', 'r+b', 'wb'])
@pytest.mark.parametrize("sizes", [(8, 8), (16,), (10, 8), (17,), (3, 20, 16)])
def test_a_write_that_fills_the_buffer_is_kept_or_written_as_the_builtin_does(
        any_loop, tmp_path, mode, sizes):
    """A write that fills the buffer exactly: CPython 3.11 and 3.12 keep it
    and write through only what is larger than a buffer; 3.13 and later
    write it straight out.  uringloop.open() does what the running
    builtin does.  In 'a+b' tell() shows the difference (O_APPEND moves
    the raw position at the write).  Found by the randomized test above:
    'a+b', buffering=16, two 8-byte writes, tell() gave 17 where the
    builtin gave 16."""
    path = tmp_path / 'f'
    calls = [('seek', 0, 0)]
    for n in sizes:
        calls += [('write', bytes([65 + n]) * n), ('tell',)]
    run(any_loop, compare_calls(path, mode, calls, b'\0', buffering=16))


def test_read1_after_write_reads_at_the_position(any_loop, tmp_path):
    # The builtin's BufferedRandom.read1() after a write returns the bytes
    # from before the written ones (CPython 3.11: b'ABCDEF' below, and
    # tell() 7); _pyio, the same rules in Python, and uringloop read on
    # from the position.
    import _pyio
    path = tmp_path / 'f'
    path.write_bytes(b'ABCDEF')
    with _pyio.open(path, 'r+b') as ref:
        ref.write(b'x')
        expected = (ref.read1(-1), ref.tell())
    assert expected == (b'BCDEF', 6)
    path.write_bytes(b'ABCDEF')

    async def main():
        async with uringloop.open(path, 'r+b') as f:
            await f.write(b'x')
            return (await f.read1(-1), await f.tell())
    assert run(any_loop, main()) == expected


def test_readline_of_nothing_after_the_last_line_reads_nothing(any_loop, tmp_path):
    # A file ending in '\r' under universal newlines: the last line comes
    # out at the end of the file, and readline(0) then reads no chunk (the
    # builtin holds the taken text), so tell() still gives the cookie that
    # says "at the end, with the decoder's '\r' fed".
    path = tmp_path / 'f'
    path.write_bytes(b'\r')
    calls = [('readline', -5), ('readline', 0), ('tell',)]
    expected, _ = reference_run(open, f'{path}.c', 'r', calls, b'\r',
                                dict(encoding='utf-8', newline=None))
    assert expected[2][1] > 1 << 160        # (need_eof is in the cookie)
    run(any_loop, compare_calls(path, 'r', calls, b'\r', encoding='utf-8', newline=None))


def test_append_mode_reads_on_from_the_end_after_a_write(any_loop, tmp_path):
    # In append mode a write goes to the end of the file, and the position
    # with it.  The builtin's BufferedRandom, written to while it holds
    # read-ahead, reads on from its stale buffer instead (CPython 3.11:
    # b'\x00' below, and tell() 5 in a 4-byte file); _pyio, the same rules
    # in Python, and uringloop read on from the end.
    import _pyio
    path = tmp_path / 'f'
    path.write_bytes(b'\x00' * 3)
    with _pyio.open(path, 'a+b') as ref:
        ref.read(1)
        ref.write(b'x')
        expected = (ref.read(-1), ref.tell())
    assert expected == (b'', 4)
    path.write_bytes(b'\x00' * 3)

    async def main():
        async with uringloop.open(path, 'a+b') as f:
            await f.read(1)
            await f.write(b'x')
            return (await f.read(-1), await f.tell())
    assert run(any_loop, main()) == expected
    assert path.read_bytes() == b'\x00\x00\x00x'


# ---- arguments and errors ---------------------------------------------------------

BAD_ARGUMENTS = [
    dict(mode='rw'), dict(mode='rb', encoding='utf-8'), dict(mode='r', newline='x'),
    dict(mode='r', buffering=0), dict(file=1.5), dict(file='x\0'), dict(closefd=False),
    dict(encoding='nope'), dict(encoding='hex'), dict(errors=3), dict(file=None),
    dict(mode='rbt'), dict(mode=''), dict(mode='r', newline=5), dict(file=-1),
    dict(buffering='x'), dict(mode='rr'), dict(mode='b'), dict(mode=5),
]


async def open_and_close(**kwargs):
    f = await uringloop.open(**kwargs)
    await f.close()
    return f.closed


def full_outcome(call):
    try:
        call()
        return ('ok',)
    except Exception as exc:
        return (type(exc), str(exc), getattr(exc, 'errno', None), getattr(exc, 'filename', None))


async def async_full_outcome(call):
    try:
        await call()
        return ('ok',)
    except Exception as exc:
        return (type(exc), str(exc), getattr(exc, 'errno', None), getattr(exc, 'filename', None))


@pytest.mark.parametrize('args', BAD_ARGUMENTS, ids=repr)
def test_bad_arguments_raise_what_the_builtin_open_raises(any_loop, tmp_path, args):
    path = tmp_path / 'exists'
    path.write_text('x')
    kwargs = {'file': str(path), **args}
    expected = full_outcome(lambda: open(**kwargs).close())
    assert expected != ('ok',)
    assert run(any_loop, async_full_outcome(lambda: open_and_close(**kwargs))) == expected


def test_errors_of_the_file_system_are_the_builtin_open_s(any_loop, tmp_path):
    (tmp_path / 'file').write_text('x')
    (tmp_path / 'dir').mkdir()
    cases = [(tmp_path / 'missing', 'r'), (tmp_path / 'missing', 'r+b'),
             (tmp_path / 'no' / 'such', 'w'), (tmp_path / 'dir', 'r'),
             (tmp_path / 'dir', 'rb'), (tmp_path / 'dir', 'w'), (tmp_path / 'file', 'x'),
             (tmp_path / 'file' / 'under', 'r'), (str(tmp_path / 'missing'), 'r'),
             (bytes(tmp_path / 'missing'), 'rb')]
    for path, mode in cases:
        expected = full_outcome(lambda: open(path, mode).close())
        assert expected != ('ok',)
        got = run(any_loop, async_full_outcome(lambda: open_and_close(file=path, mode=mode)))
        assert got == expected, (path, mode)


def test_a_full_disk_raises_enospc_at_the_flush_as_the_builtin(any_loop):
    def builtin():
        with open('/dev/full', 'wb') as f:
            f.write(b'x' * 10)

    async def ours():
        f = await uringloop.open('/dev/full', 'wb')
        try:
            await f.write(b'x' * 10)
            await f.flush()
        finally:
            f._wbuf.clear()          # what cannot be written is dropped
            await f.close()
    expected = full_outcome(builtin)
    assert expected[2] == errno.ENOSPC
    assert run(any_loop, async_full_outcome(ours))[:3] == expected[:3]


PERMISSION_CHILD = r'''
import asyncio, json, os, sys
import concurrent.futures.thread    # (imported while the modules are readable)
import uringloop
path = sys.argv[1]
os.setgid(65534); os.setuid(65534)
def builtin():
    try:
        open(path, "r").close(); return "ok"
    except OSError as e:
        return [type(e).__name__, e.errno, str(e)]
async def ours():
    try:
        await (await uringloop.open(path, "r")).close(); return "ok"
    except OSError as e:
        return [type(e).__name__, e.errno, str(e)]
loop = uringloop.new_event_loop() if sys.argv[2] == "ring" else asyncio.SelectorEventLoop()
print(json.dumps([builtin(), loop.run_until_complete(ours())]))
loop.close()
'''


@pytest.mark.parametrize('where', ['ring', 'thread'])
def test_a_file_the_user_may_not_read_raises_permission_error(tmp_path, where):
    import json
    import subprocess
    import sys
    if os.geteuid() != 0:
        pytest.skip('needs root to become another user')
    path = tmp_path / 'secret'
    path.write_text('x')
    path.chmod(0o600)
    tmp_path.chmod(0o755)
    out = subprocess.run([sys.executable, '-c', PERMISSION_CHILD, str(path), where],
                         capture_output=True, text=True, check=True).stdout
    builtin, ours = json.loads(out)
    assert builtin[:2] == ['PermissionError', errno.EACCES]
    assert ours == builtin


def test_stat_is_os_stat(any_loop, tmp_path):
    path = tmp_path / 'f'
    path.write_bytes(b'x' * 1000)
    link = tmp_path / 'link'
    link.symlink_to(path)

    async def main():
        assert await uringloop.stat(path) == os.stat(path)
        assert await uringloop.stat(str(link)) == os.stat(link)
        assert (await uringloop.stat(link, follow_symlinks=False)
                == os.stat(link, follow_symlinks=False))
        dir_fd = os.open(tmp_path, os.O_RDONLY)
        try:
            assert await uringloop.stat('f', dir_fd=dir_fd) == os.stat('f', dir_fd=dir_fd)
        finally:
            os.close(dir_fd)
        async with uringloop.open(path, 'rb') as f:
            assert await f.stat() == os.stat(path)
            assert await uringloop.stat(f.fileno()) == os.fstat(f.fileno())
        missing = tmp_path / 'missing'
        with pytest.raises(FileNotFoundError) as got:
            await uringloop.stat(missing)
        with pytest.raises(FileNotFoundError) as expected:
            os.stat(missing)
        assert str(got.value) == str(expected.value)
    run(any_loop, main())


# ---- large files ---------------------------------------------------------------

def test_offsets_past_4_gib_in_a_sparse_file(any_loop, tmp_path):
    path = tmp_path / 'sparse'
    far = 2 ** 32 + 7

    async def main():
        async with uringloop.open(path, 'w+b') as f:
            assert await f.truncate(5 * 2 ** 30) == 5 * 2 ** 30
            assert await f.pwrite(b'far', far) == 3
            assert await f.pwrite(b'mid', 2 ** 31 - 1) == 3
            assert await f.seek(far - 2) == far - 2
            assert await f.read(7) == b'\0\0far\0\0'
            assert await f.tell() == far + 5
            assert await f.seek(-5, os.SEEK_END) == 5 * 2 ** 30 - 5
            await f.write(b'end')
            assert await f.pread(3, 2 ** 31 - 1) == b'mid'
            assert await f.seek(2 ** 32) == 2 ** 32
            data_at = await f.seek(2 ** 32, os.SEEK_DATA)
            assert data_at <= far
            return (await f.stat()).st_size
    assert run(any_loop, main()) == 5 * 2 ** 30
    with open(path, 'rb') as f:
        f.seek(far)
        assert f.read(3) == b'far'
        f.seek(2 ** 31 - 1)
        assert f.read(3) == b'mid'
        f.seek(-5, os.SEEK_END)
        assert f.read() == b'end\0\0'
    assert os.stat(path).st_blocks * 512 < 2 ** 20       # still sparse


@pytest.mark.parametrize('size', [0, 1, 2, 2 ** 31, 2 ** 32])
def test_read_sizes_up_to_4_gib_on_a_small_file(any_loop, tmp_path, size):
    path = tmp_path / 'small'
    path.write_bytes(b'0123456789')
    with open(path, 'rb') as f:
        expected = (f.read(size), f.tell())

    async def main():
        async with uringloop.open(path, 'rb') as f:
            got = (await f.read(size), await f.tell())
            assert await f.pread(size, 3) == b'3456789'[:size]
            return got
    assert run(any_loop, main()) == expected


# ---- cancellation at every await ------------------------------------------------

async def cancel_after(coro, spins):
    """Run coro as a task, cancel it after `spins` turns of the loop: its
    result, or None when the cancel won."""
    task = asyncio.ensure_future(coro)
    for _ in range(spins):
        await asyncio.sleep(0)
    task.cancel()
    try:
        return await task
    except asyncio.CancelledError:
        return None


READS = {
    'read': lambda f: f.read(5000),
    'read_all': lambda f: f.read(),
    'read1': lambda f: f.read1(300),
    'readline': lambda f: f.readline(),
    'readinto': lambda f: f.readinto(bytearray(9000)),
}


@pytest.mark.parametrize('call', sorted(READS))
@pytest.mark.parametrize('buffering', [-1, 0, 64])
def test_a_cancelled_read_loses_nothing(any_loop, tmp_path, call, buffering):
    content = os.urandom(20000).replace(b'\n', b'') + b'\n' + os.urandom(3000)
    path = tmp_path / 'f'
    path.write_bytes(content)

    async def main():
        async with uringloop.open(path, 'rb', buffering=buffering) as f:
            got = b''
            for spins in itertools.chain(range(6), range(6)):
                start = await f.tell()
                assert start == len(got)
                result = await cancel_after(READS[call](f), spins)
                if call == 'readinto' and result is not None:
                    result = b'x' * result      # (its count, below)
                    got += content[start:start + len(result)]
                elif result is not None:
                    got += result
                assert await f.tell() == len(got), (spins, result is None)
            got += await f.read()
            return got
    assert run(any_loop, main()) == content


@pytest.mark.parametrize('call', ['read', 'readline', 'iterate'])
def test_a_cancelled_text_read_loses_nothing(any_loop, tmp_path, call):
    text = ''.join(f'line {i} é€𝄞\r\n' for i in range(3000))
    path = tmp_path / 'f'
    path.write_bytes(text.encode('utf-8'))
    async def next_line(f):
        try:
            return await f.__anext__()
        except StopAsyncIteration:
            return ''
    calls = {'read': lambda f: f.read(777), 'readline': lambda f: f.readline(),
             'iterate': next_line}

    async def main():
        async with uringloop.open(path, encoding='utf-8', newline='') as f:
            got = ''
            while True:
                for spins in range(5):
                    result = await cancel_after(calls[call](f), spins)
                    if result:
                        got += result
                        told = await f.tell()
                        await f.seek(told)          # the cookie holds
                rest = await f.read(50000)
                got += rest
                if not rest:
                    return got
    assert run(any_loop, main()) == text


def test_a_cancelled_read_of_a_pipe_keeps_its_bytes(any_loop):
    r, w = os.pipe()
    sent = []

    async def main():
        loop = asyncio.get_running_loop()
        f = await uringloop.open(r, 'rb', buffering=0)
        got = b''
        try:
            for i in range(40):
                chunk = bytes([i % 256]) * (i + 1)
                if i % 3:
                    os.write(w, chunk)
                    sent.append(chunk)
                else:
                    loop.call_soon(os.write, w, chunk)     # while the read waits
                    sent.append(chunk)
                result = await cancel_after(f.read(100), i % 4)
                if result:
                    got += result
            await asyncio.sleep(0)
            os.close(w)
            while True:
                data = await f.read(1000)
                if not data:
                    return got
                got += data
        finally:
            await f.close()
    try:
        assert run(any_loop, main()) == b''.join(sent)
    finally:
        for fd in (w,):
            try:
                os.close(fd)
            except OSError:
                pass


def test_a_non_blocking_pipe_is_read_when_ready(any_loop):
    r, w = os.pipe()
    os.set_blocking(r, False)

    async def main():
        loop = asyncio.get_running_loop()
        async with uringloop.open(r, 'rb', buffering=0) as f:
            loop.call_later(0.01, os.write, w, b'late')
            return await f.read(10)
    try:
        assert run(any_loop, main()) == b'late'
    finally:
        os.close(w)


@pytest.mark.parametrize('buffering', [-1, 0, 16])
def test_a_cancelled_write_is_written_once(any_loop, tmp_path, buffering):
    path = tmp_path / 'f'
    chunks = [bytes([65 + i % 26]) * (1 + i * 997 % 20000) for i in range(30)]

    async def main():
        written = []
        async with uringloop.open(path, 'wb', buffering=buffering) as f:
            for i, chunk in enumerate(chunks):
                before = await f.tell()
                await cancel_after(f.write(chunk), i % 4)
                # all of it or (cancelled before it began) none
                moved = await f.tell() - before
                assert moved in (0, len(chunk)), (i, moved)
                if moved:
                    written.append(chunk)
            for spins in range(3):
                await cancel_after(f.flush(), spins)
        assert len(written) > len(chunks) // 2
        return b''.join(written)
    written = run(any_loop, main())
    assert path.read_bytes() == written


def test_a_cancelled_open_leaves_no_file_open(any_loop, tmp_path):
    path = tmp_path / 'f'
    path.write_bytes(b'x')
    before = set(os.listdir('/proc/self/fd'))

    async def main():
        async def opening():
            return await uringloop.open(path, 'rb')
        for spins in range(4):
            f = await cancel_after(opening(), spins)
            if f is not None:
                await f.close()
        # a thread's open ends too (the stdlib loop's, or a fallback's):
        # once the executor's threads are done, whatever they opened is
        # closed by its delivery to the loop (until() alone could pass
        # before a late thread had opened anything)
        await asyncio.get_running_loop().shutdown_default_executor()
        await until(lambda: set(os.listdir('/proc/self/fd')) <= before,
                    "every opened file closed")
    run(any_loop, main())
    assert set(os.listdir('/proc/self/fd')) <= before


# ---- life cycle ------------------------------------------------------------------

def test_close_ends_a_read_waiting_on_a_quiet_pipe(any_loop):
    r, w = os.pipe()

    async def main():
        f = await uringloop.open(r, 'rb', buffering=0)
        reader = asyncio.ensure_future(f.read(10))
        await turns()                   # the read waits
        await f.close()
        with pytest.raises((ValueError, asyncio.CancelledError)):
            await reader
        assert f.closed
    try:
        run(any_loop, main())
        with pytest.raises(OSError):
            os.fstat(r)
    finally:
        os.close(w)


def test_calls_on_a_closed_file_raise_value_error(any_loop, tmp_path):
    path = tmp_path / 'f'
    path.write_bytes(b'abc')

    calls = [('read', ()), ('read', (1,)), ('read1', (1,)), ('readline', ()),
             ('readline', (0,)), ('readinto', (bytearray(3),)), ('readlines', ()),
             ('peek', ()), ('write', (b'x',)), ('truncate', ()), ('tell', ()),
             ('seek', (0,)), ('flush', ())]

    async def main():
        for mode, buffering in (('rb', -1), ('r+b', -1), ('wb', -1), ('ab', -1),
                                ('rb', 0), ('r+b', 0), ('r', -1), ('w', -1)):
            f = await uringloop.open(path, mode, buffering=buffering)
            await f.close()
            await f.close()                     # twice: nothing
            ref = open(path, mode, buffering=buffering)
            ref.close()
            for name, args in calls:
                if not hasattr(ref, name):
                    continue
                if 'b' not in mode and name == 'write':
                    args = ('x',)
                expected = full_outcome(lambda: getattr(ref, name)(*args))
                got = await async_full_outcome(lambda: getattr(f, name)(*args))
                assert got == expected, (mode, buffering, name, args)
    run(any_loop, main())


def test_closing_the_loop_writes_out_and_closes_its_files(uloop, tmp_path):
    path = tmp_path / 'f'

    async def main():
        f = await uringloop.open(path, 'wb')
        await f.write(b'buffered')
        return f
    f = run(uloop, main())
    fd = f._fd
    uloop.close()
    assert f.closed
    assert path.read_bytes() == b'buffered'
    with pytest.raises(OSError):
        os.fstat(fd)


def test_a_file_collected_unclosed_warns_writes_out_and_closes(any_loop, tmp_path):
    path = tmp_path / 'f'

    async def main():
        f = await uringloop.open(path, 'wb')
        await f.write(b'kept')
        return f._fd
    with pytest.warns(ResourceWarning, match='unclosed file'):
        fd = run(any_loop, main())
        gc.collect()
    assert path.read_bytes() == b'kept'
    with pytest.raises(OSError):
        os.fstat(fd)


def test_an_fd_with_closefd_false_stays_open(any_loop, tmp_path):
    path = tmp_path / 'f'
    path.write_bytes(b'abc')
    fd = os.open(path, os.O_RDONLY)

    async def main():
        async with uringloop.open(fd, 'rb', closefd=False) as f:
            assert f.name == fd
            return await f.read()
    try:
        assert run(any_loop, main()) == b'abc'
        os.fstat(fd)
    finally:
        os.close(fd)


def test_an_opener_gets_the_builtin_s_flags(any_loop, tmp_path):
    seen = []

    def opener(path, flags):
        seen.append((path, flags))
        return os.open(path, flags, 0o600)
    path = tmp_path / 'f'
    with open(path, 'a', opener=opener):
        pass

    async def main():
        async with uringloop.open(path, 'a', opener=opener) as f:
            await f.write('x')
    run(any_loop, main())
    assert seen[0] == seen[1]
    assert path.read_text() == 'x'


def test_files_on_the_ring_use_no_thread(uloop, tmp_path):
    path = tmp_path / 'f'

    async def main():
        async with uringloop.open(path, 'w+') as f:
            await f.write('hello\n' * 1000)
            await f.seek(0)
            lines = [line async for line in f]
            await f.fsync()
            await f.datasync()
            await f.truncate(6)
            assert (await f.stat()).st_size == 6
        await uringloop.stat(path)
        return len(lines)
    threads = threading.active_count()
    assert run(uloop, main()) == 1000
    assert uloop._default_executor is None
    assert threading.active_count() == threads


def test_two_tasks_reading_one_file_take_turns(any_loop, tmp_path):
    path = tmp_path / 'f'
    content = b''.join(b'%05d\n' % i for i in range(20000))
    path.write_bytes(content)

    async def main():
        async with uringloop.open(path, 'rb') as f:
            async def reader():
                got = []
                while line := await f.readline():
                    got.append(line)
                    await asyncio.sleep(0)
                return got
            a, b = await asyncio.gather(reader(), reader())
            return sorted(a + b)
    assert b''.join(run(any_loop, main())) == content


def test_concurrent_preads_of_one_file(any_loop, tmp_path):
    path = tmp_path / 'f'
    content = os.urandom(1 << 20)
    path.write_bytes(content)

    async def main():
        async with uringloop.open(path, 'rb') as f:
            offsets = [(i * 7919) % (len(content) - 4096) for i in range(256)]
            results = await asyncio.gather(*(f.pread(4096, o) for o in offsets))
            return all(r == content[o:o + 4096] for r, o in zip(results, offsets))
    assert run(any_loop, main())


# ---- sendfile without the copy ------------------------------------------------------

@pytest.fixture(params=['sendfile', 'splice'])
def sendfile_method(request, monkeypatch):
    # sendfile(2) on the loop's thread (the default) or SPLICE on the ring
    # (URINGLOOP_SENDFILE=splice): both move the file with no user copy.
    # Read when a loop is made: the tests ask for this fixture before uloop,
    # and check that their loop took it (stats()['sendfile_method']).
    monkeypatch.setenv('URINGLOOP_SENDFILE', request.param)
    return request.param


@pytest.mark.parametrize('offset,count', [(0, None), (12345, 3 << 20), (5 << 20, None),
                                          (0, 1), (8 << 20, None)])
def test_sock_sendfile_moves_the_file_without_a_user_copy(sendfile_method, uloop, tmp_path,
                                                          offset, count):
    assert uloop.stats()['sendfile_method'] == sendfile_method
    import socket
    content = os.urandom(8 << 20)
    path = tmp_path / 'f'
    path.write_bytes(content)
    expected = content[offset:offset + count if count else None]

    async def main():
        a, b = socket.socketpair()
        a.setblocking(False)
        b.setblocking(False)
        loop = asyncio.get_running_loop()

        async def receive():
            got = bytearray()
            while True:
                data = await loop.sock_recv(b, 1 << 20)
                if not data:
                    return bytes(got)
                got += data
        receiver = asyncio.ensure_future(receive())
        with open(path, 'rb') as f:
            sent = await loop.sock_sendfile(a, f, offset, count)
            position = f.tell()
        a.close()
        got = await receiver
        b.close()
        return sent, position, got
    before = uloop.stats()
    sent, position, got = run(uloop, main())
    assert got == expected
    assert sent == len(expected)
    assert position == offset + len(expected) or not expected
    after = uloop.stats()
    assert after['sendfile_zero_copy'] - before['sendfile_zero_copy'] == len(expected)
    assert after['sendfile_copied'] == before['sendfile_copied']


@pytest.mark.parametrize('offset,count', [(0, None), (5, None), (10, None), (25, None),
                                          (10, 4), (25, 4)])
@pytest.mark.parametrize('empty', [False, True])
def test_sendfile_leaves_the_file_where_the_stdlib_leaves_it(offset, count, empty, tmp_path):
    # The file's position after sock_sendfile() and loop.sendfile(),
    # including nothing sent (offset at or past the end): up to 3.13 the
    # stdlib moves it only when something was sent, from 3.14 always (but
    # for an empty file).  The same scenario on both loops.
    import socket
    path = tmp_path / 'f'
    path.write_bytes(b'' if empty else b'0123456789')

    def scenario(loop):
        async def main():
            outcomes = []
            for how in ('sock', 'transport'):
                a, b = socket.socketpair()
                a.setblocking(False)
                with open(path, 'rb') as f:
                    f.seek(3)
                    try:
                        if how == 'sock':
                            sent = await loop.sock_sendfile(a, f, offset, count)
                        else:
                            transport, _ = await loop.create_connection(
                                asyncio.Protocol, sock=a)
                            sent = await loop.sendfile(transport, f, offset, count)
                            transport.close()
                    except Exception as exc:
                        sent = type(exc).__name__
                    outcomes.append((how, sent, f.tell()))
                a.close()
                b.close()
            await asyncio.sleep(0)
            return outcomes
        return loop.run_until_complete(main())
    ours, reference = on_both_loops(scenario)
    assert ours == reference


def test_a_cancelled_sendfile_leaves_no_request_and_no_pipe(sendfile_method, uloop, tmp_path):
    assert uloop.stats()['sendfile_method'] == sendfile_method
    import socket
    path = tmp_path / 'f'
    path.write_bytes(os.urandom(32 << 20))
    before = set(os.listdir('/proc/self/fd'))
    in_flight = uloop.stats()['ops_in_flight']      # (the loop's own wake-up read)

    async def main():
        a, b = socket.socketpair()
        a.setblocking(False)
        loop = asyncio.get_running_loop()
        with open(path, 'rb') as f:
            for spins in range(6):
                task = asyncio.ensure_future(loop.sock_sendfile(a, f))
                for _ in range(spins):
                    await asyncio.sleep(0)
                task.cancel()       # the peer never reads: the socket fills
                with pytest.raises(asyncio.CancelledError):
                    await task
        await until(lambda: uloop.stats()['ops_in_flight'] == in_flight,
                    "the cancels")
        a.close()
        b.close()
    run(uloop, main())
    assert uloop.stats()['ops_in_flight'] == in_flight
    assert set(os.listdir('/proc/self/fd')) <= before


def test_aiohttp_file_response_moves_the_file_without_a_user_copy(sendfile_method, uloop,
                                                                  tmp_path):
    assert uloop.stats()['sendfile_method'] == sendfile_method
    aiohttp = pytest.importorskip('aiohttp')
    from aiohttp import web
    content = os.urandom((16 << 20) + 123)
    path = tmp_path / 'static.bin'
    path.write_bytes(content)

    async def static(request):
        return web.FileResponse(path)

    async def main():
        app = web.Application()
        app.router.add_get('/f', static)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, '127.0.0.1', 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        try:
            async with aiohttp.ClientSession() as session:
                async with session.get(f'http://127.0.0.1:{port}/f') as r:
                    return await r.read()
        finally:
            await runner.cleanup()
    assert run(uloop, main()) == content
    assert uloop.stats()['sendfile_zero_copy'] == len(content)
    assert uloop.stats()['sendfile_copied'] == 0


def test_a_text_read_after_a_write_reads_on_from_the_write(any_loop, tmp_path):
    # CPython 3.11's C TextIOWrapper holds written text back from its
    # buffer, so a read right after a write in a '+' mode reads the bytes
    # from before it and the write lands after them: 'abc', write('x'),
    # read(1) gives 'a' and leaves 'abcx'.  _pyio, the same rules in
    # Python, and uringloop read 'b' and leave 'xbc'.
    import _pyio
    path = tmp_path / 'f'
    path.write_bytes(b'abc')
    with _pyio.open(path, 'r+') as ref:
        ref.write('x')
        expected = ref.read(1)
    assert (expected, path.read_bytes()) == ('b', b'xbc')
    path.write_bytes(b'abc')

    async def main():
        async with uringloop.open(path, 'r+') as f:
            await f.write('x')
            return await f.read(1)
    assert run(any_loop, main()) == expected
    assert path.read_bytes() == b'xbc'


def test_loop_sendfile_over_a_transport(any_loop, tmp_path):
    path = tmp_path / "file"
    payload = os.urandom(3 * 1024 * 1024 + 5)
    path.write_bytes(payload)

    async def main():
        loop = asyncio.get_running_loop()
        async with collected_connection(loop) as (tr, cli, received):
            tr.write(b"head:")
            with open(path, "rb") as f:
                sent = await loop.sendfile(tr, f)
            tr.write(b":tail")
            tr.close()
            await received.done
            assert sent == len(payload)
            assert bytes(received.data) == b"head:" + payload + b":tail"

    any_loop.run_until_complete(asyncio.wait_for(main(), 60))


def test_a_fifo_opens_for_reading_without_waiting_for_a_writer(tmp_path):
    """uringloop.open() of a FIFO for reading returns at once, on either
    driver, as the kernel's OPENAT does (it opens without blocking first:
    the epoll driver does so too); a read then waits for data and a timeout
    cancels it, leaving nothing in flight.  (Only on uringloop: the stdlib
    loop's executor blocks in the builtin open() until a writer comes.)"""
    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo)
    loop = uringloop.new_event_loop()

    async def main():
        await turns()
        at_rest = loop.stats()["ops_in_flight"]        # (the loop's own wake-up)
        async with uringloop.open(fifo, "rb") as f:
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.2):     # (nothing can come: no writer)
                    await f.read(10)
        await until(lambda: loop.stats()["ops_in_flight"] == at_rest,
                    "the cancelled read's end", timeout=5)
    try:
        loop.run_until_complete(asyncio.wait_for(main(), 10))
    finally:
        loop.close()
        try:            # a reader still blocked in open() would wait forever
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass


def test_an_append_only_file_opens_blocking_as_the_builtin_opens_it(tmp_path):
    """A file marked append-only (chattr +a) opened for reading: its
    descriptor is blocking, as the builtin open() makes it, on either
    driver (the epoll driver's first, non-blocking try cannot clear
    O_NONBLOCK there -- EPERM -- and leaves the open to its thread)."""
    import fcntl
    import shutil
    import subprocess
    path = tmp_path / "log"
    path.write_bytes(b"kept")
    if shutil.which("chattr") is None or subprocess.run(
            ["chattr", "+a", str(path)], capture_output=True).returncode != 0:
        pytest.skip("chattr +a is refused here (not root, or a file system without it)")
    loop = uringloop.new_event_loop()

    async def main():
        async with uringloop.open(path, "rb") as f:
            return bool(fcntl.fcntl(f.fileno(), fcntl.F_GETFL) & os.O_NONBLOCK), await f.read()
    try:
        with open(path, "rb") as f:
            builtin = bool(fcntl.fcntl(f.fileno(), fcntl.F_GETFL) & os.O_NONBLOCK), f.read()
        assert loop.run_until_complete(main()) == builtin == (False, b"kept")
    finally:
        loop.close()
        subprocess.run(["chattr", "-a", str(path)], capture_output=True)
