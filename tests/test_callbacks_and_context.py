"""Callbacks and their context: the contextvars context each protocol
callback runs in, the order of callbacks and I/O, handles run as the
stdlib runs them, and loop methods (_run_once, create_future,
call_soon, time) replaced on the loop, its class or a subclass.

Each test runs its scenario on uringloop and on
asyncio.SelectorEventLoop (`any_loop`) and expects the same outcome."""
import asyncio
import contextvars
import inspect
import os
import socket

import pytest

import uringloop
from conftest import on_both_loops, turns, until
from recorders import handler_calls


request_id = contextvars.ContextVar("request_id", default="unset")


def _context_scenario(loop):
    """What each protocol callback sees of a ContextVar set before the
    server, the client, a datagram endpoint and a pipe were made."""
    seen = []

    class Recorder(asyncio.Protocol):
        def __init__(self, who):
            self.who = who
            seen.append((who, "factory", request_id.get()))

        def connection_made(self, transport):
            self.transport = transport
            seen.append((self.who, "connection_made", request_id.get()))

        def data_received(self, data):
            seen.append((self.who, "data_received", request_id.get()))
            if self.who == "server":
                self.transport.write(data)
                self.transport.write_eof()

        def eof_received(self):
            seen.append((self.who, "eof_received", request_id.get()))

        def connection_lost(self, exc):
            seen.append((self.who, "connection_lost", request_id.get()))

    class Datagrams(asyncio.DatagramProtocol):
        def datagram_received(self, data, addr):
            seen.append(("udp", "datagram_received", request_id.get()))

    async def main():
        request_id.set("server-ctx")
        server = await loop.create_server(lambda: Recorder("server"), "127.0.0.1", 0)
        addr = server.sockets[0].getsockname()
        request_id.set("client-ctx")
        lost = loop.create_future()
        tr, proto = await loop.create_connection(lambda: Recorder("client"), *addr)
        request_id.set("after")
        tr.write(b"hello")
        for _ in range(100):
            if any(who == "client" and what == "eof_received" for who, what, _ in seen):
                break
            await asyncio.sleep(0.01)
        tr.close()
        request_id.set("udp-ctx")
        udp, _ = await loop.create_datagram_endpoint(Datagrams, local_addr=("127.0.0.1", 0))
        request_id.set("after")
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.sendto(b"x", udp.get_extra_info("sockname"))
        request_id.set("pipe-ctx")
        r, w = os.pipe()
        rp, _ = await loop.connect_read_pipe(lambda: Recorder("pipe"), os.fdopen(r, "rb", 0))
        request_id.set("after")
        os.write(w, b"data")
        os.close(w)
        await until(lambda: {("udp", "datagram_received"), ("pipe", "connection_lost")}
                    <= {(who, what) for who, what, _ in seen}, "the datagram and the pipe's end")
        s.close()
        udp.close()
        rp.close()
        server.close()
        await server.wait_closed()
        await until(lambda: {("client", "connection_lost"), ("server", "connection_lost")}
                    <= {(who, what) for who, what, _ in seen}, "both connections lost")
    loop.run_until_complete(main())
    return sorted(set(seen))


def test_protocol_callbacks_see_the_context_of_their_creation():
    ours, reference = on_both_loops(_context_scenario)
    assert ("server", "data_received", "server-ctx") in reference
    assert ours == reference


def _send_context_scenario(loop):
    """What a server protocol's callbacks reached from its sends'
    completions see of a ContextVar set before the server was made: its
    write of 4 MiB pauses it until the client reads (resume_writing()),
    then close() with 4 MiB queued ends it once they are sent
    (connection_lost()).  uringloop dispatches a send's completion
    without entering the transport's context unless its result may reach
    the protocol (StreamSend.complete)."""
    seen = []
    big = b"x" * (4 * 1024 * 1024)

    class Server(asyncio.Protocol):
        def connection_made(self, transport):
            self.transport = transport
            self.writes = 0

        def data_received(self, data):
            self.writes += 1
            self.transport.write(big)
            if self.writes == 2:
                self.transport.close()

        def pause_writing(self):
            seen.append(("pause_writing", request_id.get()))

        def resume_writing(self):
            seen.append(("resume_writing", request_id.get()))

        def connection_lost(self, exc):
            seen.append(("connection_lost", exc, request_id.get()))

    async def main():
        request_id.set("server-ctx")
        server = await loop.create_server(Server, "127.0.0.1", 0)
        addr = server.sockets[0].getsockname()
        request_id.set("after")
        reader, writer = await asyncio.open_connection(*addr)
        for _ in range(2):
            writer.write(b"go")
            await writer.drain()
            await asyncio.sleep(0.05)       # the server's send fills the socket
            await reader.readexactly(len(big))
        assert await reader.read() == b""
        writer.close()
        server.close()
        await server.wait_closed()
        await until(lambda: "connection_lost" in [e[0] for e in seen], "the server's connection_lost()")
    loop.run_until_complete(asyncio.wait_for(main(), 30))
    return seen


def test_protocol_callbacks_from_send_completions_see_the_context_of_their_creation():
    ours, reference = on_both_loops(_send_context_scenario)
    assert ("resume_writing", "server-ctx") in reference
    assert ("connection_lost", None, "server-ctx") in reference
    assert sorted(set(ours)) == sorted(set(reference))


def _buffered_context_scenario(loop, accepted):
    """What a BufferedProtocol's callbacks see of a ContextVar set before
    its connection was made (and set again in connection_made(), which
    runs in a copy of its own): get_buffer() is where uringloop arms its
    first read."""
    seen = []

    class Recorder(asyncio.BufferedProtocol):
        def connection_made(self, transport):
            self.transport = transport
            seen.append(("connection_made", request_id.get()))
            request_id.set("changed in connection_made")

        def get_buffer(self, sizehint):
            seen.append(("get_buffer", request_id.get()))
            return bytearray(65536)

        def buffer_updated(self, nbytes):
            seen.append(("buffer_updated", request_id.get()))
            self.transport.close()

        def connection_lost(self, exc):
            seen.append(("connection_lost", request_id.get()))
            done.set_result(None)

    async def main():
        nonlocal done
        done = loop.create_future()
        request_id.set("made-ctx")
        if accepted:
            server = await loop.create_server(Recorder, "127.0.0.1", 0)
            peer = socket.create_connection(server.sockets[0].getsockname())
        else:
            mine, peer = socket.socketpair()
            await loop.create_connection(Recorder, sock=mine)
        request_id.set("after")
        peer.send(b"ping")
        await asyncio.wait_for(done, 5)
        peer.close()
        if accepted:
            server.close()
            await server.wait_closed()
    done = None
    loop.run_until_complete(main())
    return sorted(set(seen))


# 3.15 on: a socket transport keeps one context and runs connection_made(),
# its reads and connection_lost() all in it (before, connection_made() and
# connection_lost() each ran in a copy of their own)
ONE_CONTEXT_PER_TRANSPORT = "context" in inspect.signature(
    asyncio.selector_events._SelectorTransport.__init__).parameters


@pytest.mark.parametrize("accepted", [True, False], ids=["accepted", "connected"])
def test_buffered_protocol_reads_see_the_context_of_their_creation(any_loop, accepted):
    later = "changed in connection_made" if ONE_CONTEXT_PER_TRANSPORT else "made-ctx"
    assert _buffered_context_scenario(any_loop, accepted) == [
        ("buffer_updated", later), ("connection_lost", later),
        ("connection_made", "made-ctx"), ("get_buffer", later)]


def test_callbacks_queued_before_the_io_run_ahead_of_its_callbacks(any_loop):
    """The selector loop runs the callbacks that were ready when it polled
    before the I/O callbacks that poll reported, and the callbacks those
    queue after both.  aiohttp's test_concurrent_close_multiple_tasks (two
    ws.close() tasks racing a receive) depends on it."""
    loop = any_loop
    order = []

    async def main():
        got = loop.create_future()
        made = loop.create_future()

        class Server(asyncio.Protocol):
            def connection_made(self, transport):
                made.set_result(None)

            def data_received(self, data):
                order.append("io")
                if not got.done():
                    got.set_result(None)

        server = await loop.create_server(Server, "127.0.0.1", 0)
        tr, _ = await loop.create_connection(asyncio.Protocol,
                                             *server.sockets[0].getsockname())
        await made
        tr.write(b"x")
        loop.call_soon(order.append, "cb1")
        loop.call_soon(lambda: loop.call_soon(order.append, "cb2"))
        await got
        await until(lambda: "cb2" in order, "the second callback")
        tr.close()
        server.close()
        await server.wait_closed()
    loop.run_until_complete(main())
    assert order == ["cb1", "io", "cb2"]


def test_timers_follow_a_patched_loop_time(any_loop):
    """aiohttp's tests patch loop.time to reach a keep-alive deadline; the
    selector loop compares its timers with self.time()."""
    from unittest import mock
    loop = any_loop

    async def main():
        fired = []
        now = loop.time()
        with mock.patch.object(loop, "time") as fake:
            fake.return_value = now
            loop.call_at(now + 1000, fired.append, "due")
            fake.return_value = now + 1000
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        return fired
    assert loop.run_until_complete(main()) == ["due"]


# 3.14 on: call_exception_handler() runs a custom handler in the context of
# the handle it reports (Handle.get_context()); for a context already
# entered that fails too, and the default handler says 'Unhandled error in
# exception handler' instead
HANDLER_RUNS_IN_HANDLE_CONTEXT = "get_context" in inspect.getsource(
    asyncio.base_events.BaseEventLoop.call_exception_handler)


@(pytest.mark.loop_errors_expected if HANDLER_RUNS_IN_HANDLE_CONTEXT else lambda f: f)
def test_callbacks_run_as_handle_run_runs_them(any_loop):
    """call_soon() and call_later() callbacks at the edges of Handle._run(),
    which this loop does without the frame (core.pyx, run_handle()): the
    callback runs in the handle's context; a context that is not a
    contextvars.Context but has run() is called as Handle._run() calls it;
    a context already entered, and a callback that raises, are reported to
    the exception handler; a callback that empties its own handle's slots
    runs to its end; a cancelled handle does not run."""
    import contextvars
    loop = any_loop
    var = contextvars.ContextVar("var", default="unset")
    seen = []
    reports = handler_calls(loop)

    class DuckContext:
        def run(self, callback, *args):
            seen.append(("duck.run", args))
            return callback(*args)

    def record(*args):
        seen.append((args, var.get()))

    def raises():
        raise ValueError("boom")

    class Emptied:
        def callback(self, *args):
            del handles[0]._callback, handles[0]._args
            seen.append(("emptied", args))

    def in_context(value):
        var.set(value)
        return contextvars.copy_context()

    entered = contextvars.copy_context()
    handles = [loop.call_soon(Emptied().callback, 1)]
    loop.call_soon(record, "soon", context=contextvars.copy_context().run(in_context, "a"))
    loop.call_soon(record, "duck", context=DuckContext())
    loop.call_soon(raises)
    loop.call_soon(record, "entered", context=entered)
    loop.call_soon(record, "cancelled").cancel()
    loop.call_later(0, record, "later", context=contextvars.copy_context().run(in_context, "b"))
    entered.run(loop.run_until_complete, turns())
    assert seen == [("emptied", (1,)), (("soon",), "a"), ("duck.run", ("duck",)),
                    (("duck",), "unset"), (("later",), "b")]
    outcome = [(type(r["exception"]).__name__, str(r["exception"]).split(":")[0],
                r["message"].split("(")[0].rsplit(".", 1)[-1]) for r in reports]
    if HANDLER_RUNS_IN_HANDLE_CONTEXT:
        assert outcome == [("ValueError", "boom", "raises")]
    else:
        assert outcome == [("ValueError", "boom", "raises"),
                           ("RuntimeError", "cannot enter context", "record")]


def test_call_soon_calls_a_patched_handle_init_while_it_is_patched(any_loop, monkeypatch):
    """call_soon() makes its Handle through Handle.__init__ while a patch
    replaces it, and not before or after (this loop stores the slots itself
    while the class's version tag says __init__ is the stdlib's)."""
    loop = any_loop
    made, ran = [], []
    original = asyncio.Handle.__init__

    def init(self, callback, *args, **kwargs):
        made.append(callback.__name__)
        original(self, callback, *args, **kwargs)

    def before():
        ran.append("before")

    def during():
        ran.append("during")

    def after():
        ran.append("after")

    loop.call_soon(before)
    loop.run_until_complete(asyncio.sleep(0))
    monkeypatch.setattr(asyncio.Handle, "__init__", init)
    loop.call_soon(during)
    monkeypatch.undo()
    loop.call_soon(after)
    loop.run_until_complete(asyncio.sleep(0))
    assert made == ["during"]
    assert ran == ["before", "during", "after"]


def _iterations_seen(loop, wrap_at):
    """How many times a _run_once set on the loop (at the start, or from a
    task once it runs) is called while a task makes 20 sleep(0)s."""
    calls = []
    original = loop._run_once

    def counting():
        calls.append(1)
        original()

    async def main():
        if wrap_at == "running":
            loop._run_once = counting
        for _ in range(20):
            await asyncio.sleep(0)
    if wrap_at == "start":
        loop._run_once = counting
    try:
        loop.run_until_complete(main())
    finally:
        del loop._run_once
    return len(calls)


@pytest.mark.parametrize("wrap_at", ["start", "running"])
def test_a_run_once_set_on_the_loop_is_called_every_iteration(any_loop, wrap_at):
    """A _run_once set on the loop (a monitor timing iterations does so),
    before run_until_complete() or from a callback while it runs, is
    called for every iteration: uringloop's own _run_once runs iterations
    until stop() only while nothing replaces it (core.pyx, _run_once)."""
    assert _iterations_seen(any_loop, wrap_at) >= 20


@pytest.mark.parametrize("base", [asyncio.SelectorEventLoop, uringloop.Loop])
def test_a_subclass_run_once_is_called_every_iteration(base):
    class Counting(base):
        iterations = 0

        def _run_once(self):
            self.iterations += 1
            super()._run_once()

    async def main():
        for _ in range(20):
            await asyncio.sleep(0)
    loop = Counting()
    try:
        loop.run_until_complete(main())
        assert loop.iterations >= 20
    finally:
        loop.close()


@pytest.mark.parametrize("base", [asyncio.SelectorEventLoop, uringloop.Loop])
def test_a_run_once_set_on_the_class_while_running_is_called_every_iteration(base):
    """A _run_once set on the loop's class after iterations ran: uringloop
    looks the class's attribute up again only when the class changed (its
    version tag), and setting one changes it."""
    class Plain(base):
        pass

    calls = []
    original = base._run_once

    def counting(self):
        calls.append(1)
        original(self)

    async def main():
        for _ in range(3):
            await asyncio.sleep(0)      # (the class was looked up and noted)
        Plain._run_once = counting
        for _ in range(20):
            await asyncio.sleep(0)
    loop = Plain()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    assert len(calls) >= 20


@pytest.mark.parametrize("base", [asyncio.SelectorEventLoop, uringloop.Loop])
def test_create_future_and_a_subclass_that_replaces_it(base):
    """The loop's create_future() (compiled) makes the stdlib's Future of
    this loop; a subclass's create_future() is what the loop's own
    operations call, as on the selector loop."""
    made = []

    class Counting(base):
        def create_future(self):
            made.append(1)
            return super().create_future()

    plain, loop = base(), Counting()
    try:
        future = plain.create_future()
        assert type(future) is asyncio.Future and future.get_loop() is plain

        async def main():
            a, b = socket.socketpair()
            a.setblocking(False)
            loop.call_later(0.01, b.send, b"x")     # (nothing there yet: a future waits)
            data = await loop.sock_recv(a, 10)
            await asyncio.sleep(0)
            a.close()
            b.close()
            return data
        before = len(made)
        assert loop.run_until_complete(main()) == b"x"
        assert len(made) > before
    finally:
        plain.close()
        loop.close()


@pytest.mark.parametrize("where", ["instance", "class-after"])
@pytest.mark.parametrize("base", [asyncio.SelectorEventLoop, uringloop.Loop],
                         ids=["asyncio", "uringloop"])
def test_a_create_future_patched_later_is_called_where_the_stdlib_calls_it(base, where):
    """create_future() replaced after the loop was made, on the loop itself
    or on its class (instrumentation does both): each sock_* call that the
    selector loop makes a future for calls it once, with the same count on
    both loops (issue #58, item 2: uringloop had decided once, when the
    loop was made, that its own was in place)."""
    class Subclass(base):
        pass
    loop = Subclass()
    made = []

    def counting(self=None):
        made.append(1)
        return asyncio.Future(loop=loop)
    if where == "instance":
        loop.create_future = counting
    else:
        Subclass.create_future = counting

    async def main():
        counts = {}
        a, b = socket.socketpair()
        for s in (a, b):
            s.setblocking(False)
        for name in ["sock_recv", "sock_recv_into", "sock_accept", "sock_connect"]:
            del made[:]
            if name == "sock_recv":
                loop.call_later(0.01, b.send, b"x")
                assert await loop.sock_recv(a, 10) == b"x"
            elif name == "sock_recv_into":
                loop.call_later(0.01, b.send, b"y")
                assert await loop.sock_recv_into(a, bytearray(10)) == 1
            elif name == "sock_accept":
                listener = socket.create_server(("127.0.0.1", 0))
                listener.setblocking(False)
                client = socket.create_connection(listener.getsockname())
                conn, _ = await loop.sock_accept(listener)
                conn.close()
            else:
                client2 = socket.socket()
                client2.setblocking(False)
                await loop.sock_connect(client2, listener.getsockname())
                client2.close()
                client.close()
                listener.close()
            counts[name] = len(made)
        # sock_sendall: a future only when the socket does not take it all
        del made[:]
        big = bytes(8 << 20)
        sending = loop.create_task(loop.sock_sendall(a, big))
        await asyncio.sleep(0)          # (its first step: a part sent, then a wait)
        counts["sock_sendall"] = len(made)
        got = 0
        while got < len(big):
            got += len(await loop.sock_recv(b, 1 << 20))
        await sending
        a.close()
        b.close()
        return counts
    try:
        counts = loop.run_until_complete(main())
    finally:
        loop.close()
    assert counts == {"sock_recv": 1, "sock_recv_into": 1, "sock_accept": 1,
                      "sock_connect": 1, "sock_sendall": 1}


@pytest.mark.parametrize("kind", ["tcp", "unix"])
@pytest.mark.parametrize("base", [asyncio.SelectorEventLoop, uringloop.Loop],
                         ids=["asyncio", "uringloop"])
def test_a_call_soon_patched_on_the_loop_schedules_the_transports_callbacks(base, kind, tmp_path):
    """call_soon() set on the loop after it was made: a stream connection's
    connection_made() and its connection-lost callback, on both sides, are
    scheduled through it, as on the selector loop (issue #58, item 2)."""
    loop = base()
    scheduled = []
    real = loop.call_soon

    def counting(callback, *args, context=None):
        scheduled.append(getattr(callback, "__name__", repr(callback)))
        return real(callback, *args, context=context)
    loop.call_soon = counting

    async def main():
        lost = loop.create_future()
        made = loop.create_future()

        class P(asyncio.Protocol):
            def connection_made(self, transport):
                made.set_result(None)

            def connection_lost(self, exc):
                if not lost.done():
                    lost.set_result(None)
        if kind == "tcp":
            server = await loop.create_server(P, "127.0.0.1", 0)
            tr, _ = await loop.create_connection(asyncio.Protocol, *server.sockets[0].getsockname()[:2])
        else:
            path = str(tmp_path / "s")
            server = await loop.create_unix_server(P, path)
            tr, _ = await loop.create_unix_connection(asyncio.Protocol, path)
        await made
        tr.close()
        await lost
        server.close()
        await server.wait_closed()
    try:
        loop.run_until_complete(main())
    finally:
        del loop.call_soon
        loop.close()
    assert scheduled.count("connection_made") == 2, scheduled
    lost_callbacks = [n for n in scheduled if "connection_lost" in n]
    assert len(lost_callbacks) >= 2, scheduled


