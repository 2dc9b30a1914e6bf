"""Servers: accepting (bursts bigger than the backlog, a small ring, a
factory that raises), the accepted connections (their socket objects,
names, TCP_NODELAY), connection_made(), wait_closed() and the Server's
attach/detach, Unix server sockets.

A test that takes `any_loop` runs its scenario on uringloop and on
asyncio.SelectorEventLoop and expects the same outcome; the others look
at what uringloop itself does (its requests, its own protocols)."""
import asyncio
import os
import socket
import sys

import pytest

import uringloop
from conftest import on_both_loops


def test_create_unix_server_replaces_a_stale_socket_without_os_stat(tmp_path, monkeypatch):
    """A blocking-call checker (blockbuster, in aiohttp's and anyio's
    suites) allows os.stat inside asyncio's own create_unix_server only;
    uringloop checks and removes the stale socket file without it."""
    import uringloop
    path = str(tmp_path / "s")
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(path)
    stale.close()

    def refuse(*args, **kwargs):
        raise AssertionError("a Python-level blocking call in the loop")
    loop = uringloop.new_event_loop()
    try:
        monkeypatch.setattr(os, "stat", refuse)
        monkeypatch.setattr(os, "remove", refuse)
        monkeypatch.setattr(os, "unlink", refuse)
        try:
            server = loop.run_until_complete(loop.create_unix_server(asyncio.Protocol, path))
        finally:
            monkeypatch.undo()
        assert server.sockets[0].getsockname() == path
        server.close()
        loop.run_until_complete(server.wait_closed())
    finally:
        loop.close()


@pytest.mark.parametrize("patched", [None, "close", "__init__", "default timeout"])
def test_an_accepted_connection_has_a_plain_socket_closed_through_its_close(any_loop, patched):
    """The loop makes an accepted connection's socket.socket and closes it
    without socket.py's Python frames (transports/base.pyx), taking the
    same steps: the socket is of the stdlib's class with its attributes set,
    and is closed (fileno() -1) once the connection is lost.  Where
    socket.socket.close or __init__ is patched, the patch is what closes
    or makes it, as on the selector loop; its timeout is 0.0, also with a
    default timeout set (socket.setdefaulttimeout())."""
    from unittest import mock
    loop = any_loop
    closed = []
    inited = []
    real_close = socket.socket.close
    real_init = socket.socket.__init__

    def spy(self):
        closed.append(self.fileno())
        real_close(self)

    def init_spy(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        inited.append(self.fileno())

    async def main():
        made = loop.create_future()

        class P(asyncio.Protocol):
            def connection_made(self, tr):
                made.set_result(tr)

            def connection_lost(self, exc):
                pass
        server = await loop.create_server(P, "127.0.0.1", 0)
        client = socket.create_connection(server.sockets[0].getsockname())
        tr = await made
        sock = tr._sock if hasattr(tr, "_sock") else tr.get_extra_info("socket")._sock
        facts = (type(sock) is socket.socket, sock.family, sock.type, sock.proto,
                 sock._io_refs, sock._closed, os.get_blocking(sock.fileno()),
                 sock.gettimeout())
        fd = sock.fileno()
        tr.close()
        for _ in range(5):
            await asyncio.sleep(0)
        after = (sock.fileno(), sock._closed)
        client.close()
        server.close()
        await server.wait_closed()
        return facts, fd, after
    if patched == "default timeout":
        socket.setdefaulttimeout(5.0)
        try:
            facts, fd, after = loop.run_until_complete(main())
        finally:
            socket.setdefaulttimeout(None)
    elif patched:
        with mock.patch.object(socket.socket, patched,
                               spy if patched == "close" else init_spy):
            facts, fd, after = loop.run_until_complete(main())
        assert fd in (closed if patched == "close" else inited)
    else:
        facts, fd, after = loop.run_until_complete(main())
    assert facts == (True, socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, 0, False, False,
                     0.0)
    assert after == (-1, True)


def test_wait_closed_follows_the_connections_as_on_the_stdlib_loop(any_loop):
    """The loop counts a stdlib Server's connections itself before 3.13
    (transports/base.pyx, attach_to_server): wait_closed() after close()
    returns when the stdlib's would -- at once on 3.11, after the last
    connection on 3.12 -- and a server's count goes back to nothing."""
    loop = any_loop

    async def main():
        lost = []

        class P(asyncio.Protocol):
            def connection_lost(self, exc):
                lost.append(exc)
        server = await loop.create_server(P, "127.0.0.1", 0)
        clients = [socket.create_connection(server.sockets[0].getsockname()) for _ in range(3)]
        while getattr(server, "_active_count", None) not in (None, 3) or (
                hasattr(server, "_clients") and len(server._clients) < 3):
            await asyncio.sleep(0.005)
        server.close()
        waiting = asyncio.ensure_future(server.wait_closed())
        states = []
        for client in clients:
            await asyncio.sleep(0.02)
            states.append(waiting.done())
            client.close()
            n = len(lost)
            while len(lost) == n:
                await asyncio.sleep(0.005)
        await asyncio.wait_for(waiting, 5)
        states.append(waiting.done())
        count = getattr(server, "_active_count", None)
        return states, count
    states, count = loop.run_until_complete(main())
    if sys.version_info >= (3, 12):
        assert states == [False, False, False, True]
    else:
        assert states == [True, True, True, True]   # (3.11 returns at once after close())
    assert count in (None, 0)


def test_a_connection_made_that_raises_is_reported_and_reading_starts(any_loop):
    """The stdlib runs a new transport's connection_made() and the start of
    its reading as two ready callbacks, one right after the other; this
    loop runs them in one handle (core.pyx, ReadingHandle).  An exception
    from connection_made() is reported as the stdlib reports it (its
    message, a Handle of protocol.connection_made) and reading starts all
    the same; a pause_reading() in connection_made() holds the data until
    resume_reading()."""
    loop = any_loop
    reports = []
    loop.set_exception_handler(lambda _, context: reports.append(context))

    async def main(raises):
        got = loop.create_future()

        class P(asyncio.Protocol):
            def connection_made(self, tr):
                if not raises:
                    tr.pause_reading()
                    loop.call_later(0.05, tr.resume_reading)
                    loop.call_later(0.04, got.set_result, "still paused")
                else:
                    raise ValueError("made")

            def data_received(self, data):
                if not got.done():
                    got.set_result(data)
        a, b = socket.socketpair()
        b.send(b"ping")
        tr, _ = await loop.create_connection(P, sock=a)
        data = await asyncio.wait_for(got, 5)
        tr.close()
        b.close()
        return data
    try:
        assert loop.run_until_complete(main(True)) == b"ping"
        (context,) = reports
        assert isinstance(context["exception"], ValueError)
        assert context["message"].startswith("Exception in callback ")
        assert ".P.connection_made(" in context["message"]
        assert repr(context["handle"]).startswith("<Handle ")
        assert ".P.connection_made(" in repr(context["handle"])
        assert loop.run_until_complete(main(False)) == "still paused"
    finally:
        context = None
        reports.clear()         # (they hold the transport, which the loop's check counts)


def test_a_connection_made_outside_debug_mode_that_runs_in_it_starts_reading(any_loop):
    """A transport made while the loop is not in debug mode whose
    connection_made() runs after set_debug(True): reading starts (this loop
    then runs its one handle through Handle._run(), as debug mode does)."""
    loop = any_loop

    async def main():
        a, b = socket.socketpair()
        got = loop.create_future()

        class P(asyncio.Protocol):
            def data_received(self, data):
                if not got.done():
                    got.set_result(data)
        connecting = loop.create_task(loop.create_connection(P, sock=a))
        await asyncio.sleep(0)      # the task made the transport; its callbacks wait
        kinds = [type(h).__qualname__ for h in loop._ready]
        # (the one handle is the loop_methods shortcut's: without it the
        # loop schedules the stdlib's two, and reading starts as there)
        if isinstance(loop, uringloop.Loop) and uringloop.shortcuts()["loop_methods"] == "on":
            assert uringloop.core.ReadingHandle in map(type, loop._ready), kinds
        loop.set_debug(True)
        b.send(b"ping")
        tr, _ = await connecting
        data = await asyncio.wait_for(got, 5)
        tr.close()
        b.close()
        return data
    try:
        assert loop.run_until_complete(main()) == b"ping"
    finally:
        loop.set_debug(False)


def test_an_accepted_connections_names_are_the_stdlibs(any_loop):
    """get_extra_info('peername'/'sockname') of accepted IPv4 connections
    from two hosts in turn (127.0.0.1, 127.0.0.2), as the stdlib gives
    them: the peer's name from the address accept4(2) returned (this loop
    makes no getpeername(2) for it, and keeps the last host's string)."""
    loop = any_loop

    async def main():
        names = []
        made = asyncio.Queue()

        class P(asyncio.Protocol):
            def connection_made(self, tr):
                made.put_nowait(tr)
        server = await loop.create_server(P, "127.0.0.1", 0)
        address = server.sockets[0].getsockname()
        for host in ["127.0.0.1", "127.0.0.2", "127.0.0.2", "127.0.0.1"]:
            client = socket.socket()
            client.bind((host, 0))
            client.connect(address)
            tr = await asyncio.wait_for(made.get(), 5)
            names.append((tr.get_extra_info("peername") == client.getsockname(),
                          tr.get_extra_info("sockname") == address,
                          tr.get_extra_info("peername")[0]))
            tr.close()
            client.close()
        server.close()
        await server.wait_closed()
        return names
    assert loop.run_until_complete(main()) == [
        (True, True, "127.0.0.1"), (True, True, "127.0.0.2"),
        (True, True, "127.0.0.2"), (True, True, "127.0.0.1")]


@pytest.mark.parametrize("listener", ["create_server", "proto 0", "proto tcp"])
def test_accepted_connections_get_nodelay_as_the_selector_loop(any_loop, listener):
    """asyncio sets TCP_NODELAY on a stream transport's socket when its
    proto is IPPROTO_TCP: create_server()'s own listener has it, so its
    connections do; a listener made with socket.socket() has proto 0, and
    so have its connections, which are left as they are.  (uringloop's
    accept path takes the proto from the listener instead of asking each
    connection's socket object.)"""
    loop = any_loop

    async def main():
        accepted = asyncio.Queue()

        class Proto(asyncio.Protocol):
            def connection_made(self, transport):
                accepted.put_nowait(transport)

        if listener == "create_server":
            server = await loop.create_server(Proto, "127.0.0.1", 0)
        else:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM,
                                 socket.IPPROTO_TCP if listener == "proto tcp" else 0)
            sock.bind(("127.0.0.1", 0))
            server = await loop.create_server(Proto, sock=sock)
        address = server.sockets[0].getsockname()
        client = socket.create_connection(address)
        tr = await asyncio.wait_for(accepted.get(), 5)
        sock = tr.get_extra_info("socket")
        answer = (sock.proto, bool(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)))
        tr.close()
        client.close()
        server.close()
        await server.wait_closed()
        return answer

    expected = (0, False) if listener == "proto 0" else (socket.IPPROTO_TCP, True)
    assert loop.run_until_complete(main()) == expected


def test_server_attach_and_detach_patched_after_a_first_connection_are_called(any_loop, monkeypatch):
    """Before 3.13 uringloop counts a stdlib Server's connections itself
    while Server._attach and _detach are asyncio's own.  Patched after
    connections were served, the patched methods are called for every
    later connection, as the selector loop calls them (a check of the
    class remembered from the first connection would miss the patch)."""
    loop = any_loop
    calls = []

    async def one_connection(server):
        port = server.sockets[0].getsockname()[1]
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(b"x")
        assert await r.readexactly(1) == b"x"
        w.close()
        await w.wait_closed()
        for _ in range(20):
            await asyncio.sleep(0)

    async def main():
        async def echo(reader, writer):
            writer.write(await reader.read(1))
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(echo, "127.0.0.1", 0)
        await one_connection(server)
        server_class = asyncio.base_events.Server
        attach, detach = server_class._attach, server_class._detach

        def counted(name, method):
            def call(self, *args):
                calls.append(name)
                return method(self, *args)
            return call

        monkeypatch.setattr(server_class, "_attach", counted("attach", attach))
        monkeypatch.setattr(server_class, "_detach", counted("detach", detach))
        await one_connection(server)
        await one_connection(server)
        for _ in range(50):
            if calls.count("detach") == 2:
                break
            await asyncio.sleep(0.01)
        server.close()
        await server.wait_closed()

    loop.run_until_complete(main())
    assert calls.count("attach") == 2 and calls.count("detach") == 2, calls


def burst_of_connects(loop, messages):
    """300 clients connect at once to a server with the default backlog of
    100 and echo `messages` messages of up to 100 KB, each written in two
    halves: what became of each client."""
    handlers = []

    async def echo(reader, writer):
        handlers.append(asyncio.current_task())
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
            for _ in range(messages):
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
        await asyncio.wait_for(asyncio.gather(*handlers), 30)   # (each saw its EOF)
        return outcomes

    return loop.run_until_complete(main())


def test_a_burst_of_connects_three_times_the_backlog_is_served_whole(any_loop):
    """The accept queue overflows and the kernel answers with SYN cookies;
    a loop that takes only a few connections per wake-up lets the cookies'
    ACKs meet a full queue, and those connections are reset (4 accepts per
    wake-up: 4-62 of 300).  The selector loop takes up to the backlog per
    wake-up and serves all 300."""
    outcomes = burst_of_connects(any_loop, 30)
    assert outcomes.count("served") == 300, sorted(set(outcomes))


@pytest.mark.parametrize("entries", ["2,2", "3,4", "16,16", "32,128"])
def test_a_burst_of_connects_on_a_small_ring_is_served_whole(entries, monkeypatch):
    """The same burst on a ring whose queues hold a few entries (as
    URINGLOOP_RING_ENTRIES, or a low RLIMIT_MEMLOCK, makes it: 32,128 is
    the smallest the loop shrinks to): a full queue slows the loop down and
    never costs a connection.  The listener's readiness used to wait in the
    kernel's overflow list behind hundreds of echoes while the clients
    wrote, and the kernel reset the connections it had answered with SYN
    cookies (up to 96 of 300); the selector loop serves all."""
    monkeypatch.setenv("URINGLOOP_RING_ENTRIES", entries)
    loop = uringloop.new_event_loop()
    assert loop.stats()["cq_entries"] == int(entries.split(",")[1])
    loop.close()
    ours, theirs = on_both_loops(burst_of_connects, 10)
    assert sorted(set(ours)) == sorted(set(theirs)) == ["served"], (
        ours.count("served"), theirs.count("served"))


@pytest.mark.loop_errors_expected       # (the selector loop: "Task exception was never retrieved")
@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_a_factory_interrupted_in_a_burst_leaves_the_rest_served(any_loop):
    """Ten connections wait in the accept queue; the protocol factory raises
    KeyboardInterrupt for the third.  The interrupt leaves the loop, and
    when it runs again the other nine are served, in order: the selector
    loop accepts them all at the wake-up and serves each in a task of its
    own; uringloop serves each as it accepts it, and the ones after the
    interrupted one wait in the accept queue for its poll, armed again
    whatever was raised.  (The third's socket is dropped
    with the interrupted call: closed when it is collected, which on the
    selector loop waits for the failed task's traceback to go.)"""
    loop = any_loop
    made = []

    class Echo(asyncio.Protocol):
        def connection_made(self, transport):
            self.transport = transport

        def data_received(self, data):
            self.transport.write(data)

    def factory():
        made.append(len(made))
        if len(made) == 3:
            raise KeyboardInterrupt
        return Echo()

    async def listen():
        return await loop.create_server(factory, "127.0.0.1", 0)

    server = loop.run_until_complete(listen())
    port = server.sockets[0].getsockname()[1]
    clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(10)]
    with pytest.raises(KeyboardInterrupt):
        loop.run_until_complete(asyncio.sleep(0.5))

    async def talk():
        answers = []
        for i, c in enumerate(clients):
            if i == 2:
                continue
            c.setblocking(False)
            await loop.sock_sendall(c, bytes([i]))
            answers.append(await asyncio.wait_for(loop.sock_recv(c, 10), 5))
        return answers

    answers = loop.run_until_complete(talk())
    assert len(made) == 10
    assert answers == [bytes([i]) for i in range(10) if i != 2]
    for c in clients:
        c.close()
    server.close()
    loop.run_until_complete(server.wait_closed())


@pytest.mark.parametrize("host, peers", [
    ("127.0.0.1", ["127.0.0.1", "127.0.0.2", "127.0.0.2", "127.0.0.1"]),
    ("::1", ["::1", "::1"]),
])
def test_accepted_connections_know_their_peer_and_local_names(any_loop, host, peers):
    """A server's transports report the client's address as peername and
    its own as sockname, for peers that change from one connection to the
    next (the accept path reuses the host string of the last IPv4 peer)."""
    if host == "::1" and not socket.has_ipv6:
        pytest.skip("no IPv6")

    async def main():
        accepted = asyncio.Queue()

        class Server(asyncio.Protocol):
            def connection_made(self, transport):
                accepted.put_nowait(transport)

        server = await any_loop.create_server(Server, host, 0)
        address = server.sockets[0].getsockname()
        for peer in peers:
            client = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
            client.bind((peer, 0))
            client.setblocking(False)
            await any_loop.sock_connect(client, address[:2])
            transport = await accepted.get()
            assert transport.get_extra_info("peername") == client.getsockname()
            assert transport.get_extra_info("sockname") == client.getpeername()
            transport.close()
            client.close()
        server.close()
        await server.wait_closed()

    any_loop.run_until_complete(asyncio.wait_for(main(), 30))
