"""Server.close() and loop.close() close listening sockets at once, as the
stdlib does, and never shut down a socket that other servers or processes
share (issue #14, item 2)."""
import asyncio
import os
import socket
import subprocess
import sys
import textwrap

import pytest

import uringloop


async def _echo(reader, writer):
    writer.write(await reader.read(100))
    await writer.drain()
    writer.close()


def test_server_close_closes_every_listening_socket_at_once(any_loop):
    loop = any_loop

    async def main():
        server = await asyncio.start_server(_echo, "127.0.0.1", 0)
        socks = [s for s in server.sockets]
        port = socks[0].getsockname()[1]
        raw = [s._sock if hasattr(s, "_sock") else s for s in socks]
        server.close()
        states = [s.fileno() for s in raw]
        c = socket.socket()
        try:
            c.connect(("127.0.0.1", port))
            refused = False
        except ConnectionRefusedError:
            refused = True
        finally:
            c.close()
        await server.wait_closed()
        return states, refused
    states, refused = loop.run_until_complete(main())
    assert states == [-1] * len(states)
    assert refused


def test_loop_close_closes_the_listening_sockets_of_unclosed_servers(uloop):
    # (the stdlib's loop.close() leaves them to the garbage collector)
    loop = uloop
    sock = socket.create_server(("127.0.0.1", 0))

    async def main():
        return await asyncio.start_server(_echo, sock=sock)
    server = loop.run_until_complete(main())
    loop.close()
    assert sock.fileno() == -1
    del server


def test_closing_one_server_leaves_another_on_the_same_socket_serving(any_loop):
    """Two servers on one listening socket (a dup of it: the same kernel
    socket, as worker processes share it): closing the first must not
    shut the socket down under the second."""
    loop = any_loop

    async def main():
        base = socket.create_server(("127.0.0.1", 0))
        addr = base.getsockname()
        other = base.dup()
        a = await asyncio.start_server(_echo, sock=base)
        b = await asyncio.start_server(_echo, sock=other)
        a.close()
        await a.wait_closed()
        served = 0
        for i in range(10):
            try:
                r, w = await asyncio.wait_for(asyncio.open_connection(*addr), 5)
            except ConnectionRefusedError:
                continue
            w.write(b"hi%d" % i)
            if await asyncio.wait_for(r.read(100), 5) == b"hi%d" % i:
                served += 1
            w.close()
            await w.wait_closed()
        b.close()
        await b.wait_closed()
        return served
    assert loop.run_until_complete(main()) == 10


WORKER = textwrap.dedent("""
    import asyncio, os, socket, sys
    import uringloop
    fd = int(sys.argv[1])
    async def handle(reader, writer):
        writer.write(b"B" + await reader.read(100))
        await writer.drain()
        writer.close()
    async def main():
        sock = socket.socket(fileno=fd)
        server = await asyncio.start_server(handle, sock=sock)
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        server.close()
        await server.wait_closed()
    uringloop.run(main())
""")


@pytest.mark.parametrize("first", ["uringloop", "asyncio"])
def test_two_processes_sharing_a_listening_socket(first):
    """Worker A (this process, `first`'s loop) and worker B (a child on
    uringloop) serve one listening socket; A closes its server; B serves
    every later connection."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=64)
    addr = listener.getsockname()
    child = subprocess.Popen(
        [sys.executable, "-c", WORKER, str(listener.fileno())],
        pass_fds=(listener.fileno(),), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline().strip() == b"ready"
        loop = uringloop.new_event_loop() if first == "uringloop" else asyncio.SelectorEventLoop()

        async def main():
            a = await asyncio.start_server(_echo, sock=listener)
            a.close()
            await a.wait_closed()
            answers = []
            for i in range(10):
                try:
                    r, w = await asyncio.wait_for(asyncio.open_connection(*addr), 5)
                except ConnectionRefusedError:
                    answers.append("refused")
                    continue
                w.write(b"x")
                answers.append(await asyncio.wait_for(r.read(100), 5))
                w.close()
                await w.wait_closed()
            return answers
        try:
            answers = loop.run_until_complete(main())
        finally:
            loop.close()
        assert answers == [b"Bx"] * 10
    finally:
        child.stdin.write(b"\n")
        child.stdin.flush()
        child.wait(10)
        listener.close()


def test_connections_accepted_while_the_loop_closes_are_closed(uloop):
    """loop.close() with connections queued and ACCEPTs in flight leaves
    no socket of the loop's open: neither the listening socket (the drain
    used to skip closing it) nor a connection an ACCEPT took as the loop
    closed (Operation.drained closes it)."""
    def socket_fds():
        fds = set()
        for name in os.listdir("/proc/self/fd"):
            try:
                if os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                    fds.add(int(name))
            except OSError:
                pass
        return fds

    async def start():
        return await asyncio.start_server(_echo, "127.0.0.1", 0)
    before = socket_fds()
    server = uloop.run_until_complete(start())
    addr = server.sockets[0].getsockname()
    clients = [socket.create_connection(addr) for _ in range(5)]
    uloop.close()                     # no iteration ran: the ACCEPTs end in the drain
    leaked = socket_fds() - before - {c.fileno() for c in clients}
    for c in clients:
        c.close()
    assert not leaked


def test_server_close_stops_listening_at_once(any_loop):
    async def main():
        loop = asyncio.get_running_loop()
        server = await loop.create_server(asyncio.Protocol, "127.0.0.1", 0)
        addr = server.sockets[0].getsockname()
        server.close()
        s = socket.socket()
        s.settimeout(2)
        with s, pytest.raises(ConnectionRefusedError):
            s.connect(addr)
        await server.wait_closed()

    any_loop.run_until_complete(asyncio.wait_for(main(), 60))
