"""Registered buffers: loop.zerocopy_buffer(), the pool's bookkeeping, sends
with IORING_RECVSEND_FIXED_BUF over TCP and UDP, and the fall-back when the
kernel refuses the registration (RLIMIT_MEMLOCK)."""
import asyncio
import ctypes
import os
import subprocess
import sys

import pytest

import uringloop
from conftest import requires, run_with_tiny_memlock
from protocols import Sink, collecting

pytestmark = requires("SEND_ZC")


def run(coro, timeout=60):
    return uringloop.run(asyncio.wait_for(coro, timeout))


def address(buf):
    return ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf))


async def zero_copy_connection_to_a_sink(loop):
    """A TCP connection in ZC_ALWAYS mode to a server that collects what
    arrives: (transport, server, the bytes received, a future resolved at
    the server side's connection_lost)."""
    sinks = []
    server = await loop.create_server(collecting(Sink, sinks), "127.0.0.1", 0)
    tr, _ = await loop.create_connection(asyncio.Protocol, *server.sockets[0].getsockname())
    tr.get_extra_info("socket").setsockopt(
        uringloop.SOL_URINGLOOP, uringloop.ZC_MODE, uringloop.ZC_ALWAYS)
    while not sinks:
        await asyncio.sleep(0)
    return tr, server, sinks[0].data, sinks[0].done


def test_pool_reuses_and_merges_returned_pages(uloop):
    a = uloop.zerocopy_buffer(4096)
    b = uloop.zerocopy_buffer(100)          # rounded up to one page
    c = uloop.zerocopy_buffer(4096)
    assert a.registered and b.registered and c.registered
    assert len(b) == 100
    assert address(b) == address(a) + 4096 and address(c) == address(a) + 8192
    stats = uloop.stats()["buffer_pool"]
    assert stats["buffers"] == 3 and stats["regions"] == 1
    assert stats["registered_bytes"] >= 3 * 4096 and stats["unregistered_reason"] is None
    start = address(a)
    a.release()
    b.release()
    merged = uloop.zerocopy_buffer(8192)    # fits where a and b were, joined
    assert address(merged) == start
    big = uloop.zerocopy_buffer(9 << 20)    # more than a region: a region of its own
    assert big.registered and uloop.stats()["buffer_pool"]["regions"] == 2
    for buf in (merged, big, c):
        buf.release()
    assert uloop.stats()["buffer_pool"]["buffers"] == 0


def test_bad_input_and_views(uloop):
    for size in (0, -1, (1 << 30) + 1):
        with pytest.raises(ValueError):
            uloop.zerocopy_buffer(size)
    with pytest.raises(TypeError):
        uloop.zerocopy_buffer("4096")
    with pytest.raises(TypeError):
        uringloop.RegisteredBuffer()
    with uloop.zerocopy_buffer(10) as buf:
        view = memoryview(buf)
        view[:] = b"0123456789"
        assert bytes(buf) == b"0123456789"
        with pytest.raises(BufferError):
            buf.release()               # a view still exists
        view.release()
    assert "released" in repr(buf)
    with pytest.raises(ValueError):
        memoryview(buf)                 # its pages went back to the pool
    buf.release()                       # a second release is harmless
    uloop.close()
    with pytest.raises(RuntimeError):
        uloop.zerocopy_buffer(10)


def test_buffer_outlives_its_loop_as_plain_memory():
    loop = uringloop.new_event_loop()
    buf = loop.zerocopy_buffer(5000)
    memoryview(buf)[:5] = b"hello"
    loop.close()
    assert not buf.registered           # the ring and its table are gone
    assert bytes(buf)[:5] == b"hello"   # the memory is not

    async def main():                   # and another loop can still send it
        loop = asyncio.get_running_loop()
        tr, server, got, done = await zero_copy_connection_to_a_sink(loop)
        result = await tr.write_zerocopy(buf)
        assert result.nbytes == 5000
        tr.close()
        await done
        server.close()
        assert bytes(got) == bytes(buf)
    run(main())


def test_tcp_sends_from_registered_memory_and_slices_are_byte_exact():
    async def main():
        loop = asyncio.get_running_loop()
        tr, server, got, done = await zero_copy_connection_to_a_sink(loop)
        buf = loop.zerocopy_buffer(256 * 1024)
        payload = os.urandom(len(buf))
        memoryview(buf)[:] = payload
        tr.write(b"head")
        futures = [tr.write_zerocopy(buf), tr.write_zerocopy(memoryview(buf)[1000:70000])]
        tr.write(b"tail")
        with pytest.raises(BufferError):
            buf.release()               # the kernel may still read it
        results = await asyncio.gather(*futures)
        assert [r.nbytes for r in results] == [len(buf), 69000]
        stats = tr.get_extra_info("zerocopy")
        assert stats["registered_buffer_sends"] >= 2
        # (b"tail" went with SEND_ZC too, and nothing waits for its
        # notification: it comes within a few iterations)
        for _ in range(100):
            if tr.get_extra_info("zerocopy")["notifications_pending"] == 0:
                break
            await asyncio.sleep(0.001)
        assert tr.get_extra_info("zerocopy")["notifications_pending"] == 0
        tr.close()
        await done
        server.close()
        assert bytes(got) == b"head" + payload + payload[1000:70000] + b"tail"
        buf.release()
    run(main())


def test_udp_sendto_zerocopy_to_addresses_and_errors():
    async def main():
        loop = asyncio.get_running_loop()
        received = []
        errors = []
        arrived = asyncio.Event()

        class Receiver(asyncio.DatagramProtocol):
            def datagram_received(self, data, addr):
                received.append(data)
                if len(received) == 3:
                    arrived.set()

        class Sender(asyncio.DatagramProtocol):
            def error_received(self, exc):
                errors.append(exc)

        rx, _ = await loop.create_datagram_endpoint(Receiver, local_addr=("127.0.0.1", 0))
        tx, _ = await loop.create_datagram_endpoint(Sender, local_addr=("127.0.0.1", 0))
        tx.get_extra_info("socket").setsockopt(
            uringloop.SOL_URINGLOOP, uringloop.ZC_MODE, uringloop.ZC_ALWAYS)
        where = rx.get_extra_info("sockname")
        buf = loop.zerocopy_buffer(3000)
        memoryview(buf)[:] = bytes(range(250)) * 12
        tx.sendto(b"plain", where)
        first = tx.sendto_zerocopy(buf, where)
        second = tx.sendto_zerocopy(memoryview(buf)[:10], where)
        assert (await first).nbytes == 3000 and (await second).nbytes == 10
        await asyncio.wait_for(arrived.wait(), 10)
        assert received == [b"plain", bytes(buf), bytes(buf)[:10]]
        assert tx.get_extra_info("zerocopy")["registered_buffer_sends"] == 2

        bad = tx.sendto_zerocopy(buf, ("no-such-host.invalid", 9))
        with pytest.raises(OSError):
            await bad
        assert errors and isinstance(errors[0], OSError)
        with pytest.raises(ValueError):
            tx.sendto_zerocopy(memoryview(bytes(100))[::2], where)
        tx.close()
        rx.close()
        await asyncio.sleep(0)
        closed = tx.sendto_zerocopy(buf, where)
        with pytest.raises(ConnectionError):
            await closed
    run(main())


SINK_CHILD = """
import asyncio, sys, uringloop
size, count = int(sys.argv[1]), int(sys.argv[2])
async def main():
    loop = asyncio.get_running_loop()
    tr, _ = await loop.create_datagram_endpoint(
        asyncio.DatagramProtocol, remote_addr=('198.18.0.2', 9999))
    bufs = [loop.zerocopy_buffer(size) for _ in range(8)]
    results = []
    for i in range(count):
        results.append(await tr.sendto_zerocopy(bufs[i % 8]))
    s = tr.get_extra_info('zerocopy')
    print(s['registered_buffer_sends'], s['zerocopy_reports'], s['copied_reports'],
          all(r.zerocopy for r in results), bufs[0].registered)
    tr.close()
uringloop.run(main(), strict=True)
"""


@requires("ring")
def test_udp_from_registered_buffers_into_a_dropping_sink_is_zero_copy(udp_sink_namespaces):
    out = subprocess.run(["ip", "netns", "exec", udp_sink_namespaces, sys.executable,
                          "-c", SINK_CHILD, "60000", "200"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["200", "200", "0", "True", "True"]


@requires("ring")
def test_memlock_too_small_for_registration_falls_back_with_data_intact():
    """Registration pins the pages against RLIMIT_MEMLOCK too."""
    out = run_with_tiny_memlock("""
async def main():
    loop, tr, got, done = await sink_connection()
    buf = loop.zerocopy_buffer(3 << 20)
    payload = os.urandom(len(buf))
    memoryview(buf)[:] = payload
    r = await tr.write_zerocopy(buf)
    tr.close(); await done
    assert got == payload, "data differs"
    print("OK", buf.registered, r.nbytes, loop.stats()['buffer_pool']['unregistered_reason'])
""")
    assert out.startswith("OK False 3145728 registering 4194304 bytes: "), out
    assert "RLIMIT_MEMLOCK" in out


def _rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_pool_memory_follows_what_is_alive_for_growing_sizes(uloop):
    """Issue #13 item 6: 300 buffers of 4 MiB + k pages, each released
    before the next (at most ~5 MiB alive) used to leave 300 regions and a
    full table.  Now the pool holds what is alive plus a bounded idle
    reserve, and every buffer stays registered."""
    rss = _rss_bytes()
    peak_mapped = 0
    for k in range(300):
        buf = uloop.zerocopy_buffer(4 * 1024 * 1024 + k * 4096)
        assert buf.registered, uloop.stats()["buffer_pool"]
        memoryview(buf)[::4096] = b"x" * len(range(0, len(buf), 4096))   # touch
        peak_mapped = max(peak_mapped, uloop.stats()["buffer_pool"]["mapped_bytes"])
        buf.release()
    stats = uloop.stats()["buffer_pool"]
    assert not stats["table_full"]
    assert stats["regions"] <= 3, stats
    assert peak_mapped <= 24 * 1024 * 1024, peak_mapped
    assert _rss_bytes() - rss < 64 * 1024 * 1024


def test_pool_memory_stays_bounded_for_random_sizes(uloop):
    import random
    rnd = random.Random(13)
    alive = []
    peak_alive = peak_mapped = 0
    for i in range(400):
        alive.append(uloop.zerocopy_buffer(rnd.randrange(1, 8 * 1024 * 1024)))
        if len(alive) > 4:
            alive.pop(rnd.randrange(len(alive))).release()
        peak_alive = max(peak_alive, sum(len(b) for b in alive))
        peak_mapped = max(peak_mapped, uloop.stats()["buffer_pool"]["mapped_bytes"])
    stats = uloop.stats()["buffer_pool"]
    assert not stats["table_full"]
    assert stats["regions_dropped"] > 0
    # what is alive, rounded and fragmented, plus the idle reserve
    assert peak_mapped <= 2 * peak_alive + 16 * 1024 * 1024, (peak_mapped, peak_alive)
    for b in alive:
        b.release()
    assert uloop.stats()["buffer_pool"]["mapped_bytes"] <= 8 * 1024 * 1024


def test_a_dropped_region_is_not_unmapped_under_a_send(uloop):
    """A region falls idle only when its buffers came back, and a buffer
    cannot come back while a send holds it: a send from a buffer whose
    siblings are released completes with the right bytes."""
    async def main():
        sinks = []
        srv = await uloop.create_server(collecting(lambda: Sink(until=8 << 20), sinks),
                                        "127.0.0.1", 0)
        tr, _ = await uloop.create_connection(asyncio.Protocol, *srv.sockets[0].getsockname())
        tr.get_extra_info("socket").setsockopt(
            uringloop.SOL_URINGLOOP, uringloop.ZC_MODE, uringloop.ZC_ALWAYS)
        while not sinks:
            await asyncio.sleep(0)
        got, done = sinks[0].data, sinks[0].enough
        buf = uloop.zerocopy_buffer(8 * 1024 * 1024)
        memoryview(buf)[:] = bytes(range(256)) * (len(buf) // 256)
        fut = tr.write_zerocopy(buf)
        with pytest.raises(BufferError):
            buf.release()
        for _ in range(5):       # churn: other regions come and go
            uloop.zerocopy_buffer(16 * 1024 * 1024).release()
        await asyncio.wait_for(fut, 30)
        await asyncio.wait_for(done, 30)
        buf.release()
        tr.close()
        srv.close()
        await srv.wait_closed()
        return bytes(got[:8 * 1024 * 1024])
    assert uloop.run_until_complete(main()) == bytes(range(256)) * (8 * 1024 * 1024 // 256)


@requires("SENDMSG_ZC", "READV_FIXED")
def test_many_registered_tcp_writes_leave_together_in_order():
    """Registered buffers of one region written in one iteration leave in
    one SENDMSG_ZC with the registered-buffer flag (6.15), not one SEND_ZC
    and one enter each; a buffer of another region, and ordinary writes,
    end a batch.  Every byte arrives, in order."""
    async def main():
        loop = asyncio.get_running_loop()
        tr, server, got, done = await zero_copy_connection_to_a_sink(loop)
        small = [loop.zerocopy_buffer(4096) for _ in range(200)]
        big = loop.zerocopy_buffer(5 << 20)          # a region of its own
        expected = bytearray()
        futures, sizes = [], []
        for i, buf in enumerate(small):
            memoryview(buf)[:] = os.urandom(len(buf))
            if i == 100:
                # the first 100 alone: the big buffer's short sends below
                # take enters of their own, as many as the socket wants
                enters = loop.stats()["enter_calls"]
                await asyncio.gather(*futures)
                enters = loop.stats()["enter_calls"] - enters
                memoryview(big)[:] = os.urandom(len(big))
                futures.append(tr.write_zerocopy(big))
                sizes.append(len(big))
                expected += big
                tr.write(b"between")
                expected += b"between"
            futures.append(tr.write_zerocopy(memoryview(buf)[i:]))
            sizes.append(len(buf) - i)
            expected += memoryview(buf)[i:]
        results = await asyncio.gather(*futures)
        assert [r.nbytes for r in results] == sizes
        stats = tr.get_extra_info("zerocopy")
        assert stats["registered_buffer_sends"] >= 201    # (a part sent goes again)
        assert stats["batched_sends"] >= 2, stats
        # 100 one-at-a-time SEND_ZCs took one enter each
        assert enters < 30, (enters, stats)
        tr.close()
        await done
        server.close()
        assert bytes(got) == bytes(expected)
        for buf in small + [big]:
            buf.release()
    run(main())


def test_a_buffer_larger_than_a_region_maps_at_most_an_eighth_more(uloop):
    """A buffer over 4 MiB gets a region of its own, rounded up to one of
    eight size classes per power of two: at most 12.5% more than asked
    (docs/zerocopy-send.md; 4 MiB + 1 byte mapped 5 MiB before)."""
    held = []
    try:
        for size in (4 * 1024 * 1024 + 1, 5 * 1024 * 1024 + 1, 7 * 1024 * 1024,
                     8 * 1024 * 1024 + 4096, 33 * 1024 * 1024):
            before = (uloop.stats()["buffer_pool"] or {}).get("mapped_bytes", 0)
            held.append(uloop.zerocopy_buffer(size))
            grew = uloop.stats()["buffer_pool"]["mapped_bytes"] - before
            assert size <= grew <= size + size // 8, (size, grew)
    finally:
        for buf in held:
            buf.release()
