"""asyncio's contract at the edges (issue #33): a burst of connects, a
pause, a callback that raises, a write after close, a cancelled receive,
the error a failed call carries, what a closed loop still holds.  Each
test runs one scenario on uringloop and on asyncio.SelectorEventLoop
(`any_loop`) and expects the stdlib's outcome on both."""
import asyncio

import pytest


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
