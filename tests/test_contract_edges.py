"""asyncio's contract at the edges (issue #33): a burst of connects, a
pause, a callback that raises, a write after close, a cancelled receive,
the error a failed call carries, what a closed loop still holds.  Each
test runs one scenario on uringloop and on asyncio.SelectorEventLoop
(`any_loop`) and expects the stdlib's outcome on both."""
import asyncio
import socket
import threading
import time

import pytest

import uringloop
from conftest import recv_until_eof


# ---- a burst of connects bigger than the backlog ---------------------------

def test_a_burst_of_connects_three_times_the_backlog_is_served_whole(any_loop):
    """300 clients connect at once to a server with the default backlog of
    100 and echo 30 messages of up to 100 KB, each written in two halves.
    The accept queue overflows and the kernel answers with SYN cookies; a
    loop that takes only a few connections per wake-up lets the cookies'
    ACKs meet a full queue, and those connections are reset (4 accepts per
    wake-up: 4-62 of 300).  The selector loop takes up to the backlog per
    wake-up and serves all 300."""
    loop = any_loop

    async def echo(reader, writer):
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        writer.close()

    async def client(port, i):
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            for _ in range(30):
                message = bytes([i % 256]) * (100_000 * (i % 7 + 1) // 7)
                writer.write(message[:len(message) // 2])
                writer.write(message[len(message) // 2:])
                await writer.drain()
                assert await reader.readexactly(len(message)) == message
            writer.close()
            await writer.wait_closed()
        except ConnectionError as exc:
            return type(exc).__name__
        return "served"

    async def main():
        server = await asyncio.start_server(echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        outcomes = await asyncio.wait_for(
            asyncio.gather(*(client(port, i) for i in range(300))), 120)
        server.close()
        await server.wait_closed()
        return outcomes

    outcomes = loop.run_until_complete(main())
    assert outcomes.count("served") == 300, sorted(set(outcomes))


# ---- a cancelled receive consumes nothing ---------------------------------

def test_receives_that_timed_out_leave_the_bytes_for_plain_calls(any_loop):
    """wait_for(sock_recv()) with timeouts that meet the data as it comes
    (some before, some after, some in the same step), then the socket is
    read with the socket module's own recv(), as a library that mixes
    sock_recv with blocking calls, ssl.wrap_socket() or a thread given a
    dup() does: every one of 200 streams is whole on the stdlib loop, and
    must be here (a RECV in the ring kept what it took: 0 of 200)."""
    loop = any_loop
    payloads = [b"stream-%03d;" % i * 20 for i in range(200)]

    async def one(i, a, b):
        loop.call_later(0.001 * (i % 5), b.send, payloads[i])
        try:
            return await asyncio.wait_for(loop.sock_recv(a, 1 << 16), 0.002)
        except asyncio.TimeoutError:
            return b""

    async def main():
        pairs = [socket.socketpair() for _ in payloads]
        for a, _ in pairs:
            a.setblocking(False)
        firsts = await asyncio.gather(*(one(i, a, b) for i, (a, b) in enumerate(pairs)))
        await asyncio.sleep(0.02)
        return pairs, firsts

    pairs, firsts = loop.run_until_complete(main())
    intact = 0
    for (a, b), got, payload in zip(pairs, firsts, payloads):
        a.settimeout(5)
        with a, b:
            while len(got) < len(payload):
                got += a.recv(1 << 16)
        intact += got == payload
    assert intact == len(payloads)
    assert any(firsts) and not all(firsts)      # both outcomes happened


# ---- errors carry the stdlib's messages -----------------------------------

def _error_scenarios(loop, tmp_path):
    """What each failing call raises, as (type name, args)."""
    outcomes = {}

    async def outcome(name, make):
        try:
            result = make()
            if asyncio.iscoroutine(result):
                await result
        except Exception as exc:
            outcomes[name] = (type(exc).__name__, exc.args)
        else:
            outcomes[name] = "no error"

    async def main():
        missing = str(tmp_path / "missing.sock")
        not_listening = str(tmp_path / "bound.sock")
        bound = socket.socket(socket.AF_UNIX)
        bound.bind(not_listening)
        closed_port = socket.socket()
        closed_port.bind(("127.0.0.1", 0))
        port = closed_port.getsockname()[1]
        for name, family, address in [
                ("connect to a missing path", socket.AF_UNIX, missing),
                ("connect to a path nobody listens on", socket.AF_UNIX, not_listening),
                ("connect to a closed port", socket.AF_INET, ("127.0.0.1", port))]:
            s = socket.socket(family)
            s.setblocking(False)
            with s:
                await outcome(name, lambda: loop.sock_connect(s, address))
        await outcome("open_unix_connection to a missing path",
                      lambda: asyncio.open_unix_connection(missing))
        await outcome("sock_recv of an int", lambda: loop.sock_recv(5, 10))
        with open(__file__, "rb") as f:
            await outcome("sock_recv of a file", lambda: loop.sock_recv(f, 10))
            await outcome("sock_accept of a file", lambda: loop.sock_accept(f))
        a, b = socket.socketpair()
        tr, _ = await loop.create_connection(asyncio.Protocol, sock=a)
        await outcome("writelines of a str", lambda: tr.writelines(["a"]))
        await outcome("writelines of an int after bytes", lambda: tr.writelines([b"x", 7]))
        await outcome("write of a str", lambda: tr.write("a"))
        tr.abort()
        b.close()
        bound.close()
        closed_port.close()
        return port

    port = loop.run_until_complete(main())
    return {name: str(outcome).replace(str(tmp_path), "TMP").replace(str(port), "PORT")
            for name, outcome in outcomes.items()}


def test_failed_calls_raise_what_the_stdlib_raises(uloop, tmp_path):
    """The same exception type and arguments (the message included) as on
    the selector loop: a connect that fails at once carries the system's
    message (redis-py builds its own text from it); a non-socket gets the
    AttributeError of the missing method; writelines() the TypeError of
    the stdlib's own check."""
    stdlib = asyncio.SelectorEventLoop()
    try:
        (tmp_path / "stdlib").mkdir()
        expected = _error_scenarios(stdlib, tmp_path / "stdlib")
    finally:
        stdlib.close()
    (tmp_path / "uring").mkdir()
    got = _error_scenarios(uloop, tmp_path / "uring")
    assert got == expected
    assert expected["connect to a missing path"] == \
        "('FileNotFoundError', (2, 'No such file or directory'))"
