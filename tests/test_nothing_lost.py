"""Nothing lost, nothing hung (issues #13, #33): a cancelled receive or
accept takes nothing from the socket, whoever uses it next; lengths of
4 GiB and more, NaN timers.

Where the stdlib shows the same behaviour the test runs on both loops
(`any_loop`).  The interleaving in which a receive's socket was ready but
its task is cancelled before it resumes runs on uringloop alone: the
selector loop has read the data in its reader callback by then, and loses
it.
"""
import asyncio
import mmap
import os
import socket
import sys
import threading

import pytest

import uringloop
from conftest import until, until_closed


async def cancel_once_ready(loop, task):
    """Cancel task in the first iteration in which the future it waits on
    is done but the task has not resumed: the interleaving asyncio.wait_for,
    TaskGroup and gather produce when data and a cancellation meet."""
    for _ in range(1000):
        await asyncio.sleep(0)
        waiter = task._fut_waiter
        if waiter is not None and waiter.done():
            task.cancel()
            return
    pytest.fail("the receive never saw its socket ready")


# ---- 1. a cancelled receive takes nothing from the socket -------------------

RECEIVES = {
    "sock_recv": (socket.SOCK_STREAM, lambda loop, s: loop.sock_recv(s, 100)),
    "sock_recv_into": (socket.SOCK_STREAM,
                       lambda loop, s: loop.sock_recv_into(s, bytearray(100))),
    "sock_recvfrom": (socket.SOCK_DGRAM, lambda loop, s: loop.sock_recvfrom(s, 100)),
    "sock_recvfrom_into": (socket.SOCK_DGRAM,
                           lambda loop, s: loop.sock_recvfrom_into(s, bytearray(100))),
}


@pytest.mark.parametrize("op", sorted(RECEIVES))
def test_a_receive_cancelled_as_data_arrives_leaves_it_for_a_plain_recv(any_loop, op):
    """The data arrives in the step that cancels the waiting receive: the
    socket still holds it, for the socket module's own recv()."""
    loop = any_loop
    kind, receive = RECEIVES[op]

    async def main():
        a, b = socket.socketpair(socket.AF_UNIX, kind)
        a.setblocking(False)
        with a, b:
            for i in range(20):
                task = loop.create_task(receive(loop, a))
                await asyncio.sleep(0)
                b.send(b"%04d" % i)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                a.settimeout(5)
                assert a.recv(100) == b"%04d" % i
                a.setblocking(False)
    loop.run_until_complete(asyncio.wait_for(main(), 30))


@pytest.mark.parametrize("op", sorted(RECEIVES))
def test_a_receive_whose_socket_was_ready_when_cancelled_leaves_the_data(uloop, op):
    """The receive's wait is over (the socket is ready) but its task is
    cancelled before it resumes: nothing was read, a plain recv() gets it,
    and so does the next sock_* call.  (uringloop only: the selector loop
    reads in its reader callback, before the task resumes, and loses the
    data in this interleaving.)"""
    kind, receive = RECEIVES[op]

    async def main():
        a, b = socket.socketpair(socket.AF_UNIX, kind)
        a.setblocking(False)

        async def cancelled_once_ready(payload):
            task = uloop.create_task(receive(uloop, a))
            await asyncio.sleep(0)
            b.send(payload)
            await cancel_once_ready(uloop, task)
            with pytest.raises(asyncio.CancelledError):
                await task

        with a, b:
            await cancelled_once_ready(b"first")
            a.settimeout(5)
            plain = a.recv(100)
            a.setblocking(False)
            await cancelled_once_ready(b"second")
            again = await asyncio.wait_for(receive(uloop, a), 5)
            return plain, again
    plain, again = uloop.run_until_complete(main())
    assert plain == b"first"
    got = again if kind == socket.SOCK_STREAM else again[0]     # (n or data, address)
    assert got == (6 if op.endswith("_into") else b"second")


@pytest.mark.parametrize("when", ["waiting", "ready"])
def test_a_cancelled_accept_leaves_the_connection_for_a_plain_accept(any_loop, when):
    loop = any_loop
    if when == "ready" and not isinstance(loop, uringloop.Loop):
        pytest.skip("the selector loop accepts in its reader callback and "
                    "loses the connection in this interleaving")

    async def main():
        with socket.create_server(("127.0.0.1", 0)) as srv:
            srv.setblocking(False)
            task = loop.create_task(loop.sock_accept(srv))
            await asyncio.sleep(0)
            c = socket.create_connection(srv.getsockname())
            if when == "ready":
                await cancel_once_ready(loop, task)
            else:
                task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            srv.settimeout(5)
            conn, address = srv.accept()
            with c, conn:
                return address == c.getsockname()
    assert loop.run_until_complete(asyncio.wait_for(main(), 30))


def test_wait_for_receives_lose_no_byte(any_loop):
    """The issue's measurement: streams read with wait_for(sock_recv) and
    short timeouts while data flows; every byte arrives, in order, on
    both loops."""
    if not isinstance(any_loop, uringloop.Loop) and sys.version_info >= (3, 14):
        pytest.skip("the selector loop itself loses bytes here on 3.14 and 3.15 "
                    "(streams come out short); 3.11's run is the reference")
    loop = any_loop
    streams, chunks = 40, 30

    async def one(i):
        a, b = socket.socketpair()
        a.setblocking(False)
        b.setblocking(False)
        expected = b"".join(b"%d:%d;" % (i, k) for k in range(chunks))
        with a, b:
            async def writer():
                for k in range(chunks):
                    await loop.sock_sendall(b, b"%d:%d;" % (i, k))
                    await asyncio.sleep(0.0005 * (k % 3))
            w = loop.create_task(writer())
            got = b""
            deadline = loop.time() + 20
            while len(got) < len(expected) and loop.time() < deadline:
                try:
                    got += await asyncio.wait_for(loop.sock_recv(a, 7), 0.0007)
                except asyncio.TimeoutError:
                    pass
            await w
            return got == expected

    async def main():
        return await asyncio.gather(*(one(i) for i in range(streams)))
    results = loop.run_until_complete(main())
    assert sum(results) == streams


def test_wait_for_accepts_lose_no_connection(uloop):
    # uringloop only: the stdlib loop itself loses one now and then here
    # (seen: 299 of 300, its _sock_accept callback running on a future
    # wait_for had cancelled -- InvalidStateError in the exception handler)
    loop = uloop
    total = 300

    async def main():
        with socket.create_server(("127.0.0.1", 0), backlog=total) as srv:
            srv.setblocking(False)
            clients = []

            async def connector():
                for k in range(total):
                    c = socket.socket()
                    c.setblocking(False)
                    await loop.sock_connect(c, srv.getsockname())
                    clients.append(c)
                    if k % 3 == 0:
                        await asyncio.sleep(0.0002)
            t = loop.create_task(connector())
            accepted = []
            deadline = loop.time() + 20
            while len(accepted) < total and loop.time() < deadline:
                try:
                    accepted.append(await asyncio.wait_for(loop.sock_accept(srv), 0.0002))
                except asyncio.TimeoutError:
                    pass
            await t
            for conn, _ in accepted:
                conn.close()
            for c in clients:
                c.close()
            return len(accepted)
    assert loop.run_until_complete(main()) == total


# ---- 2. a socket handed on after a cancelled receive -------------------------

@pytest.mark.parametrize("to", ["stream transport", "datagram transport", "server"])
def test_a_socket_handed_on_after_a_cancelled_receive_gives_its_new_user_all(uloop, to):
    """The receive's socket is ready when its task is cancelled, and in that
    step the socket is handed to a transport or a server: they get the data
    (or connection) first, from the socket itself.  (The stdlib loses it
    in this interleaving: its reader callback has read it.)"""
    async def main():
        if to == "server":
            listener = socket.create_server(("127.0.0.1", 0))
            listener.setblocking(False)
            first = uloop.create_task(uloop.sock_accept(listener))
            await asyncio.sleep(0)
            peer = socket.create_connection(listener.getsockname())
            await cancel_once_ready(uloop, first)
            served = uloop.create_future()
            server = await uloop.create_server(
                lambda: type("P", (asyncio.Protocol,), {
                    "data_received": lambda self, d: served.done() or served.set_result(d)})(),
                sock=listener)
            peer.sendall(b"hello")
            got = await asyncio.wait_for(served, 5)
            peer.close()
            server.close()
            await server.wait_closed()
            return got
        kind = socket.SOCK_STREAM if to == "stream transport" else socket.SOCK_DGRAM
        a, b = socket.socketpair(socket.AF_UNIX, kind)
        a.setblocking(False)
        receive = uloop.sock_recv if kind == socket.SOCK_STREAM else uloop.sock_recvfrom
        first = uloop.create_task(receive(a, 100))
        await asyncio.sleep(0)
        b.send(b"first")
        await cancel_once_ready(uloop, first)
        got = []
        came = uloop.create_future()

        class P(asyncio.DatagramProtocol if kind == socket.SOCK_DGRAM else asyncio.Protocol):
            def data_received(self, data):
                got.append(data)
                if b"".join(got).endswith(b"second"):
                    came.set_result(None)

            def datagram_received(self, data, addr):
                self.data_received(data)

        if kind == socket.SOCK_STREAM:
            tr, _ = await uloop.create_connection(P, sock=a)
        else:
            tr, _ = await uloop.create_datagram_endpoint(P, sock=a)
        b.send(b"second")
        await asyncio.wait_for(came, 5)
        tr.close()
        b.close()
        return got
    got = uloop.run_until_complete(main())
    if to == "server":
        assert got == b"hello"
    elif to == "stream transport":
        assert b"".join(got) == b"firstsecond"
    else:
        assert got == [b"first", b"second"]


# ---- 3. lengths of 4 GiB and more -----------------------------------------

def _reader_thread(sock, expected):
    """Count what arrives on a blocking socket; returns a dict filled in."""
    result = {"n": 0}

    def run():
        buf = bytearray(1 << 20)
        while result["n"] < expected:
            k = sock.recv_into(buf)
            if not k:
                break
            result["n"] += k
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, result


def test_recv_of_4_gib_or_more_returns_the_data(any_loop):
    loop = any_loop

    async def main():
        a, b = socket.socketpair()
        a.setblocking(False)
        with a, b:
            b.sendall(b"abc")
            assert await loop.sock_recv(a, 2**32) == b"abc"
            b.sendall(b"def")
            assert await loop.sock_recv(a, 2**32 + 1) == b"def"
            big = mmap.mmap(-1, 2**32 + 4096)
            b.sendall(b"ghi")
            assert await loop.sock_recv_into(a, big) == 3
            assert big[:3] == b"ghi"
            big.close()
    loop.run_until_complete(main())


def test_buffered_protocol_with_a_4_gib_buffer_gets_data(any_loop):
    loop = any_loop
    big = mmap.mmap(-1, 2**32)

    class P(asyncio.BufferedProtocol):
        def __init__(self):
            self.got = loop.create_future()
            self.eof = False

        def get_buffer(self, hint):
            return big

        def buffer_updated(self, n):
            if not self.got.done():
                self.got.set_result(bytes(big[:n]))

        def eof_received(self):
            self.eof = True

    async def main():
        a, b = socket.socketpair()
        with b:
            tr, proto = await loop.create_connection(P, sock=a)
            b.sendall(b"hello")
            assert await asyncio.wait_for(proto.got, 5) == b"hello"
            assert not proto.eof
            tr.close()
            await until_closed(tr)
    try:
        loop.run_until_complete(main())
    finally:
        big.close()


@pytest.mark.parametrize("size", [2**32, 2**32 + 3])
def test_sock_sendall_of_4_gib_or_more_sends_everything(uloop, size):
    data = bytes(size)       # calloc'd: zero pages, no resident memory

    async def main():
        a, b = socket.socketpair()
        a.setblocking(False)
        with a, b:
            t, got = _reader_thread(b, size)
            await asyncio.wait_for(uloop.sock_sendall(a, data), 120)
            await uloop.run_in_executor(None, t.join, 60)
            assert got["n"] == size
    uloop.run_until_complete(main())


@pytest.mark.parametrize("size", [2**32, 2**32 + 5])
def test_transport_write_of_4_gib_or_more_sends_everything(uloop, size):
    data = bytes(size)

    async def main():
        a, b = socket.socketpair()
        with b:
            t, got = _reader_thread(b, size)
            tr, proto = await uloop.create_connection(asyncio.Protocol, sock=a)
            tr.write(data)
            deadline = uloop.time() + 120
            while tr.get_write_buffer_size() and uloop.time() < deadline:
                await asyncio.sleep(0.05)
            await uloop.run_in_executor(None, t.join, 60)
            tr.close()
            assert got["n"] == size
    uloop.run_until_complete(main())


# ---- 5. NaN and inf timers --------------------------------------------------

def _guard(loop, seconds=10):
    """Wake and stop a loop that would hang, from another thread."""
    timer = threading.Timer(seconds, loop.call_soon_threadsafe, args=(loop.stop,))
    timer.daemon = True
    timer.start()
    return timer


def test_nan_timer_runs_at_once_as_in_the_stdlib(any_loop):
    loop = any_loop
    ran = []

    async def main():
        loop.call_later(float("nan"), ran.append, "call_later")
        try:
            await asyncio.sleep(float("nan"))
        except ValueError:
            ran.append("sleep refused")
        else:
            ran.append("sleep")
        await until(lambda: "call_later" in ran, "the NaN timer")
    guard = _guard(loop)
    try:
        if sys.version_info >= (3, 14) and not isinstance(loop, uringloop.Loop):
            # 3.14's _run_once rounds the wait with math.ceil(): a NaN
            # timer next in line makes the selector loop itself raise
            with pytest.raises(ValueError, match="NaN"):
                loop.run_until_complete(main())
            return
        loop.run_until_complete(main())
    finally:
        guard.cancel()
    # asyncio.sleep() refuses a NaN delay from 3.14 on; uringloop's timer
    # runs at once on every version (the selector loop's did up to 3.13)
    slept = "sleep refused" if sys.version_info >= (3, 14) else "sleep"
    assert sorted(ran) == ["call_later", slept]


def test_inf_timer_does_not_fire_and_does_not_block_others(any_loop):
    loop = any_loop
    ran = []

    async def main():
        h = loop.call_later(float("inf"), ran.append, "inf")
        loop.call_later(-float("inf"), ran.append, "-inf")
        await until(lambda: "-inf" in ran, "the -inf timer")
        h.cancel()
    guard = _guard(loop)
    try:
        loop.run_until_complete(main())
    finally:
        guard.cancel()
    assert ran == ["-inf"]


# ---- 4. abort() with zero-copy sends in flight ------------------------------

@pytest.mark.parametrize("how", ["abort", "write_zerocopy_then_abort"])
def test_abort_with_zero_copy_sends_in_flight_releases_everything(uloop, how):
    """A peer that does not read: abort() closes the fd at once after the
    kernel let go, every write_zerocopy() future resolves and every buffer
    is released (a bytearray can be resized again)."""
    async def main():
        peer = socket.create_server(("127.0.0.1", 0))
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        tr, _ = await uloop.create_connection(asyncio.Protocol, *peer.getsockname())
        conn, _ = peer.accept()       # never reads
        sock = tr.get_extra_info("socket")
        sock.setsockopt(uringloop.SOL_URINGLOOP, uringloop.ZC_MODE, uringloop.ZC_ALWAYS)
        bufs = [bytearray(256 * 1024) for _ in range(40)]
        futs = [tr.write_zerocopy(b) for b in bufs]
        if how == "write_zerocopy_then_abort":
            tr.write(bytes(300 * 1024))
        # sends in flight, the peer's window shut
        await until(lambda: tr.get_extra_info("zerocopy")["notifications_pending"] > 0,
                    "sends the kernel holds")
        tr.abort()

        def settled():
            return (all(f.done() for f in futs) and sock.fileno() == -1
                    and uloop.stats()["ops_in_flight"] <= 1)
        deadline = uloop.time() + 5
        while uloop.time() < deadline and not settled():
            await asyncio.sleep(0.05)
        done = sum(f.done() for f in futs)
        for f in futs:
            if f.done() and not f.cancelled():
                f.exception()
        for b in bufs:
            b.append(0)                 # BufferError while still exported
        conn.close()
        peer.close()
        return done, sock.fileno(), uloop.stats()["ops_in_flight"]
    done, fileno, in_flight = uloop.run_until_complete(main())
    assert done == 40
    assert fileno == -1
    assert in_flight == 1               # the loop's own eventfd READ
