"""Pipe transports: what a write pipe refuses, read pipes whose
data_received() raises or is interrupted.

A test that takes `any_loop` runs its scenario on uringloop and on
asyncio.SelectorEventLoop and expects the same outcome; the others look
at what uringloop itself does (its requests, its own protocols)."""
import asyncio
import os
import sys

import pytest

from conftest import on_both_loops, until, until_closed
from recorders import handler_calls


def test_write_pipe_pause_reading_raises_not_implemented(any_loop):
    """get_pipe_transport(0) of a subprocess is a write pipe: asyncio's
    Transport base says NotImplementedError for pause_reading()."""
    loop = any_loop

    async def main():
        import sys
        tr, _ = await loop.subprocess_exec(asyncio.SubprocessProtocol, sys.executable,
                                           "-c", "pass", stdin=-1)
        stdin = tr.get_pipe_transport(0)
        try:
            with pytest.raises(NotImplementedError):
                stdin.pause_reading()
        finally:
            tr.close()
            await tr._wait()
    loop.run_until_complete(main())


def _raising_pipe_scenario(loop):
    """A read pipe's data_received() raises for the first of two writes: on
    the selector loop the exception goes to the exception handler (its
    _read_ready() calls the protocol outside its try block) and the pipe
    reads on, to the end of the stream."""
    seen = []
    reports = handler_calls(loop)

    class Receiver(asyncio.Protocol):
        def data_received(self, data):
            seen.append(data)
            if data == b"first":
                raise ValueError("raised by data_received")

        def eof_received(self):
            seen.append("eof_received")

        def connection_lost(self, exc):
            seen.append(("connection_lost", exc))

    async def main():
        r, w = os.pipe()
        tr, _ = await loop.connect_read_pipe(Receiver, os.fdopen(r, "rb", 0))
        try:
            for data in (b"first", b"second"):
                os.write(w, data)
                await until(lambda: data in seen, f"{data!r} delivered")
            closing = tr.is_closing()
        finally:
            os.close(w)
        await until(lambda: seen and type(seen[-1]) is tuple, "connection_lost()")
        return closing
    closing = loop.run_until_complete(main())
    return (seen, closing,
            [(type(r.get("exception")).__name__, str(r.get("exception"))) for r in reports])


def test_a_raising_data_received_of_a_read_pipe_is_reported_and_the_pipe_reads_on():
    ours, reference = on_both_loops(_raising_pipe_scenario)
    assert reference == ([b"first", b"second", "eof_received", ("connection_lost", None)],
                         False, [("ValueError", "raised by data_received")])
    assert ours == reference


def _interrupted_pipe_scenario(loop):
    """A read pipe's data_received() raises KeyboardInterrupt on its first
    call: it leaves run_until_complete(), and running the loop again gets
    the rest of the stream (the read is armed again, as the selector
    loop's reader stays registered)."""
    seen = []

    class Receiver(asyncio.Protocol):
        def data_received(self, data):
            seen.append(data)
            if len(seen) == 1:
                raise KeyboardInterrupt

        def eof_received(self):
            seen.append("eof_received")

    r, w = os.pipe()
    tr, _ = loop.run_until_complete(loop.connect_read_pipe(Receiver, os.fdopen(r, "rb", 0)))
    interrupted = False
    try:
        os.write(w, b"first")
        try:
            loop.run_until_complete(asyncio.sleep(1))
        except KeyboardInterrupt:
            interrupted = True
        os.write(w, b"second")
    finally:
        os.close(w)

    async def rest():
        for _ in range(100):
            if "eof_received" in seen:
                break
            await asyncio.sleep(0.01)
    loop.run_until_complete(rest())
    tr.close()
    loop.run_until_complete(until_closed(tr))
    return interrupted, seen


def test_a_keyboard_interrupt_in_a_read_pipes_data_received_leaves_it_reading():
    ours, reference = on_both_loops(_interrupted_pipe_scenario)
    assert reference == (True, [b"first", b"second", "eof_received"])
    assert ours == reference


def test_subprocess_exec_and_shell(any_loop):
    async def main():
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c",
            "import sys; data = sys.stdin.buffer.read(); "
            "sys.stdout.buffer.write(data[::-1]); sys.stderr.write('err'); sys.exit(3)",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)
        payload = os.urandom(300000)
        out, err = await proc.communicate(payload)
        assert out == payload[::-1] and err == b"err"
        assert proc.returncode == 3

        proc = await asyncio.create_subprocess_shell(
            "echo shell-ok; exit 0", stdout=asyncio.subprocess.PIPE)
        out, _ = await proc.communicate()
        assert out == b"shell-ok\n" and proc.returncode == 0

        proc = await asyncio.create_subprocess_exec("sleep", "30")
        proc.terminate()
        assert await proc.wait() == -15

    any_loop.run_until_complete(asyncio.wait_for(main(), 60))


def _write_to_a_gone_reader_scenario(loop, caplog):
    """A write pipe whose reader has gone: the write() that meets EPIPE
    closes the transport at once and connection_lost() gets the error;
    writes after it are counted, and the warning comes at the same one."""
    events = []

    class P(asyncio.Protocol):
        def connection_lost(self, exc):
            events.append(("connection_lost", type(exc).__name__))

    async def main():
        r, w = os.pipe()
        tr, _ = await loop.connect_write_pipe(P, os.fdopen(w, "wb", 0))
        os.close(r)
        tr.write(b"x")
        events.append(("closing", tr.is_closing()))
        await until(lambda: events[-1][0] == "connection_lost", "connection_lost()")
        caplog.clear()
        for i in range(6):
            tr.write(b"after")
            events.append(("warned", i, "pipe closed by peer" in caplog.text))
        tr.close()
    loop.run_until_complete(asyncio.wait_for(main(), 10))
    return events


def test_a_write_to_a_pipe_whose_reader_is_gone_closes_it_with_the_error(caplog):
    ours, reference = on_both_loops(_write_to_a_gone_reader_scenario, caplog)
    assert reference[:2] == [("closing", True), ("connection_lost", "BrokenPipeError")]
    assert ours == reference
