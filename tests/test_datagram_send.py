"""Datagram sends (issue #16): what sendto() queued in one loop iteration
goes to the kernel as one chain of linked requests in that iteration's
io_uring_enter, in order even when the socket buffer fills, and a chain in
flight survives abort and close.  The order and delivery scenarios run on
the selector loop too, which gives the same answer."""
import asyncio
import errno
import socket
import struct
import sys
import threading

import pytest

import uringloop
from conftest import until


def zc_always(tr):
    tr.get_extra_info("socket").setsockopt(
        uringloop.SOL_URINGLOOP, uringloop.ZC_MODE, uringloop.ZC_ALWAYS)


class Errors(asyncio.DatagramProtocol):
    def __init__(self):
        self.errors = []
        self.lost = asyncio.get_running_loop().create_future()

    def error_received(self, exc):
        self.errors.append(exc)

    def connection_lost(self, exc):
        self.lost.set_result(exc)


def reader_thread(sock, count, size_of):
    """Read `count` datagrams from a blocking socket, slowly at first (so
    the sender's buffer fills), and return them (via the list)."""
    got = []

    def body():
        sock.settimeout(30)
        for i in range(count):
            if i < 200 and i % 20 == 0:
                threading.Event().wait(0.005)
            got.append(sock.recv(size_of + 16))
    t = threading.Thread(target=body, daemon=True)
    t.start()
    return t, got


async def flood_unix(loop, path, count, mixed):
    """Send `count` numbered datagrams in bursts of 100 per callback into a
    Unix datagram socket whose reader lags: the queue on a Unix socket is
    short (sendto fails with EAGAIN when it is full), so the chain is cut
    by -EAGAIN again and again.  Returns what the reader saw and the
    largest write buffer the transport reported."""
    b = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    b.bind(path)
    tr, proto = await loop.create_datagram_endpoint(
        Errors, family=socket.AF_UNIX, remote_addr=path)
    size = 700
    thread, got = reader_thread(b, count, size)
    most = 0
    ours = isinstance(loop, uringloop.Loop)
    for start in range(0, count, 100):
        for i in range(start, min(start + 100, count)):
            data = struct.pack("!I", i) + bytes(size - 4)
            if mixed and ours and i % 3 == 0:
                # not bytes: it goes in the chain (a plain SEND from the
                # buffer, as AF_UNIX has no zero-copy), between sendto()s
                tr.sendto_zerocopy(bytearray(data))
            else:
                tr.sendto(data)
        most = max(most, tr.get_write_buffer_size())
        await asyncio.sleep(0)
    while tr.get_write_buffer_size():
        await asyncio.sleep(0.001)
    await asyncio.get_running_loop().run_in_executor(None, thread.join, 30)
    tr.close()
    await proto.lost
    b.close()
    resubmitted = tr.get_extra_info("send_chains")["links_sent_again"] if ours else 0
    return [struct.unpack("!I", d[:4])[0] for d in got], most, proto.errors, resubmitted


@pytest.mark.parametrize("mixed", [False, True], ids=["sendto", "with-buffers"])
def test_flood_into_full_unix_socket_keeps_order(any_loop, mixed, tmp_path):
    """Every datagram arrives, in the order it was sent, although the
    socket was full again and again (the write buffer shows the queue that
    built up).  With every third datagram from sendto_zerocopy() the queue
    goes as chains, which the full socket cuts with -EAGAIN: the refused
    links were sent again (more requests than datagrams).  The selector
    loop gives the same order."""
    count = 5000
    seen, most, errors, resubmitted = any_loop.run_until_complete(
        asyncio.wait_for(flood_unix(any_loop, str(tmp_path / "sink"), count, mixed), 60))
    assert errors == []
    assert seen == list(range(count))
    assert most > 0         # the socket was full: datagrams waited in the queue
    if mixed and isinstance(any_loop, uringloop.Loop):
        assert resubmitted > 0


async def burst_udp(loop, count, size, zerocopy):
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    rx.bind(("127.0.0.1", 0))
    tr, proto = await loop.create_datagram_endpoint(Errors, remote_addr=rx.getsockname())
    if zerocopy:
        zc_always(tr)
    await asyncio.sleep(0)
    before = loop.stats()["enter_calls"]
    for i in range(count):
        tr.sendto(struct.pack("!I", i) + bytes(size - 4))
    iterations = 0
    while tr.get_write_buffer_size():
        iterations += 1
        await asyncio.sleep(0)
    enters = loop.stats()["enter_calls"] - before
    stats = dict(tr.get_extra_info("zerocopy"), **tr.get_extra_info("send_chains"))
    tr.close()
    await proto.lost
    rx.setblocking(False)
    got = []
    while True:
        try:
            got.append(struct.unpack("!I", rx.recv(size)[:4])[0])
        except BlockingIOError:
            break
    rx.close()
    return got, enters, iterations, stats


def test_zero_copy_burst_is_one_enter(uloop):
    """200 zero-copy datagrams queued in one callback leave in one chain:
    the loop enters the kernel a handful of times for all of them, not once
    per datagram, and they arrive in order."""
    got, enters, iterations, stats = uloop.run_until_complete(
        burst_udp(uloop, 200, 1000, True))
    assert stats["zerocopy_sends"] == 200
    assert got == list(range(200))
    assert stats["chains"] == 1 and stats["links"] == 200
    assert enters <= 4, (enters, iterations)


def test_longer_burst_than_a_chain_keeps_order(uloop):
    """More datagrams than one chain holds go as several chains, one after
    the other, in order."""
    got, enters, _, stats = uloop.run_until_complete(burst_udp(uloop, 1500, 200, True))
    assert stats["zerocopy_sends"] == 1500
    assert got == list(range(1500))
    assert enters <= 20


def test_plain_burst_is_one_sendto_and_a_chain(uloop):
    """300 plain datagrams in one callback: the first is sent inside
    sendto() with one non-blocking sendto(2) (for a lone datagram nothing is
    cheaper), the other 299 leave in chains before the loop's next enter:
    two chains and a few enters for all of them, not a system call each,
    and they arrive in order."""
    got, enters, iterations, stats = uloop.run_until_complete(
        burst_udp(uloop, 300, 500, False))
    assert got == list(range(300))
    assert stats["zerocopy_sends"] == 0 and stats["ordinary_sends"] == 300
    assert stats["links"] == 299 and stats["chains"] == 2, stats
    assert enters <= 6, (enters, iterations)


def test_one_datagram_per_iteration_goes_direct(uloop):
    """A datagram a turn (a reply per request): each is sent by sendto(2)
    inside sendto(), no request on the ring."""
    async def main():
        rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        rx.bind(("127.0.0.1", 0))
        tr, proto = await uloop.create_datagram_endpoint(Errors, remote_addr=rx.getsockname())
        await asyncio.sleep(0)
        for i in range(50):
            tr.sendto(b"%d" % i)
            assert tr.get_write_buffer_size() == 0
            await asyncio.sleep(0)
        stats = tr.get_extra_info("send_chains")
        tr.close()
        await proto.lost
        rx.setblocking(False)
        got = [int(rx.recv(100)) for _ in range(50)]
        rx.close()
        return got, stats
    got, stats = uloop.run_until_complete(main())
    assert got == list(range(50))
    assert stats["links"] == 0 and stats["chains"] == 0, stats


@pytest.mark.parametrize("when", ["queued", "in-flight"])
def test_abort_with_chain_queued_or_in_flight(uloop, when):
    """abort() while zero-copy datagrams are queued (before the chain was
    written) or in the kernel's hands: connection_lost once, every
    sendto_zerocopy() future settles, the loop keeps working and closes
    with no request in flight (the fixture checks)."""
    async def main():
        loop = asyncio.get_running_loop()
        rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        rx.bind(("127.0.0.1", 0))
        tr, proto = await loop.create_datagram_endpoint(Errors, remote_addr=rx.getsockname())
        zc_always(tr)
        buf = loop.zerocopy_buffer(4000)
        futs = [tr.sendto_zerocopy(buf) for _ in range(50)]
        for _ in range(50):
            tr.sendto(bytes(3000))
        if when == "in-flight":
            loop.call_soon(tr.abort)     # runs after the chain was submitted
            await asyncio.sleep(0)
        else:
            tr.abort()
        assert await proto.lost is None
        results = await asyncio.gather(*futs, return_exceptions=True)
        for r in results:
            assert isinstance(r, (uringloop.ZeroCopyResult, ConnectionAbortedError)), r
        if when == "queued":
            assert all(isinstance(r, ConnectionAbortedError) for r in results)
        # the loop is healthy: a fresh transport still works
        tr2, p2 = await loop.create_datagram_endpoint(Errors, remote_addr=rx.getsockname())
        tr2.sendto(b"after")
        rx.setblocking(False)
        data = []

        def came():
            try:
                while True:
                    data.append(rx.recv(5000))
            except BlockingIOError:
                return b"after" in data
        await until(came, "the datagram sent after")
        assert data[-1] == b"after"
        tr2.close()
        await p2.lost
        rx.close()
    uloop.run_until_complete(asyncio.wait_for(main(), 30))


def test_close_sends_the_queue_first(any_loop):
    """close() with datagrams queued sends them all, then connection_lost."""
    async def main():
        loop = asyncio.get_running_loop()
        rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        rx.bind(("127.0.0.1", 0))
        tr, proto = await loop.create_datagram_endpoint(Errors, remote_addr=rx.getsockname())
        if isinstance(loop, uringloop.Loop):
            zc_always(tr)
        for i in range(300):
            tr.sendto(struct.pack("!I", i) + bytes(1000))
        tr.close()
        assert await proto.lost is None
        rx.setblocking(False)
        got = []
        while True:
            try:
                got.append(struct.unpack("!I", rx.recv(2000)[:4])[0])
            except BlockingIOError:
                break
        rx.close()
        return got
    got = any_loop.run_until_complete(asyncio.wait_for(main(), 30))
    assert got == list(range(300))


def test_zero_copy_results_hold_their_references(uloop):
    """ZeroCopyResult is built in C: its items are references of its own
    (a result that borrowed True or an int would free it under Python)."""
    async def main():
        loop = asyncio.get_running_loop()
        rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        rx.bind(("127.0.0.1", 0))
        tr, proto = await loop.create_datagram_endpoint(Errors, remote_addr=rx.getsockname())
        buf = memoryview(loop.zerocopy_buffer(123457))[:60001]
        before = sys.getrefcount(True), sys.getrefcount(False)
        results = [await tr.sendto_zerocopy(buf) for _ in range(300)]
        del results[:-1]
        after = sys.getrefcount(True), sys.getrefcount(False)
        assert results[0] == (60001, results[0].zerocopy)
        assert type(results[0]) is uringloop.ZeroCopyResult
        assert results[0].nbytes == 60001
        assert abs(after[0] - before[0]) <= 2 and abs(after[1] - before[1]) <= 2
        tr.close()
        await proto.lost
        rx.close()
    uloop.run_until_complete(asyncio.wait_for(main(), 30))


class ClosesOnError(Errors):
    def connection_made(self, transport):
        self.transport = transport

    def error_received(self, exc):
        super().error_received(exc)
        self.transport.close()


@pytest.mark.parametrize("connected", [False, True], ids=["sendto", "connected"])
@pytest.mark.parametrize("zerocopy", [False, True], ids=["plain", "zc-always"])
def test_failing_datagrams_closed_from_error_received(any_loop, connected, zerocopy):
    """Two oversized datagrams (EMSGSIZE) and error_received() closes the
    transport: connection_lost() comes, after as many error_received()
    calls as the selector loop makes: two from an unconnected transport,
    whose datagrams still go out while it closes, one from a connected one
    (CPython issue 156920's test), unless the second was queued.  In one chain the second link is
    cancelled by the first's failure and its zero-copy notification still
    follows, to an op that must still be alive."""
    if zerocopy and not isinstance(any_loop, uringloop.Loop):
        pytest.skip("zero-copy modes are uringloop's")

    async def main():
        loop = asyncio.get_running_loop()
        rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        rx.bind(("127.0.0.1", 0))
        addr = rx.getsockname()
        if connected:
            # (with remote_addr: a transport given a connected sock= has no
            # address of its own on the selector loop, and sends as if not)
            tr, proto = await loop.create_datagram_endpoint(ClosesOnError, remote_addr=addr)
        else:
            tr, proto = await loop.create_datagram_endpoint(
                ClosesOnError, local_addr=("127.0.0.1", 0))
        if zerocopy:
            zc_always(tr)
        tr.sendto(bytes(70000), None if connected else addr)
        tr.sendto(bytes(70000), None if connected else addr)
        assert await proto.lost is None
        rx.close()
        return [e.errno for e in proto.errors]
    errors = any_loop.run_until_complete(asyncio.wait_for(main(), 30))
    # a zero-copy datagram waits for the iteration's chain: both were
    # queued before the first failed, and a closing transport sends its
    # queue, as the selector loop sends its buffer
    assert errors == [errno.EMSGSIZE] * (1 if connected and not zerocopy else 2)


def test_cancelled_zero_copy_links_outlive_their_notifications(uloop):
    """A chain of zero-copy sends whose head fails: every later link is
    cancelled, each completing without IORING_CQE_F_MORE and then
    notified; the datagrams behind the failure are sent again, in order,
    and the loop closes with no request left in flight."""
    async def main():
        loop = asyncio.get_running_loop()
        rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        rx.bind(("127.0.0.1", 0))
        rx.setblocking(False)
        tr, proto = await loop.create_datagram_endpoint(Errors, remote_addr=rx.getsockname())
        zc_always(tr)
        for round_ in range(20):
            tr.sendto(bytes(70000))
            for i in range(10):
                tr.sendto(struct.pack("!II", round_, i) + bytes(20000))
            await asyncio.sleep(0.01)
        tr.close()
        assert await proto.lost is None
        got = []
        while True:
            try:
                got.append(struct.unpack("!II", rx.recv(30000)[:8]))
            except BlockingIOError:
                break
        rx.close()
        return got, len(proto.errors), tr.get_extra_info("send_chains")
    got, errors, chains = uloop.run_until_complete(asyncio.wait_for(main(), 30))
    assert errors == 20
    assert got == [(r, i) for r in range(20) for i in range(10)]
    assert chains["links_sent_again"] >= 20 * 10
