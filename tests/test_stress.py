"""Stress and fault injection, bounded in time and count.

Random transfers through every transport type and zero-copy mode, with
faults injected: peer resets mid-stream, close()/abort() while writes and
zero-copy notifications are pending, cancellation during every kind of
socket operation and of every receive and accept by wait_for, a TaskGroup
or gather while data flows (every byte, datagram and connection once),
loop.close() with requests in flight, EMFILE during
accept, more requests than the submission queue holds in one iteration and
a completion queue overflow (a tiny ring via URINGLOOP_RING_ENTRIES), many
loops in many threads, and a fuzzer over the argument surface.  Every byte
the API reported sent must arrive once, in order, unmodified; the loop must
keep serving; nothing may leak (the debug build checks that, see
test_debug_build.py).

    python3 -m pytest -q tests/test_stress.py                       # quick (CI)
    URINGLOOP_STRESS=long python3 -m pytest -q -s tests/test_stress.py
The totals (transfers, bytes checked, faults injected) are printed with -s
and written to $URINGLOOP_STRESS_REPORT as JSON when that is set.
"""
import asyncio
import collections
import json
import os
import random
import socket
import subprocess
import sys
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import uringloop
from protocols import Echo, EchoBuffered, EchoDatagram, Sink

PROFILE = os.environ.get("URINGLOOP_STRESS", "quick")
EXAMPLES = {"quick": 30, "long": 600}[PROFILE]
TALLY = collections.Counter()
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=PROFILE == "quick",
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module", autouse=True)
def report():
    yield
    print(f"\nstress ({PROFILE}): {TALLY['transfers']} transfers, "
          f"{TALLY['bytes']} bytes checked, {TALLY['faults']} faults injected")
    if os.environ.get("URINGLOOP_STRESS_REPORT"):
        with open(os.environ["URINGLOOP_STRESS_REPORT"], "w") as f:
            json.dump(dict(TALLY, profile=PROFILE), f)


def run(coro, timeout=60):
    return uringloop.run(asyncio.wait_for(coro, timeout))


def set_mode(transport, zc):
    mode = uringloop.ZC_NEVER if zc == "never" else uringloop.ZC_ALWAYS
    transport.get_extra_info("socket").setsockopt(uringloop.SOL_URINGLOOP, uringloop.ZC_MODE, mode)


async def start_echo(kind, zc, path):
    """An echo server of the given kind; returns (address, close): call
    close() and, if it returns an awaitable, await it."""
    loop = asyncio.get_running_loop()
    if kind in ("protocol", "buffered", "unix"):
        factory = EchoBuffered if kind == "buffered" else Echo
        if kind == "unix":
            listener = socket.socket(socket.AF_UNIX)
            listener.bind(path)
        else:
            listener = socket.socket()
            listener.bind(("127.0.0.1", 0))
        uringloop.set_zerocopy(listener, mode=uringloop.ZC_NEVER if zc == "never" else uringloop.ZC_ALWAYS)
        server = await loop.create_server(factory, sock=listener)
        return listener.getsockname(), server.close
    if kind == "streams":
        handlers = []

        async def handle(reader, writer):
            handlers.append(asyncio.current_task())
            while data := await reader.read(1 << 16):
                writer.write(data)
                await writer.drain()
            writer.close()
        server = await asyncio.start_server(handle, "127.0.0.1", 0)

        async def close():
            server.close()
            await asyncio.gather(*handlers)      # they end at the client's EOF
        return server.sockets[0].getsockname(), close
    if kind == "sock":
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.setblocking(False)

        async def serve():
            conn, _ = await loop.sock_accept(listener)
            with conn:
                while data := await loop.sock_recv(conn, 1 << 16):
                    await loop.sock_sendall(conn, data)
        task = loop.create_task(serve())

        def close():
            task.cancel()
            listener.close()
        return listener.getsockname(), close
    assert kind == "udp"
    tr, _ = await loop.create_datagram_endpoint(EchoDatagram, local_addr=("127.0.0.1", 0))
    set_mode(tr, zc)
    return tr.get_extra_info("sockname"), tr.close


async def closing(close):
    waiting = close()
    if waiting is not None:
        await waiting
    await asyncio.sleep(0)


@FUZZ
@given(kind=st.sampled_from(["protocol", "buffered", "streams", "sock", "unix", "udp"]),
       zc=st.sampled_from(["never", "always", "registered"]),
       sizes=st.lists(st.integers(1, 200_000), min_size=1, max_size=12),
       seed=st.integers(0, 2**32 - 1))
def test_random_transfers_through_every_transport_and_zero_copy_mode(tmp_path_factory, kind, zc,
                                                                    sizes, seed):
    rng = random.Random(seed)
    path = str(tmp_path_factory.mktemp("u") / "s")
    if kind == "udp":
        sizes = [min(s, 65000) for s in sizes]
    messages = [rng.randbytes(n) for n in sizes]

    async def main():
        loop = asyncio.get_running_loop()
        address, close_server = await start_echo(kind, zc, path)
        expect = sum(sizes)
        if kind == "udp":
            got = []
            arrived = asyncio.Queue()

            class Client(asyncio.DatagramProtocol):
                def datagram_received(self, data, addr):
                    arrived.put_nowait(data)
            tr, _ = await loop.create_datagram_endpoint(Client, remote_addr=address)
            set_mode(tr, zc)
            for m in messages:         # one at a time: loopback drops a flood
                if zc == "registered":
                    buf = loop.zerocopy_buffer(len(m))
                    memoryview(buf)[:] = m
                    await tr.sendto_zerocopy(buf)
                else:
                    tr.sendto(m)
                got.append(await arrived.get())
            assert got == messages
        else:
            if kind == "unix":
                tr, client = await loop.create_unix_connection(lambda: Sink(until=expect), path)
            else:
                tr, client = await loop.create_connection(lambda: Sink(until=expect), *address)
            set_mode(tr, zc)
            futures = []
            for m in messages:
                if zc == "registered":
                    buf = loop.zerocopy_buffer(len(m))
                    memoryview(buf)[:] = m
                    cut = rng.randrange(len(m) + 1)   # two slices of it, in order
                    futures.append(tr.write_zerocopy(memoryview(buf)[:cut]))
                    futures.append(tr.write_zerocopy(memoryview(buf)[cut:]))
                else:
                    tr.write(m)
            await asyncio.gather(*futures)
            await client.enough
            assert bytes(client.data) == b"".join(messages)
        tr.close()
        await closing(close_server)
    run(main())
    TALLY["transfers"] += len(messages)
    TALLY["bytes"] += sum(sizes)


class Blaster(asyncio.Protocol):
    """Writes a numbered stream (with write_zerocopy when zc) until the
    peer goes away; every future must resolve either way."""

    def __init__(self, zc):
        self.zc = zc
        self.futures = []
        self.done = asyncio.get_running_loop().create_future()

    def connection_made(self, transport):
        self.transport = transport
        set_mode(transport, "always" if self.zc else "never")
        asyncio.get_running_loop().call_soon(self.pump)

    def pump(self):
        if self.transport.is_closing():
            return
        chunk = bytearray(os.urandom(65536))
        if self.zc:
            self.futures.append(self.transport.write_zerocopy(chunk))
        else:
            self.transport.write(chunk)
        asyncio.get_running_loop().call_later(0.0005, self.pump)

    def connection_lost(self, exc):
        self.done.set_result(exc)


@FUZZ
@given(zc=st.booleans(), after=st.integers(1, 2_000_000))
def test_peer_reset_mid_stream_leaves_the_loop_serving(zc, after):
    async def main():
        loop = asyncio.get_running_loop()
        blaster = None

        def factory():
            nonlocal blaster
            blaster = Blaster(zc)
            return blaster
        server = await loop.create_server(factory, "127.0.0.1", 0)
        addr = server.sockets[0].getsockname()
        peer = socket.create_connection(addr)
        peer.setblocking(False)
        got = 0
        while got < after:
            data = await loop.sock_recv(peer, 1 << 16)
            assert data
            got += len(data)
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
        peer.close()                                    # RST
        exc = await asyncio.wait_for(blaster.done, 10)
        assert exc is None or isinstance(exc, OSError)
        results = await asyncio.wait_for(
            asyncio.gather(*blaster.futures, return_exceptions=True), 10)
        assert all(isinstance(r, (uringloop.ZeroCopyResult, OSError)) for r in results)
        # and the loop still serves (a second Blaster: its futures too
        # must resolve, with an error once this client has gone)
        tr, client = await loop.create_connection(lambda: Sink(until=5), *addr)
        await asyncio.wait_for(client.enough, 10)
        tr.close()
        await asyncio.wait_for(blaster.done, 10)
        await asyncio.wait_for(asyncio.gather(*blaster.futures, return_exceptions=True), 10)
        server.close()
        await server.wait_closed()
    run(main())
    TALLY["faults"] += 1
    TALLY["bytes"] += after


@FUZZ
@given(how=st.sampled_from(["close", "abort"]), sizes=st.lists(st.integers(1, 300_000), min_size=1,
                                                            max_size=10))
def test_close_and_abort_with_writes_and_notifications_pending(how, sizes):
    async def main():
        loop = asyncio.get_running_loop()
        sink = None

        def factory():
            nonlocal sink
            sink = Sink()
            return sink
        server = await loop.create_server(factory, "127.0.0.1", 0)
        tr, _ = await loop.create_connection(asyncio.Protocol, *server.sockets[0].getsockname())
        set_mode(tr, "always")
        buffers = [bytearray(os.urandom(n)) for n in sizes]
        futures = []
        for i, buf in enumerate(buffers):
            if i % 2:
                tr.write(bytes(buf))
            else:
                futures.append(tr.write_zerocopy(buf))
        getattr(tr, how)()
        results = await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), 10)
        for buf in buffers:
            buf.append(0)          # every export was released: resizable again
            buf.pop()
        await asyncio.wait_for(sink.done, 10)
        sent = b"".join(bytes(b) for b in buffers)
        if how == "close":
            assert all(isinstance(r, uringloop.ZeroCopyResult) for r in results)
            assert bytes(sink.data) == sent
        else:
            assert sent.startswith(bytes(sink.data))      # a prefix, in order
        server.close()
    run(main())
    TALLY["faults"] += 1
    TALLY["bytes"] += sum(sizes)


OPERATIONS = ["sock_recv", "sock_recv_into", "sock_recvfrom", "sock_recvfrom_into",
              "sock_accept", "sock_sendall", "sock_connect"]


@FUZZ
@given(op=st.sampled_from(OPERATIONS), spins=st.integers(0, 3), size=st.integers(1, 100_000))
def test_cancellation_during_every_socket_operation(op, spins, size):
    """Cancel after `spins` loop iterations; then the socket still works and
    no byte is lost or duplicated."""
    async def main():
        loop = asyncio.get_running_loop()
        payload = os.urandom(size)
        if op in ("sock_recvfrom", "sock_recvfrom_into"):
            a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            a.bind(("127.0.0.1", 0))
            b.bind(("127.0.0.1", 0))
            payload = payload[:60000]
        elif op in ("sock_accept", "sock_connect"):
            a = socket.socket()
            a.bind(("127.0.0.1", 0))
            a.listen()
            b = socket.socket()
        else:
            a, b = socket.socketpair()
        for s in (a, b):
            s.setblocking(False)
        buf = bytearray(200_000)
        coro = {
            "sock_recv": lambda: loop.sock_recv(a, 200_000),
            "sock_recv_into": lambda: loop.sock_recv_into(a, buf),
            "sock_recvfrom": lambda: loop.sock_recvfrom(a, 65536),
            "sock_recvfrom_into": lambda: loop.sock_recvfrom_into(a, buf),
            "sock_accept": lambda: loop.sock_accept(a),
            "sock_sendall": lambda: loop.sock_sendall(a, payload * 50),
            "sock_connect": lambda: loop.sock_connect(b, a.getsockname()),
        }[op]()
        task = loop.create_task(coro)
        for _ in range(spins):
            await asyncio.sleep(0)
        if op in ("sock_recv", "sock_recv_into"):
            b.send(payload[:10])          # may land in the cancelled receive
        task.cancel()
        try:
            first = await task
        except asyncio.CancelledError:
            first = None
        if op in ("sock_recv", "sock_recv_into"):
            # what the cancelled receive returned, if it completed, plus
            # what later receives get is the stream, exactly once
            got = b""
            if first is not None:
                got = first if op == "sock_recv" else bytes(buf[:first])
            b.sendall(payload[10:])
            while len(got) < len(payload):
                got += await loop.sock_recv(a, 200_000)
            assert got == payload
        elif op in ("sock_recvfrom", "sock_recvfrom_into"):
            b.sendto(payload, a.getsockname())
            data, _ = await loop.sock_recvfrom(a, 65536)
            assert data == payload
        elif op == "sock_accept":
            if first is not None:
                first[0].close()
            b.setblocking(True)
            b.connect(a.getsockname())
            conn, _ = await loop.sock_accept(a)
            conn.close()
        elif op == "sock_connect":
            if not _connected(b):          # cancelled before the handshake
                b.close()
                b = socket.socket()
                b.setblocking(False)
                await loop.sock_connect(b, a.getsockname())
            await loop.sock_sendall(b, b"ok")
            for _ in range(3):             # the cancelled attempt may be queued first
                conn, _ = await loop.sock_accept(a)
                with conn:
                    if await loop.sock_recv(conn, 2) == b"ok":
                        break
            else:
                raise AssertionError("the connection was lost")
        else:   # sock_sendall: the peer gets a prefix of the stream, then more
            async def read_all():
                got = bytearray()
                while chunk := await loop.sock_recv(b, 1 << 20):
                    got += chunk
                return got
            reading = loop.create_task(read_all())    # the socket buffer may be full
            await loop.sock_sendall(a, b"END")
            a.shutdown(socket.SHUT_WR)
            got = await reading
            assert got.endswith(b"END") and (payload * 50).startswith(bytes(got[:-3]))
        a.close()
        b.close()
    run(main(), timeout=15)
    TALLY["faults"] += 1


RECEIVES = ["sock_recv", "sock_recv_into", "sock_recvfrom", "sock_recvfrom_into",
            "sock_accept"]


class _Boom(Exception):
    pass


async def _cancelling(how, make, delay):
    """Run make() the way a framework would and cancel it after `delay`:
    asyncio.wait_for, a TaskGroup whose sibling fails, or a gather whose
    outer task is cancelled.  Returns (True, result) or (False, None)."""
    loop = asyncio.get_running_loop()
    if how == "wait_for":
        try:
            return True, await asyncio.wait_for(make(), delay)
        except asyncio.TimeoutError:
            return False, None
    if how == "taskgroup":
        async def fail():
            await asyncio.sleep(delay)
            raise _Boom
        task = None
        try:
            async with asyncio.TaskGroup() as tg:
                task = tg.create_task(make())
                tg.create_task(fail())
        except* _Boom:
            pass
        if task.done() and not task.cancelled():
            return True, task.result()
        return False, None
    child = loop.create_task(make())                        # "gather"

    async def gathered():
        return await asyncio.gather(child)
    outer = loop.create_task(gathered())
    timer = loop.call_later(delay, outer.cancel)
    try:
        return True, (await outer)[0]
    except asyncio.CancelledError:
        if asyncio.current_task().cancelling():
            raise
        # gather's outer future is cancelled even when its child had
        # finished: the result is the child's (the loop delivered it)
        if child.done() and not child.cancelled():
            return True, child.result()
        return False, None
    finally:
        timer.cancel()


@FUZZ
@given(op=st.sampled_from(RECEIVES), how=st.sampled_from(["wait_for", "taskgroup", "gather"]),
       delay_us=st.integers(50, 2000), seed=st.integers(0, 2**32 - 1))
def test_cancelled_receives_lose_nothing_while_data_flows(op, how, delay_us, seed):
    """Issue #13: every receive and accept, cancelled by wait_for, a
    TaskGroup or gather with short timeouts while data (or connections)
    arrive: every byte, datagram and connection arrives exactly once."""
    rnd = random.Random(seed)
    count = 40

    async def main():
        loop = asyncio.get_running_loop()
        delay = delay_us / 1e6
        if op == "sock_accept":
            srv = socket.create_server(("127.0.0.1", 0), backlog=count)
            srv.setblocking(False)
            clients = []

            async def produce():
                for i in range(count):
                    c = socket.socket()
                    c.setblocking(False)
                    await loop.sock_connect(c, srv.getsockname())
                    clients.append(c)
                    await asyncio.sleep(rnd.random() * 0.001)
            producer = loop.create_task(produce())
            accepted = []
            deadline = loop.time() + 20
            while len(accepted) < count and loop.time() < deadline:
                ok, res = await _cancelling(how, lambda: loop.sock_accept(srv), delay)
                if ok:
                    accepted.append(res)
            await producer
            peers = sorted(c.getpeername()[1] for c, _ in accepted)
            mine = sorted(c.getsockname()[1] for c in clients)
            for c, _ in accepted:
                c.close()
            for c in clients:
                c.close()
            srv.close()
            assert peers == mine, (len(peers), len(mine))
            TALLY["transfers"] += count
            return
        datagrams = op in ("sock_recvfrom", "sock_recvfrom_into")
        if datagrams:
            a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            a.bind(("127.0.0.1", 0))
            b.connect(a.getsockname())
        else:
            a, b = socket.socketpair()
        a.setblocking(False)
        b.setblocking(False)
        records = [b"<%d:%s>" % (i, b"x" * rnd.randrange(1, 3000)) for i in range(count)]

        async def produce():
            for rec in records:
                await loop.sock_sendall(b, rec)
                await asyncio.sleep(rnd.random() * 0.001)
        producer = loop.create_task(produce())
        buf = bytearray(65536)
        make = {
            "sock_recv": lambda: loop.sock_recv(a, 4096),
            "sock_recv_into": lambda: loop.sock_recv_into(a, buf),
            "sock_recvfrom": lambda: loop.sock_recvfrom(a, 65536),
            "sock_recvfrom_into": lambda: loop.sock_recvfrom_into(a, buf),
        }[op]
        got = []
        total = sum(map(len, records))
        deadline = loop.time() + 20
        while sum(map(len, got)) < total and loop.time() < deadline:
            ok, res = await _cancelling(how, make, delay)
            if not ok:
                continue
            if op == "sock_recv":
                got.append(res)
            elif op == "sock_recv_into":
                got.append(bytes(buf[:res]))
            elif op == "sock_recvfrom":
                got.append(res[0])
            else:
                got.append(bytes(buf[:res[0]]))
        await producer
        a.close()
        b.close()
        if datagrams:
            assert got == records, ([g[:12] for g in got], len(records))
        else:
            assert b"".join(got) == b"".join(records)
        TALLY["bytes"] += total

    run(main(), timeout=60)
    TALLY["faults"] += 1


def _connected(sock):
    try:
        sock.getpeername()
        return True
    except OSError:
        return False


# its cancelled tasks never run again: "Task was destroyed but it is pending!"
@pytest.mark.loop_errors_expected
def test_loop_close_with_operations_in_flight():
    loop = uringloop.new_event_loop()
    pairs = [socket.socketpair() for _ in range(100)]
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    for a, b in pairs:
        a.setblocking(False)

    async def start():
        for a, _ in pairs:
            loop.create_task(loop.sock_recv(a, 100))
        for _ in range(20):
            loop.create_task(loop.sock_accept(listener))
        tr, _ = await loop.create_connection(asyncio.Protocol, *pairs_server.sockets[0].getsockname())
        set_mode(tr, "always")
        tr.write_zerocopy(bytearray(1 << 20))
        await asyncio.sleep(0)

    pairs_server = loop.run_until_complete(loop.create_server(asyncio.Protocol, "127.0.0.1", 0))
    loop.run_until_complete(start())
    assert loop.stats()["ops_in_flight"] > 100
    for task in asyncio.all_tasks(loop):
        task.cancel()
    loop.close()                    # must neither hang nor free what the kernel holds
    assert loop.stats()["ops_in_flight"] == 0
    for a, b in pairs:
        a.close()
        b.close()
    listener.close()
    TALLY["faults"] += 1


EMFILE_CHILD = r"""
import asyncio, os, resource, socket, uringloop
async def main():
    loop = asyncio.get_running_loop()
    errors = []
    loop.set_exception_handler(lambda loop, ctx: errors.append(ctx['message']))
    served = []
    class Echo(asyncio.Protocol):
        def connection_made(self, tr): self.tr = tr; served.append(tr)
        def data_received(self, d): self.tr.write(d)
    server = await loop.create_server(Echo, '127.0.0.1', 0, backlog=100)
    addr = server.sockets[0].getsockname()
    used = len(os.listdir('/proc/self/fd'))
    resource.setrlimit(resource.RLIMIT_NOFILE, (used + 30, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    clients = []
    for _ in range(40):                 # more than the limit allows
        try:
            clients.append(socket.create_connection(addr))
        except OSError:
            break
    await asyncio.sleep(0.5)
    assert any('out of system resource' in e for e in errors), errors
    for c in clients:
        c.close()
    for tr in served:
        tr.close()
    await asyncio.sleep(1.5)            # the accept backs off, then re-arms
    r, w = await asyncio.open_connection(*addr)
    w.write(b'alive')
    assert await r.readexactly(5) == b'alive'
    w.close()
    server.close()
    print('OK', len(clients), len(errors))
uringloop.run(main())
"""


def test_emfile_during_accept_keeps_the_server_alive():
    out = subprocess.run([sys.executable, "-c", EMFILE_CHILD], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith("OK")
    TALLY["faults"] += 1


def test_more_requests_than_the_ring_holds_in_one_iteration(monkeypatch):
    """An 8-entry submission queue and a 16-entry completion queue: 300
    receives queued in one iteration, then 300 completions at once (the
    kernel keeps the overflow, IORING_FEAT_NODROP, and the loop flushes it)."""
    monkeypatch.setenv("URINGLOOP_RING_ENTRIES", "8,16")
    count = 300

    async def main():
        loop = asyncio.get_running_loop()
        assert loop.stats()["sq_entries"] == 8 and loop.stats()["cq_entries"] == 16
        pairs = [socket.socketpair() for _ in range(count)]
        for a, _ in pairs:
            a.setblocking(False)
        receives = [loop.create_task(loop.sock_recv(a, 100)) for a, _ in pairs]
        await asyncio.sleep(0)              # all 300 submitted in this iteration
        for i, (_, b) in enumerate(pairs):
            b.send(b"%d" % i)
        got = await asyncio.gather(*receives)
        assert got == [b"%d" % i for i in range(count)]
        for a, b in pairs:
            a.close()
            b.close()
    run(main())
    TALLY["transfers"] += count
    TALLY["faults"] += 2


def test_many_loops_in_many_threads():
    results = []

    def worker(k):
        async def main():
            loop = asyncio.get_running_loop()
            address, close = await start_echo("protocol", "never", None)
            tr, client = await loop.create_connection(lambda: Sink(until=100_000), *address)
            payload = os.urandom(100_000)
            tr.write(payload)
            await client.enough
            tr.close()
            await closing(close)
            return bytes(client.data) == payload
        results.append(run(main()))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == [True] * 8
    TALLY["transfers"] += 8
    TALLY["bytes"] += 800_000


ANY = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(),
                st.text(max_size=5), st.binary(max_size=5), st.lists(st.integers(), max_size=3),
                st.tuples(st.text(max_size=3), st.integers(-5, 70000)))
CLEAR = (TypeError, ValueError, OSError, RuntimeError, BufferError, OverflowError)


@FUZZ
@given(calls=st.lists(st.tuples(
    st.sampled_from(["setsockopt", "getsockopt", "set_zerocopy", "write", "write_zerocopy",
                     "sendto", "sendto_zerocopy", "zerocopy_buffer", "writelines"]),
    ANY, ANY, ANY), min_size=1, max_size=8))
def test_bad_arguments_raise_clear_errors_and_leave_the_loop_healthy(calls):
    async def main():
        loop = asyncio.get_running_loop()
        # a bad datagram address is a fatal transport error for the loop's
        # exception handler, as on the selector loop; keep only the message
        reported = []
        loop.set_exception_handler(lambda loop, context: reported.append(context["message"]))
        address, close = await start_echo("protocol", "never", None)
        tr, client = await loop.create_connection(Sink, *address)
        udp, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol,
                                                     local_addr=("127.0.0.1", 0))
        sock = tr.get_extra_info("socket")
        spare = socket.socket()
        for name, a, b, c in calls:
            try:
                if name == "setsockopt":
                    sock.setsockopt(uringloop.SOL_URINGLOOP if isinstance(c, bool) else a, b, c)
                elif name == "getsockopt":
                    sock.getsockopt(uringloop.SOL_URINGLOOP, a)
                elif name == "set_zerocopy":
                    uringloop.set_zerocopy(spare, mode=b, threshold=c)
                elif name == "write":
                    tr.write(a)
                elif name == "writelines":
                    tr.writelines([a, b])
                elif name == "write_zerocopy":
                    fut = tr.write_zerocopy(a)
                    await asyncio.wait_for(fut, 10)
                elif name == "sendto":
                    udp.sendto(a, b)
                elif name == "sendto_zerocopy":
                    await asyncio.wait_for(udp.sendto_zerocopy(a, b), 10)
                elif name == "zerocopy_buffer":
                    loop.zerocopy_buffer(a)
            except CLEAR:
                pass
            TALLY["faults"] += 1
        # what reached the handler is only that: a datagram the transport
        # could not send (an address of the wrong shape, as sendto(2) says)
        assert set(reported) <= {"Fatal write error on datagram transport"}, reported
        # still healthy: an echo through a fresh connection
        tr2, probe = await loop.create_connection(lambda: Sink(until=3), *address)
        tr2.write(b"abc")
        await asyncio.wait_for(probe.enough, 10)
        for t in (tr, tr2, udp):
            t.abort()
        spare.close()
        await closing(close)
    run(main())
