"""A read whose bytes object cannot be made fails its transport, and takes
nothing else with it.

When memory runs out making the object a read is handed over in, the
selector loop's transport fails: its recv() raises MemoryError, and
_read_ready() calls _fatal_error() ('Fatal read error on socket
transport'): the exception handler hears of it, connection_lost() gets
the MemoryError.  uringloop's bytes are out of the socket by then (the
kernel copied them into a provided buffer, or recv(2) did), so carrying on
would leave a hole in the stream: the transport fails the same way, after
what came before (data kept while paused is handed over first), and the
provided buffer goes back to the kernel either way (a ring that lost one
per failure ran dry after 64).

Each scenario runs in a child.  On uringloop the failure is made with
CPython's _testcapi.set_nomemory(): armed as the last thing an iteration's
callbacks do, after the peer's send, so the next allocation -- the read's
object -- fails.  On asyncio.SelectorEventLoop the socket is a
socket.socket subclass whose recv()/recvfrom() raises MemoryError once
armed.  Both must end the same: connection_lost(MemoryError), that message
for the handler, what arrived a prefix of what was sent.
"""
import subprocess
import sys
import textwrap

import pytest

try:
    import _testcapi
    HAVE_NOMEMORY = hasattr(_testcapi, "set_nomemory")
except ImportError:
    HAVE_NOMEMORY = False

needs_nomemory = pytest.mark.skipif(
    not HAVE_NOMEMORY, reason="this Python has no _testcapi.set_nomemory()")

CHILD = textwrap.dedent(r'''
    import asyncio, os, socket, sys
    import _testcapi
    import uringloop

    LOOP, SCENARIO = sys.argv[1], sys.argv[2]
    errors = []

    class Failing(socket.socket):
        """(the selector loop) recv() and recvfrom() raise MemoryError once
        armed, as they would where memory ran out making their bytes"""
        armed = False

        def recv(self, *args):
            if Failing.armed:
                raise MemoryError()
            return super().recv(*args)

        def recvfrom(self, *args):
            if Failing.armed:
                raise MemoryError()
            return super().recvfrom(*args)

    def fail_next_allocation(loop):
        if LOOP == "uringloop":
            _testcapi.set_nomemory(0, 1)    # the next allocation, the read's
        else:
            Failing.armed = True

    class Stream(asyncio.Protocol):
        def __init__(self):
            self.got = bytearray()
            self.lost = "open"
            self.done = asyncio.get_running_loop().create_future()

        def connection_made(self, transport):
            self.transport = transport

        def data_received(self, data):
            self.got += data

        def eof_received(self):
            return True

        def connection_lost(self, exc):
            self.lost = exc
            self.done.set_result(None)

    class Datagrams(asyncio.DatagramProtocol):
        def __init__(self):
            self.got = []
            self.lost = "open"
            self.done = asyncio.get_running_loop().create_future()

        def datagram_received(self, data, addr):
            self.got.append(data)

        def error_received(self, exc):
            self.got.append(exc)

        def connection_lost(self, exc):
            self.lost = exc
            self.done.set_result(None)

    async def settle(loop):
        for _ in range(5):
            await asyncio.sleep(0.01)

    async def fail_one_read(loop, send, protocol):
        """send() from a callback, then fail the next allocation -- the
        read's -- and wait for the transport's end."""
        def arm():
            send()
            fail_next_allocation(loop)
        # (the sleep's timer is made before: nothing of the test's waits on
        # an allocation after the armed one)
        loop.call_soon(arm)
        try:
            await asyncio.wait_for(asyncio.shield(protocol.done), 5)
        finally:
            _testcapi.remove_mem_hooks()
            Failing.armed = False

    def report(protocol, sent, extra=""):
        got = bytes(protocol.got)
        messages = sorted({c["message"] for c in errors})
        print(type(protocol.lost).__name__, sent.startswith(got), len(got), messages, extra)

    async def stream(loop, size, paused, first=b""):
        a, b = socket.socketpair()
        if LOOP != "uringloop":
            a = Failing(fileno=a.detach())
        b.setblocking(False)
        transport, protocol = await loop.create_connection(Stream, sock=a)
        sent = b""
        if size >= 65536:
            # large reads first: the transport's reads go direct (recv(2))
            sent = bytes(range(256)) * 1200
            await loop.sock_sendall(b, sent)
            for _ in range(200):
                if len(protocol.got) >= len(sent):
                    break
                await asyncio.sleep(0.01)
        if paused:
            transport.pause_reading()
            await loop.sock_sendall(b, b"a" * 1000)
            sent += b"a" * 1000
            await settle(loop)
        message = b"x" * 1000
        sent += message
        if paused:
            loop.call_later(0.2, transport.resume_reading)
        await fail_one_read(loop, lambda: b.send(message), protocol)
        # and the transport gives nothing after the hole
        try:
            b.send(b"z" * 100)
        except OSError:
            pass
        await settle(loop)
        b.close()
        report(protocol, sent, "kept-first" if bytes(protocol.got[:1000]) == b"a" * 1000 else "")

    async def datagram(loop):
        a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        a.bind(("127.0.0.1", 0))
        if LOOP != "uringloop":
            a = Failing(fileno=a.detach())
        b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        transport, protocol = await loop.create_datagram_endpoint(Datagrams, sock=a)
        b.sendto(b"d" * 100, a.getsockname())
        await settle(loop)
        await fail_one_read(loop, lambda: b.sendto(b"x" * 1000, a.getsockname()), protocol)
        b.close()
        print(type(protocol.lost).__name__, protocol.got == [b"d" * 100],
              sorted({c["message"] for c in errors}))

    async def pipe(loop):
        r, w = os.pipe()
        transport, protocol = await loop.connect_read_pipe(Stream, os.fdopen(r, "rb", 0))
        await fail_one_read(loop, lambda: os.write(w, b"x" * 1000), protocol)
        os.close(w)
        report(protocol, b"x" * 1000)

    async def many(loop):
        """More failures than the ring has buffers, then a read of each
        size: none may find the ring dry."""
        for _ in range(70):
            errors.clear()
            await stream(loop, 1000, False)
        a, b = socket.socketpair()
        transport, protocol = await loop.create_connection(Stream, sock=a)
        for size in (1, 1000, 100_000, 1000):
            await loop.sock_sendall(b, b"y" * size)
        for _ in range(500):
            if len(protocol.got) >= 1 + 1000 + 100_000 + 1000:
                break
            await asyncio.sleep(0.01)
        b.close()
        transport.close()
        await asyncio.wait_for(protocol.done, 5)
        print("after", len(protocol.got), protocol.lost)

    async def main():
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda loop, context: errors.append(context))
        if SCENARIO == "ring":
            await stream(loop, 1000, False)
        elif SCENARIO == "direct":
            await stream(loop, 100_000, False)
        elif SCENARIO == "paused":
            await stream(loop, 1000, True)
        elif SCENARIO == "datagram":
            await datagram(loop)
        elif SCENARIO == "pipe":
            await pipe(loop)
        elif SCENARIO == "many":
            await many(loop)

    if LOOP == "uringloop":
        uringloop.run(main())
    else:
        asyncio.run(main())
''')


def run_child(loop, scenario):
    out = subprocess.run([sys.executable, "-c", CHILD, loop, scenario],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return [line.strip() for line in out.stdout.strip().splitlines()]


STREAM_FAILED = "MemoryError True {} ['Fatal read error on socket transport'] {}"


@needs_nomemory
@pytest.mark.parametrize("loop", ["uringloop", "asyncio"])
@pytest.mark.parametrize("scenario", ["ring", "direct"])
def test_a_read_out_of_memory_fails_the_stream(loop, scenario):
    """(ring: a small read copied out of a provided buffer; direct: a
    recv(2) into the object, after large reads)"""
    before = 0 if scenario == "ring" else 1200 * 256
    assert run_child(loop, scenario) == [STREAM_FAILED.format(before, "").rstrip()]


@needs_nomemory
@pytest.mark.parametrize("loop", ["uringloop", "asyncio"])
def test_a_read_out_of_memory_while_paused_fails_after_resume(loop):
    """uringloop's ring reads go on while paused, and what comes is kept:
    the failure is kept behind it, and the kept data comes first.  (The
    selector loop reads nothing while paused: its one recv() after the
    resume fails, with all of it still in the socket.)"""
    [line] = run_child(loop, "paused")
    if loop == "uringloop":
        assert line == STREAM_FAILED.format(1000, "kept-first")
    else:
        assert line == STREAM_FAILED.format(0, "").rstrip()


@needs_nomemory
@pytest.mark.parametrize("loop", ["uringloop", "asyncio"])
def test_a_datagram_out_of_memory_fails_the_endpoint(loop):
    assert run_child(loop, "datagram") == [
        "MemoryError True ['Fatal read error on datagram transport']"]


@needs_nomemory
def test_a_pipe_read_out_of_memory_fails_the_pipe():
    """uringloop only: the selector loop's os.read() fails before reading,
    and its error goes to the handler as a callback's, with the pipe still
    read; uringloop's READ has taken the bytes out of the pipe, so the
    pipe fails rather than go on past a hole."""
    assert run_child("uringloop", "pipe") == [
        "MemoryError True 0 ['Fatal read error on pipe transport']"]


@needs_nomemory
def test_failed_reads_give_their_buffers_back():
    lines = run_child("uringloop", "many")
    assert lines[:-1] == [STREAM_FAILED.format(0, "").rstrip()] * 70
    assert lines[-1] == f"after {1 + 1000 + 100_000 + 1000} None"
