"""Stream transports: what write(), writelines(), close() and abort() do
with the bytes and the socket, resets, the callbacks that raise on the
read path, the transports' method set.

A test that takes `any_loop` runs its scenario on uringloop and on
asyncio.SelectorEventLoop and expects the same outcome; the others look
at what uringloop itself does (its requests, its own protocols)."""
import array
import asyncio
import gc
import os
import socket
import struct
import sys
import threading
import time

import pytest
from hypothesis import example, given, HealthCheck, settings, strategies as st

import uringloop
from conftest import cycle_garbage, on_both_loops, recv_until_eof, turns, until, until_closed
from protocols import (Collect, collected_connection, collecting, Echo, echo_server,
                       EchoBuffered, run_on_uringloop)
from recorders import Events, handler_calls, run_through_interrupts, STREAM_MODES


TRANSPORT_METHODS = [
    "get_extra_info", "is_closing", "close", "set_protocol", "get_protocol",
    "is_reading", "pause_reading", "resume_reading", "set_write_buffer_limits",
    "get_write_buffer_size", "get_write_buffer_limits", "write", "writelines",


    "write_eof", "can_write_eof", "abort", "sendto"]
SAFE_CALLS = [("is_reading", ()), ("pause_reading", ()), ("resume_reading", ()),
              ("can_write_eof", ()), ("get_write_buffer_size", ()),
              ("get_write_buffer_limits", ()), ("write", (b"",)),
              ("writelines", ([],)), ("sendto", (b"",))]


def _outcome(call):
    try:
        result = call()
    except Exception as exc:
        return type(exc).__name__
    return repr(result) if not isinstance(result, tuple) else "tuple"


def _transport_profile(loop):
    async def main():
        made = {}
        a, b = socket.socketpair()
        made["stream"], _ = await loop.create_connection(asyncio.Protocol, sock=a)
        made["datagram"], _ = await loop.create_datagram_endpoint(
            asyncio.DatagramProtocol, local_addr=("127.0.0.1", 0))
        r, w = os.pipe()
        made["read pipe"], _ = await loop.connect_read_pipe(
            asyncio.Protocol, os.fdopen(r, "rb", 0))
        made["write pipe"], _ = await loop.connect_write_pipe(
            asyncio.BaseProtocol, os.fdopen(w, "wb", 0))
        profile = {}
        for kind, tr in made.items():
            has = {name: hasattr(tr, name) for name in TRANSPORT_METHODS}
            listed = {name: name in dir(tr) for name in TRANSPORT_METHODS}
            calls = {name: _outcome(lambda: getattr(tr, name)(*args))
                     for name, args in SAFE_CALLS if has[name]}
            # (asyncio.DatagramTransport is left out: the stdlib's datagram
            # transport is an instance of it from 3.12 on only; ours always)
            bases = [cls.__name__ for cls in (asyncio.BaseTransport, asyncio.ReadTransport,
                                              asyncio.WriteTransport, asyncio.Transport)
                     if isinstance(tr, cls)]
            profile[kind] = (has, listed, calls, bases)
        for tr in made.values():
            tr.close()
        b.close()
        await until_closed(*made.values())
        return profile
    return loop.run_until_complete(main())


def test_transports_offer_the_method_set_of_the_stdlib_transports():
    ours, reference = on_both_loops(_transport_profile)
    for kind in reference:
        has, listed, calls, bases = ours[kind]
        ref_has, ref_listed, ref_calls, ref_bases = reference[kind]
        # every method the stdlib's transport has, with the same outcome;
        # a few more are fine (a read pipe of ours also answers abort() and
        # the write-buffer queries, all harmless)
        wanted = [name for name, present in ref_has.items() if present]
        assert {n: has[n] for n in wanted} == {n: True for n in wanted}, kind
        assert {n: listed[n] for n in wanted} == {n: True for n in wanted}, kind
        assert {n: calls[n] for n in ref_calls} == ref_calls, kind
        assert bases == ref_bases, kind


def test_a_large_write_to_a_reading_peer_is_sent_within_write(any_loop):
    """aiohttp and others read get_write_buffer_size() right after write():
    with room in the socket, a large write is already gone."""
    loop = any_loop

    async def main():
        a, b = socket.socketpair()
        b.setblocking(False)
        tr, _ = await loop.create_connection(asyncio.Protocol, sock=a)
        sizes = []
        for size in (40 * 1024, 100 * 1024):
            tr.write(b"x" * size)
            sizes.append(tr.get_write_buffer_size())
            got = 0
            while got < size:
                got += len(await loop.sock_recv(b, size))
        info = tr.get_extra_info("writing")
        tr.close()
        b.close()
        await until_closed(tr)
        return sizes, info
    sizes, info = loop.run_until_complete(main())
    assert sizes == [0, 0]
    if info is not None:                # uringloop's own introspection
        assert info["direct_sends"] == 2


def test_a_large_write_to_a_reset_peer_loses_the_connection_with_the_error(any_loop):
    loop = any_loop
    calls = handler_calls(loop)

    async def main():
        lost = loop.create_future()

        class P(asyncio.Protocol):
            def connection_lost(self, exc):
                lost.set_result(exc)

        listener = socket.create_server(("127.0.0.1", 0))
        client = socket.create_connection(listener.getsockname())
        conn, _ = listener.accept()
        listener.close()
        tr, _ = await loop.create_connection(P, sock=conn)
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
        client.close()                  # RST (at once, on loopback)
        await turns()
        tr.write(b"y" * (100 * 1024))
        tr.write(b"z" * (100 * 1024))   # after the error: counted, dropped
        exc = await asyncio.wait_for(lost, 5)
        return type(exc).__name__, tr.is_closing(), tr.get_write_buffer_size()
    assert loop.run_until_complete(main()) in (
        ("ConnectionResetError", True, 0), ("BrokenPipeError", True, 0))
    assert calls == []


@pytest.mark.parametrize("writes", [[b"HTTP/1.1 101\r\n\r\n"], [b"a", b"bc" * 5000, b"d"]])
def test_writes_then_abort_in_one_callback_reach_the_peer(any_loop, writes):
    """The selector loop sends inside write(), so abort() in the same
    callback loses only what the socket did not take: aiohttp's
    test_stalled_parser_outlives_connection_lost writes the 101 response
    and aborts, and its client must read the response.  uringloop hands
    small writes to the ring before its next enter; an abort before then
    must send them as write() would have."""
    loop = any_loop

    async def main():
        a, b = socket.socketpair()
        b.setblocking(False)
        tr, _ = await loop.create_connection(asyncio.Protocol, sock=a)
        for data in writes:
            tr.write(data)
        tr.abort()
        got = b""
        while True:
            try:
                chunk = await asyncio.wait_for(loop.sock_recv(b, 65536), 5)
            except ConnectionResetError:
                break
            if not chunk:
                break
            got += chunk
        b.close()
        await asyncio.sleep(0)
        return got, tr.is_closing(), tr.get_write_buffer_size()
    assert loop.run_until_complete(main()) == (b"".join(writes), True, 0)


@pytest.mark.parametrize("size", [1, 300_000])
def test_write_to_a_reset_peer_then_abort_reports_the_reset(any_loop, size):
    """The peer has reset the connection; write() then abort() in one
    callback.  The selector loop's write() meets ECONNRESET and closes the
    transport with it, so connection_lost() gets a ConnectionResetError,
    not None; uringloop sends a small write only at abort() and must
    report the same."""
    loop = any_loop

    async def scenario():
        lsock = socket.create_server(("127.0.0.1", 0))
        client = socket.create_connection(lsock.getsockname())
        server, _ = lsock.accept()
        lsock.close()
        proto = Events()
        tr, _ = await loop.create_connection(lambda: proto, sock=client)
        await asyncio.sleep(0)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        server.close()                  # an RST, on loopback at once
        tr.write(b"x" * size)
        tr.abort()
        for _ in range(3):
            await asyncio.sleep(0)
        return proto.events, tr.is_closing()
    assert loop.run_until_complete(scenario()) == (
        [("connection_lost", ConnectionResetError)], True)


@pytest.mark.parametrize("kind", ["tcp", "udp", "tcp-written", "udp-sent", "close"])
def test_socket_is_closed_one_iteration_after_abort(any_loop, kind):
    """The selector loop closes the socket in connection_lost's callback,
    which runs in the iteration after abort() (or close() with nothing to
    send): anyio's aclose() aborts, yields once and checks that
    sock.fileno() is -1, and a test thread waiting for the peer to see the
    close must see it.  uringloop's requests on the socket are cancelled
    then; their completions must not hold the close for a later
    iteration."""
    loop = any_loop

    async def main():
        lsock = socket.create_server(("127.0.0.1", 0))
        peer = None
        if kind.startswith("udp"):
            tr, _ = await loop.create_datagram_endpoint(
                asyncio.DatagramProtocol, local_addr=("127.0.0.1", 0))
        else:
            tr, _ = await loop.create_connection(asyncio.Protocol, *lsock.getsockname())
            peer, _ = lsock.accept()
        sock = tr.get_extra_info("socket")
        await turns()                  # its receive is armed, and waiting
        if kind == "tcp-written":
            tr.write(b"x")
            await asyncio.sleep(0)
        elif kind == "udp-sent":
            tr.sendto(b"x", lsock.getsockname())
            await asyncio.sleep(0)
        if kind == "close":
            tr.close()
        else:
            tr.abort()
        await asyncio.sleep(0)
        fileno = sock.fileno()
        if peer is not None:
            peer.settimeout(5)
            peer.recv(10)               # the close reached the peer
            peer.close()
        lsock.close()
        return fileno
    assert loop.run_until_complete(main()) == -1


def test_writelines_with_a_bad_item_queues_what_the_stdlib_queues(any_loop):
    """Up to 3.14 the stdlib's writelines() checks every item before it
    queues one (3.11 joins them, 3.12 makes a memoryview of each): a bad
    item raises TypeError and the good items before it are not sent
    either.  3.15 queues each item in turn: those before it are sent."""
    loop = any_loop

    async def main():
        a, b = socket.socketpair()
        b.setblocking(False)
        tr, _ = await loop.create_connection(asyncio.Protocol, sock=a)
        with pytest.raises(TypeError):
            tr.writelines([b"lost", "not bytes"])
        with pytest.raises(TypeError):
            tr.writelines(iter([bytearray(b"lost"), 7]))
        tr.writelines(iter([b"sent", memoryview(b"!"), array.array("b", [63])]))
        tr.close()
        got = await recv_until_eof(loop, b, 100)
        b.close()
        return got
    lost = b"lostlost" if sys.version_info >= (3, 15) else b""
    assert loop.run_until_complete(main()) == lost + b"sent!?"      # any buffer is taken


def test_a_transport_closed_after_its_loop_closes_its_socket(any_loop):
    """close() on a transport whose loop is closed: the selector loop's
    call_soon() raises RuntimeError('Event loop is closed') before the
    socket is closed (it is closed when the transport is collected);
    uringloop closes the socket at once, as no request of the closed ring
    can name its fd any more.  Either way nothing is left open once the
    transport is gone."""
    loop = any_loop

    async def main():
        a, b = socket.socketpair()
        tr, _ = await loop.create_connection(asyncio.Protocol, sock=a)
        return tr, a.fileno(), b

    tr, fd, peer = loop.run_until_complete(main())
    loop.close()
    try:
        tr.close()
    except RuntimeError as exc:
        assert isinstance(loop, asyncio.SelectorEventLoop), exc
        assert str(exc) == "Event loop is closed"
    else:
        assert isinstance(loop, uringloop.Loop)
        assert tr.get_extra_info("socket").fileno() == -1
        assert peer.recv(10) == b""         # the peer sees the end
    del tr
    gc.collect()
    with pytest.raises(OSError):
        os.fstat(fd)
    peer.close()


def _raising_stream_read_scenario(loop, name, on_instance):
    """The stream's read callback (`name`: data_received or buffer_updated)
    raises ValueError: on the selector loop the transport's fatal error,
    reported with the stdlib's message, then connection_lost() with the
    exception, and the peer sees the close.  `on_instance`: the method is
    an attribute of the protocol object, which uringloop cannot keep, so
    the call goes through the lookup (the other path to the same
    handler)."""
    seen = []
    reports = handler_calls(loop)

    def received(arg):
        seen.append(("received", arg if isinstance(arg, int) else len(arg)))
        raise ValueError(f"raised by {name}")

    class Plain(asyncio.Protocol):
        def __init__(self):
            if on_instance:
                self.data_received = received

        def data_received(self, data):
            received(data)

        def connection_lost(self, exc):
            seen.append(("connection_lost", type(exc).__name__, str(exc)))

    class Buffered(asyncio.BufferedProtocol):
        def __init__(self):
            self.buf = bytearray(1024)
            if on_instance:
                self.buffer_updated = received

        def get_buffer(self, sizehint):
            return self.buf

        def buffer_updated(self, nbytes):
            received(nbytes)

        def connection_lost(self, exc):
            seen.append(("connection_lost", type(exc).__name__, str(exc)))

    async def main():
        a, b = socket.socketpair()
        b.setblocking(False)
        factory = Plain if name == "data_received" else Buffered
        tr, _ = await loop.create_connection(factory, sock=a)
        b.send(b"12345")
        for _ in range(200):
            if any(s[0] == "connection_lost" for s in seen):
                break
            await asyncio.sleep(0.01)
        peer = await asyncio.wait_for(loop.sock_recv(b, 10), 5)   # b"": closed
        b.close()
        return peer, tr.is_closing()
    peer, closing = loop.run_until_complete(main())
    return (seen, peer, closing,
            [(r.get("message"), type(r.get("exception")).__name__) for r in reports])


@pytest.mark.parametrize("on_instance", [False, True])
@pytest.mark.parametrize("name", ["data_received", "buffer_updated"])
def test_a_raising_stream_read_callback_is_the_transports_fatal_error(name, on_instance):
    ours, reference = on_both_loops(_raising_stream_read_scenario, name, on_instance)
    assert reference == (
        [("received", 5), ("connection_lost", "ValueError", f"raised by {name}")],
        b"", True, [(f"Fatal error: protocol.{name}() call failed.", "ValueError")])
    assert ours == reference


@pytest.mark.parametrize("mode", sorted(STREAM_MODES))
def test_a_keyboard_interrupt_in_a_data_callback_leaves_reading_on(any_loop, mode):
    """data_received()/buffer_updated() raises KeyboardInterrupt on its 1st
    and 3rd call; it leaves run_until_complete(), and running the loop again
    gets the rest of the stream: 150,000 of 150,000 bytes on the stdlib
    loop (direct and buffered reads were never armed again: 100,000)."""
    loop = any_loop
    factory, chunk = STREAM_MODES[mode]
    total = 150_000

    class Raising(factory):
        def saw(self, n):
            super().saw(n)
            if self.nbytes >= total and not done.done():
                done.set_result(self.nbytes)
            if self.calls in (1, 3):
                raise KeyboardInterrupt

    done = loop.create_future()
    a, b = socket.socketpair()

    async def start():
        tr, _ = await loop.create_connection(Raising, sock=a)
        return tr
    tr = loop.run_until_complete(start())
    proto = tr.get_protocol()

    def send():
        # each chunk once the one before was seen: at least one data
        # callback per chunk, however late the loop reads (on a busy
        # machine a read of all that had come made the 3rd call never come)
        for i in range(0, total, chunk):
            deadline = time.monotonic() + 10
            while proto.nbytes < i and time.monotonic() < deadline:
                time.sleep(0.001)
            b.sendall(bytes(min(chunk, total - i)))
    sending = threading.Thread(target=send)
    sending.start()
    timeout = loop.call_later(20, lambda: done.done() or done.set_result("timed out"))
    got, interrupts = run_through_interrupts(loop, done)
    timeout.cancel()
    sending.join()
    tr.close()
    b.close()
    loop.run_until_complete(asyncio.sleep(0))
    assert (got, interrupts) == (total, 2)


@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit])
def test_a_base_exception_from_get_buffer_leaves_reading_on(any_loop, exc):
    """get_buffer() raises KeyboardInterrupt or SystemExit on its first
    call: it leaves the loop, and run again the loop asks get_buffer()
    again, delivers every byte and calls connection_lost() when the peer
    closes (issue #58, item 4: uringloop never read that transport again)."""
    loop = any_loop
    total = 100_000
    events = []

    class Raising(asyncio.BufferedProtocol):
        calls = 0
        nbytes = 0

        def connection_made(self, tr):
            self.buf = bytearray(8192)

        def get_buffer(self, sizehint):
            self.calls += 1
            if self.calls == 1:
                raise exc
            return self.buf

        def buffer_updated(self, n):
            self.nbytes += n

        def eof_received(self):
            events.append("eof")

        def connection_lost(self, e):
            events.append(("lost", e))
            done.set_result(self.nbytes)

    done = loop.create_future()
    a, b = socket.socketpair()

    async def start():
        tr, _ = await loop.create_connection(Raising, sock=a)
        b.sendall(bytes(total))
        b.shutdown(socket.SHUT_WR)
        return tr
    raised = 0
    try:
        loop.run_until_complete(start())
    except exc:
        raised += 1     # (get_buffer() may be asked as reading starts)
    timeout = loop.call_later(20, lambda: done.done() or done.set_result("timed out"))
    while True:
        try:
            got = loop.run_until_complete(done)
            break
        except exc:
            raised += 1
            assert raised < 5
    timeout.cancel()
    b.close()
    assert (got, raised, events) == (total, 1, ["eof", ("lost", None)])


@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit])
def test_a_base_exception_from_eof_received_closes_when_run_again(any_loop, exc):
    """eof_received() raises KeyboardInterrupt or SystemExit the first time:
    it leaves the loop; run again, the loop asks eof_received() again and,
    as it returns None, closes: the peer reads its end, the protocol gets
    connection_lost(None) (issue #58, item 4: the connection stayed
    half-open)."""
    loop = any_loop
    events = []

    class Raising(asyncio.Protocol):
        def eof_received(self):
            events.append("eof")
            if len(events) == 1:
                raise exc

        def connection_lost(self, e):
            events.append(("lost", e))
            done.set_result(None)

    done = loop.create_future()
    a, b = socket.socketpair()

    async def start():
        tr, _ = await loop.create_connection(Raising, sock=a)
        b.shutdown(socket.SHUT_WR)
        return tr
    raised = 0
    try:
        loop.run_until_complete(start())
    except exc:
        raised += 1     # (the end may be read before start() resumes)
    timeout = loop.call_later(20, lambda: done.done() or done.set_result("timed out"))
    while True:
        try:
            loop.run_until_complete(done)
            break
        except exc:
            raised += 1
            assert raised < 5
    timeout.cancel()
    b.settimeout(5)
    assert b.recv(10) == b""        # the loop's end closed: a FIN
    b.close()
    assert raised == 1 and events == ["eof", "eof", ("lost", None)]


@pytest.mark.parametrize("queued", [False, True])
def test_what_is_written_after_close_goes_out_as_on_the_stdlib(any_loop, queued):
    """write(); close(); write(): the stdlib's first write leaves inside
    write(), close() finds nothing queued and the transport is lost, so the
    later write is dropped.  With data still queued at close() (more than
    the socket takes), a later write is queued behind it and sent."""
    loop = any_loop
    first = b"x" * (8 << 20 if queued else 10)

    async def main():
        a, b = socket.socketpair()
        b.setblocking(False)
        tr, _ = await loop.create_connection(asyncio.Protocol, sock=a)
        tr.write(first)
        tr.close()
        tr.write(b"AFTER-CLOSE")
        got = await recv_until_eof(loop, b, 1 << 20, timeout=10)
        b.close()
        return got
    got = loop.run_until_complete(main())
    assert got == first + (b"AFTER-CLOSE" if queued else b"")


@pytest.mark.parametrize("mode", sorted(STREAM_MODES))
def test_nothing_is_delivered_after_close_while_writes_drain(any_loop, mode):
    """close() with 8 MiB still queued (the peer does not read yet): what
    the peer sends afterwards reaches no data callback, as the selector
    loop stops reading at close(); the queued data still goes out whole,
    and connection_lost() comes once it has."""
    loop = any_loop
    factory, chunk = STREAM_MODES[mode]
    payload = b"q" * (8 << 20)

    async def main():
        a, b = socket.socketpair()
        b.setblocking(False)
        tr, proto = await loop.create_connection(factory, sock=a)
        await loop.sock_sendall(b, bytes(chunk))
        while proto.nbytes < chunk:
            await asyncio.sleep(0.001)
        tr.write(payload)
        tr.close()
        calls_at_close = proto.calls
        await loop.sock_sendall(b, bytes(chunk))      # after close(): not delivered
        await turns()       # (an absence; the receiving below runs the loop on)
        got = 0
        while got < len(payload):
            got += len(await loop.sock_recv(b, 1 << 20))
        await until_closed(tr)
        # (the transport's socket then closes with those bytes unread: the
        # peer's next receive is a reset, on both loops)
        b.close()
        return proto.calls - calls_at_close, got
    assert loop.run_until_complete(asyncio.wait_for(main(), 60)) == (0, len(payload))


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(size=st.integers(0, 16 * 1024 * 1024),
       chunking=st.lists(st.integers(1, 3 * 1024 * 1024), min_size=1, max_size=8),
       seed=st.integers(0, 2**32 - 1))
@example(size=16 * 1024 * 1024, chunking=[3 * 1024 * 1024, 1, 65536], seed=1)
@example(size=0, chunking=[1], seed=0)
@example(size=1, chunking=[1], seed=0)
def test_stream_echo_is_byte_exact(size, chunking, seed):
    """Random payload sizes up to 16 MiB, written in random chunk sizes and
    mixed buffer types, echoed back unchanged."""
    payload = os.urandom(size) if size < 65536 else (
        bytes(range(256)) * (size // 256 + 1))[:size]
    payload = bytes((b ^ (seed >> (i % 24))) & 0xFF for i, b in enumerate(payload[:4096])) + payload[4096:]

    async def main():
        loop = asyncio.get_running_loop()
        server, addr = await echo_server(loop)
        async with server:
            reader, writer = await asyncio.open_connection(*addr)
            # read concurrently: an echo peer blocks when nobody reads
            reading = asyncio.ensure_future(reader.read())
            pos, i = 0, 0
            kinds = (bytes, bytearray, memoryview)
            while pos < size:
                n = chunking[i % len(chunking)]
                chunk = payload[pos:pos + n]
                writer.write(kinds[i % 3](chunk) if kinds[i % 3] is not memoryview
                             else memoryview(chunk))
                pos += n
                i += 1
                if i % 3 == 0:
                    await writer.drain()
            writer.write_eof()
            got = await reading
            writer.close()
            await writer.wait_closed()
            assert len(got) == size and got == payload

    run_on_uringloop(main(), timeout=120)


def test_hundreds_of_concurrent_connections_both_directions(any_loop):
    n_conns = 300

    async def main():
        loop = asyncio.get_running_loop()
        # a backlog above the connection count: this test is about many
        # transports at once, not about the kernel's accept-queue overflow
        server, addr = await echo_server(loop, backlog=n_conns + 100)
        async with server:
            async def client(k):
                reader, writer = await asyncio.open_connection(*addr)
                payload = os.urandom(1000 + 997 * k)
                writer.write(payload)
                got = await reader.readexactly(len(payload))
                writer.close()
                await writer.wait_closed()
                return got == payload

            results = await asyncio.gather(*(client(k) for k in range(n_conns)))
            assert all(results)
            await asyncio.gather(*server.handlers)

    any_loop.run_until_complete(asyncio.wait_for(main(), 120))


def test_protocol_callbacks_order_and_half_close(any_loop):
    async def main():
        loop = asyncio.get_running_loop()
        server_proto = None

        class KeepOpen(Collect):
            def eof_received(self):
                super().eof_received()
                # reply after the peer's EOF, then close: half-close kept
                self.transport.write(b"reply after eof")
                self.transport.close()
                return True

        def factory():
            nonlocal server_proto
            server_proto = KeepOpen()
            return server_proto

        server = await loop.create_server(factory, "127.0.0.1", 0)
        async with server:
            tr, cli = await loop.create_connection(Collect, *server.sockets[0].getsockname())
            assert tr.can_write_eof()
            tr.write(b"request")
            tr.write_eof()
            with pytest.raises(RuntimeError):
                tr.write(b"after eof")
            await cli.done
            await server_proto.done
            assert bytes(server_proto.data) == b"request"
            assert bytes(cli.data) == b"reply after eof"
            assert server_proto.events == ["made", "eof", "lost"]
            assert cli.events == ["made", "eof", "lost"]
            assert tr.is_closing()

    any_loop.run_until_complete(asyncio.wait_for(main(), 60))


@pytest.mark.parametrize("server_protocol", [Echo, EchoBuffered])
@pytest.mark.parametrize("size", [1, 1 << 20])
@pytest.mark.parametrize("server_pauses", [False, True])
def test_closed_stream_transports_leave_no_cycle_garbage(uloop, server_protocol, size,
                                                         server_pauses):
    """A stream transport is freed by its reference count once its
    connection is lost, in every read mode (ring buffers, direct reads
    after large ones, a BufferedProtocol's buffer) and when it closes
    paused: its reader lets go of it (release_ops).  The selector loop's
    stream transports are cycle garbage (a bound method of their own), so
    this is uringloop's own property; a server's connections were a fifth
    of its user CPU in the collector (bench/run_connect.py)."""
    async def one_connection():
        served = []
        server = await uloop.create_server(collecting(server_protocol, served),
                                           "127.0.0.1", 0)
        reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname())
        writer.write(b"x" * size)
        assert len(await reader.readexactly(size)) == size     # (echoed: served[0] exists)
        if server_pauses:
            served[0].transport.pause_reading()
        writer.close()
        await writer.wait_closed()
        served[0].transport.close()
        server.close()
        await server.wait_closed()
        for _ in range(3):
            await asyncio.sleep(0)

    assert cycle_garbage(uloop, one_connection) == []


def test_close_while_writes_are_queued_sends_everything(any_loop):
    payload = os.urandom(8 * 1024 * 1024)

    async def main():
        loop = asyncio.get_running_loop()
        async with collected_connection(loop) as (tr, cli, received):
            tr.write(payload)
            assert tr.get_write_buffer_size() > 0
            tr.close()
            assert await cli.done is None
            await received.done
            assert bytes(received.data) == payload

    any_loop.run_until_complete(asyncio.wait_for(main(), 60))


def test_abort_drops_queued_data_and_reports_no_error(any_loop):
    async def main():
        loop = asyncio.get_running_loop()
        async with collected_connection(loop) as (tr, cli, received):
            tr.write(b"x" * (16 * 1024 * 1024))
            tr.abort()
            assert tr.get_write_buffer_size() == 0
            assert await cli.done is None
            await received.done
            assert len(received.data) < 16 * 1024 * 1024

    any_loop.run_until_complete(asyncio.wait_for(main(), 60))


def test_peer_reset_mid_transfer_is_connection_reset(any_loop):
    async def main():
        loop = asyncio.get_running_loop()
        accepted = loop.create_future()

        class Resetter(asyncio.Protocol):
            def connection_made(self, transport):
                sock = transport.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
                accepted.set_result(transport)

        server = await loop.create_server(Resetter, "127.0.0.1", 0)
        async with server:
            tr, cli = await loop.create_connection(Collect, *server.sockets[0].getsockname())
            srv_tr = await accepted
            tr.write(b"y" * (4 * 1024 * 1024))
            srv_tr.abort()      # SO_LINGER 0: RST
            exc = await cli.done
            assert isinstance(exc, (ConnectionResetError, BrokenPipeError)), exc

    any_loop.run_until_complete(asyncio.wait_for(main(), 60))


def test_buffered_protocol_receives_into_its_buffer(any_loop):
    payload = os.urandom(3 * 1024 * 1024)

    async def main():
        loop = asyncio.get_running_loop()

        class Buffered(asyncio.BufferedProtocol):
            def __init__(self):
                self.buf = bytearray(65536)
                self.data = bytearray()
                self.done = loop.create_future()

            def get_buffer(self, sizehint):
                return self.buf

            def buffer_updated(self, nbytes):
                self.data += self.buf[:nbytes]

            def eof_received(self):
                return False

            def connection_lost(self, exc):
                self.done.set_result(exc)

        async with collected_connection(loop, Buffered()) as (tr, cli, proto):
            tr.write(payload)
            tr.close()
            await proto.done
            assert bytes(proto.data) == payload

    any_loop.run_until_complete(asyncio.wait_for(main(), 60))


def test_transport_extra_info_and_types(any_loop):
    async def main():
        loop = asyncio.get_running_loop()
        server, addr = await echo_server(loop)
        async with server:
            tr, cli = await loop.create_connection(Collect, *addr)
            assert isinstance(tr, asyncio.Transport)
            assert tr.get_extra_info("peername") == addr
            assert tr.get_extra_info("sockname")[0] == "127.0.0.1"
            sock = tr.get_extra_info("socket")
            assert sock.family == socket.AF_INET
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            assert tr.get_extra_info("nothing", "default") == "default"
            with pytest.raises(TypeError):
                tr.write("text")
            tr.close()
            tr.close()
            tr.write(b"after close is ignored")
            await cli.done

    any_loop.run_until_complete(asyncio.wait_for(main(), 60))


def test_a_bulk_write_leaves_in_requests_of_at_most_128_kib():
    """Chunks queued behind a send leave together, but one request takes
    at most 128 KiB past its head chunk (stream.pyx, SEND_BATCH_BYTES:
    megabytes per SENDMSG were twice as slow on loopback); every byte
    arrives in order."""
    async def main():
        loop = asyncio.get_running_loop()
        server_proto = []

        def factory():
            server_proto.append(Collect())
            return server_proto[-1]

        server = await loop.create_server(factory, "127.0.0.1", 0)
        tr, _ = await loop.create_connection(asyncio.Protocol, *server.sockets[0].getsockname())
        # room for all of it at once, as a send buffer autotuned up has
        tr.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
        # (4 KiB writes are queued: 8 KiB and more would go with send(2))
        chunks = [os.urandom(4 * 1024) for _ in range(1024)]
        for chunk in chunks:
            tr.write(chunk)
        while tr.get_write_buffer_size():
            await asyncio.sleep(0.001)
        stats = tr.get_extra_info("zerocopy")
        tr.close()
        await server_proto[0].done
        server.close()
        assert bytes(server_proto[0].data) == b"".join(chunks)
        # 4 MiB in requests of 128 KiB (32 chunks) or less: 32 or more,
        # where a SENDMSG of 64 chunks made 4
        assert stats["ordinary_bytes"] == 4 << 20
        assert stats["ordinary_sends"] >= 32, stats
    run_on_uringloop(main())


def test_a_thousand_writes_in_one_callback_leave_whole_and_in_order(any_loop):
    """1000 writes of 1 to 3000 bytes in one callback, then close(): the
    peer reads exactly their concatenation, on two connections one after
    the other (the second gets the write queue the first grew to 1024
    chunks and gave back; it keeps no more than 64 slots)."""
    loop = any_loop
    chunks = [bytes([i % 251]) * (1 + (i * 7919) % 3000) for i in range(1000)]
    expected = b"".join(chunks)

    def read_all(sock, into):
        with sock:
            while data := sock.recv(1 << 20):
                into.append(data)

    async def one_connection():
        a, b = socket.socketpair()
        got = []
        reader = threading.Thread(target=read_all, args=(b, got))
        reader.start()
        transport, protocol = await loop.create_connection(asyncio.Protocol, sock=a)
        for chunk in chunks:
            transport.write(chunk)
        transport.close()
        await loop.run_in_executor(None, reader.join)
        return b"".join(got)

    for _ in range(2):
        assert loop.run_until_complete(one_connection()) == expected
