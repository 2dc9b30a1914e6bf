"""uringloop.open() against the builtin open(), call by call.

Every test runs on a uringloop loop (requests on the ring) and on the
stdlib loop (the same objects through the loop's executor); the builtin
file on the same file is the reference for every result, position and
exception.
"""
import asyncio
import errno
import gc
import io
import itertools
import os
import stat
import threading
import warnings

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import uringloop

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
    st.tuples(st.just('read'), st.sampled_from([-1, 0, 1, 2, 7, 100, 5000, 20000, None])),
    st.tuples(st.just('read1'), st.sampled_from([-1, 0, 1, 3, 100, 9000])),
    st.tuples(st.just('readline'), st.sampled_from([-1, 0, 1, 5, 50])),
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
    st.tuples(st.just('read'), st.sampled_from([-1, 0, 1, 2, 7, 100, 9000])),
    st.tuples(st.just('readline'), st.sampled_from([-1, 0, 1, 5, 50])),
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
