"""Zero-copy receive (zcrx): the registration attempt and its fall-back on
the devices this machine has, and the refill-queue bookkeeping on real
memory in the kernel's layout.  No device here supports zcrx (loopback,
veth and virtio-net refuse it), so the RECV_ZC data path cannot be run."""
import asyncio
import logging
import mmap
import os
import shutil
import socket
import struct
import subprocess
import sys

import pytest

import uringloop
from conftest import requires, turns, until, until_closed
from protocols import Echo
from uringloop import RefillQueue, zcrx_offset, zcrx_split
from uringloop.core import SimulatedZeroCopyReceive

pytestmark = requires("RECV_ZC")


def run(coro, timeout=60):
    return uringloop.run(asyncio.wait_for(coro, timeout), strict=True)


def zcrx_server(zcrx, protocol_factory, body):
    """Run body(loop, protocols, client_reader, client_writer) against a
    server whose listener uses zcrx; returns what body returns."""
    async def main():
        loop = asyncio.get_running_loop()
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        uringloop.set_zerocopy(listener, receive=zcrx)
        protocols = []

        def factory():
            protocols.append(protocol_factory())
            return protocols[-1]
        server = await loop.create_server(factory, sock=listener)
        reader, writer = await asyncio.open_connection(*listener.getsockname())
        for _ in range(100):
            if protocols and hasattr(protocols[0], "transport"):
                break
            await asyncio.sleep(0.01)
        try:
            return await body(loop, protocols, reader, writer)
        finally:
            writer.close()
            server.close()
            for p in protocols:
                p.transport.close()
            await asyncio.sleep(0)
    return run(main())


def test_loopback_refuses_and_the_server_serves_with_ordinary_receives(caplog):
    zcrx = uringloop.ZeroCopyReceive("lo", queue=0, area_size=1 << 20, refill_entries=64)

    async def body(loop, protocols, reader, writer):
        payload = os.urandom(300_000)
        address = writer.get_extra_info("peername")
        for i in range(3):
            if i:
                reader, writer = await asyncio.open_connection(*address)
            writer.write(payload)
            assert await reader.readexactly(len(payload)) == payload
            if i:
                writer.close()
                await writer.wait_closed()
        return protocols[0].transport.get_extra_info("zerocopy_receive")

    with caplog.at_level(logging.WARNING, logger="asyncio"):
        stats = zcrx_server(zcrx, Echo, body)
    expected = "EPERM" if os.geteuid() else "EOPNOTSUPP"
    assert stats["registered"] is False and stats["active"] is False
    assert stats["reason"].startswith(expected), stats["reason"]
    assert stats["copied_bytes"] == 300_000 and stats["zerocopy_bytes"] == 0
    refusals = [r for r in caplog.records if "zero-copy receive" in r.getMessage()]
    assert len(refusals) == 1                      # once per server, not per connection
    assert zcrx.reason == stats["reason"] and not zcrx.register()


VETH_CHILD = r"""
import asyncio, os, socket, uringloop
zcrx = uringloop.ZeroCopyReceive('zcrxv0', queue=0, area_size=1 << 20, refill_entries=64)
async def main():
    loop = asyncio.get_running_loop()
    listener = socket.socket()
    listener.bind(('10.99.0.1', 0))
    uringloop.set_zerocopy(listener, receive=zcrx)
    class Echo(asyncio.Protocol):
        def connection_made(self, tr): self.tr = tr
        def data_received(self, d): self.tr.write(d)
    server = await loop.create_server(Echo, sock=listener)
    r, w = await asyncio.open_connection(*listener.getsockname())
    w.write(b'x' * 100000)
    assert await r.readexactly(100000) == b'x' * 100000
    w.close()
    server.close()
    print(zcrx.reason)
uringloop.run(main(), strict=True)
"""


def test_veth_in_a_namespace_refuses_with_the_errno():
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and ip (iproute2) for a network namespace")
    ns = f"ulzcrx_{os.getpid()}"

    def sh(*cmd):
        subprocess.run(cmd, check=True, capture_output=True)
    try:
        sh("ip", "netns", "add", ns)
        sh("ip", "-n", ns, "link", "add", "zcrxv0", "type", "veth", "peer", "name", "zcrxv1")
        sh("ip", "-n", ns, "addr", "add", "10.99.0.1/24", "dev", "zcrxv0")
        for dev in ("zcrxv0", "zcrxv1", "lo"):
            sh("ip", "-n", ns, "link", "set", dev, "up")
        out = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", VETH_CHILD],
                             capture_output=True, text=True, timeout=60)
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split(":")[0] in ("EOPNOTSUPP", "EINVAL"), out.stdout


def test_refill_queue_bookkeeping_on_real_memory():
    """Play the kernel's side on an mmap laid out as it lays the region out:
    head and tail indices, then the 16-byte entries."""
    region = mmap.mmap(-1, 4096)
    head_at, tail_at, rqes_at, entries = 0, 64, 128, 8
    rq = RefillQueue(region, head_at, tail_at, rqes_at, entries)

    def kernel_head(value):
        struct.pack_into("<I", region, head_at, value)

    def published_tail():
        return struct.unpack_from("<I", region, tail_at)[0]

    offs = [zcrx_offset(1, 4096 * i) for i in range(entries + 1)]
    for i in range(entries):
        assert rq.give(offs[i], 100 + i)
    assert not rq.give(offs[entries], 1)       # full: the kernel consumed nothing
    assert rq.depth == entries and published_tail() == 0
    rq.commit()
    assert published_tail() == entries         # visible only after commit
    for i in range(entries):
        off, length = struct.unpack_from("<QI", region, rqes_at + 16 * i)
        assert (off, length) == (offs[i], 100 + i) == rq.entry(i)
    kernel_head(5)                             # the kernel took five
    assert rq.depth == 3
    assert rq.give(offs[0], 7) and rq.entry(entries) == (offs[0], 7)   # wrapped to slot 0
    assert zcrx_split(offs[3]) == (1, 3 * 4096)
    with pytest.raises(ValueError):
        zcrx_offset(1, 1 << 48)
    del rq
    region.close()


def test_refill_queue_indices_wrap_at_two_to_the_32():
    region = mmap.mmap(-1, 4096)
    start = 2**32 - 3
    struct.pack_into("<II", region, 0, start, start)          # head, tail
    rq = RefillQueue(region, 0, 4, 64, 16)
    for i in range(6):
        assert rq.give(zcrx_offset(0, i * 4096), 4096)
    rq.commit()
    assert rq.tail == 3 and struct.unpack_from("<I", region, 4)[0] == 3
    assert rq.depth == 6                                       # across the wrap
    struct.pack_into("<I", region, 0, 1)                       # kernel head wrapped too
    assert rq.depth == 2
    assert rq.entry((start + 5) % 2**32) == (zcrx_offset(0, 5 * 4096), 4096)
    del rq
    region.close()


def test_bad_arguments():
    with pytest.raises(TypeError):
        uringloop.ZeroCopyReceive(3)
    for kwargs in ({"queue": -1}, {"area_size": 10}, {"refill_entries": 3},
                   {"refill_entries": 65536}):
        with pytest.raises(ValueError):
            uringloop.ZeroCopyReceive("lo", **kwargs)
    with pytest.raises(TypeError):
        uringloop.set_zerocopy(socket.socket(), receive="eth0")
    with pytest.raises(ValueError):
        RefillQueue(bytearray(4096), 0, 4, 64, 3)               # not a power of two
    with pytest.raises(ValueError):
        RefillQueue(bytearray(256), 0, 4, 64, 64)              # entries past the end
    with pytest.raises(TypeError):
        RefillQueue(b"read-only", 0, 4, 8, 1)
    missing = uringloop.ZeroCopyReceive("nosuchdev0")
    assert missing.register() is False and "no interface" in missing.reason


# ---- the data path on a simulated area ------------------------------------
#
# SimulatedZeroCopyReceive (src/uringloop/zcrx_simulated.pyx) has a real area
# and refill queue in the kernel's layout and a real CQE32 ring with its
# eventfd, but no NIC queue: the test writes payload into the area as the NIC would and calls feed()
# where the kernel would post a RECV_ZC completion.  Everything from the
# completion onward -- pieces, views, refill entries, pausing, area
# pressure, end of stream through the ring -- is the real code.

class Keeper(asyncio.Protocol):
    """Opts in to pieces; keeps what the test asks it to keep."""
    keep_views = False
    hold = False

    def connection_made(self, transport):
        self.transport = transport
        self.pieces, self.data, self.views, self.events = [], [], [], []

    def zerocopy_received(self, piece):
        self.pieces.append(piece)
        self.data.append(bytes(piece))
        if self.keep_views:
            self.views.append(memoryview(piece))
        if self.hold:
            piece.hold()

    def data_received(self, data):
        self.events.append(("data", data))

    def eof_received(self):
        self.events.append("eof")

    def connection_lost(self, exc):
        self.events.append(("lost", exc))


def rqes(zcrx, count):
    return [zcrx.refill.entry(i) for i in range(count)]


def test_pieces_go_to_an_opting_protocol_read_only_and_back_after_the_callback():
    zcrx = SimulatedZeroCopyReceive.make(area_size=1 << 20, refill_entries=16, area_id=3)
    token = 3 << 48

    async def body(loop, protocols, reader, writer):
        p = protocols[0]
        area = zcrx.area_memory()
        area[8192:8197] = b"hello"
        area[12288:12294] = b"world!"
        zcrx.feed(p.transport, 5, 8192)
        zcrx.feed(p.transport, 6, 12288)
        assert p.data == [b"hello", b"world!"] and p.events == []
        piece = p.pieces[0]
        assert piece.returned and len(piece) == 5
        with pytest.raises(ValueError):
            bytes(piece)                                  # it went back
        assert zcrx.refill.depth == 2
        assert rqes(zcrx, 2) == [(token | 8192, 5), (token | 12288, 6)]
        info = p.transport.get_extra_info("zerocopy_receive")
        assert info["connection_zerocopy_bytes"] == 11 and info["held_bytes"] == 0
        assert info["receiving_zerocopy"] and info["receive_armed"]
        assert info["copied_bytes"] == 0 and info["pieces"] == 2
        # read-only: writing through a view is refused
        p.keep_views = True
        area[0:3] = b"abc"
        zcrx.feed(p.transport, 3, 0)
        with pytest.raises(TypeError):
            p.views[0][0:1] = b"x"
        p.views.clear()
    zcrx_server(zcrx, Keeper, body)
    zcrx.close()


def test_a_view_kept_past_the_callback_keeps_the_piece_and_hold_keeps_it_without_one():
    zcrx = SimulatedZeroCopyReceive.make(area_size=1 << 20, refill_entries=16)

    async def body(loop, protocols, reader, writer):
        p = protocols[0]
        area = zcrx.area_memory()
        area[0:4] = b"keep"
        p.keep_views = True
        zcrx.feed(p.transport, 4, 0)
        piece = p.pieces[0]
        assert not piece.returned and zcrx.refill.depth == 0 and zcrx.outstanding_bytes == 4
        with pytest.raises(BufferError):
            piece.release()                               # a view is alive
        assert bytes(p.views[0]) == b"keep"
        p.views.clear()                                   # the last view goes ...
        assert piece.returned and zcrx.refill.depth == 1  # ... and so does the piece
        p.keep_views, p.hold = False, True
        area[4096:4100] = b"held"
        zcrx.feed(p.transport, 4, 4096)
        held = p.pieces[1]
        assert not held.returned and bytes(held) == b"held"
        held.release()
        assert held.returned and zcrx.refill.depth == 2 and zcrx.outstanding_bytes == 0
        held.release()                                    # twice is harmless
    zcrx_server(zcrx, Keeper, body)
    zcrx.close()


class Plain(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport
        self.received = bytearray()

    def data_received(self, data):
        assert type(data) is bytes
        self.received += data


class Buffered(asyncio.BufferedProtocol):
    def connection_made(self, transport):
        self.transport = transport
        self.buf = bytearray(3)                           # smaller than a piece
        self.received = bytearray()

    def get_buffer(self, sizehint):
        return self.buf

    def buffer_updated(self, n):
        self.received += self.buf[:n]


@pytest.mark.parametrize("kind", [Plain, Buffered])
def test_other_protocols_get_bytes_and_the_piece_goes_back_at_once(kind):
    zcrx = SimulatedZeroCopyReceive.make(area_size=1 << 20, refill_entries=16)

    async def body(loop, protocols, reader, writer):
        p = protocols[0]
        area = zcrx.area_memory()
        area[65536:65546] = b"0123456789"
        zcrx.feed(p.transport, 10, 65536)
        assert bytes(p.received) == b"0123456789"
        assert zcrx.refill.depth == 1 and zcrx.outstanding_bytes == 0
        # the transport still writes as usual
        p.transport.write(b"pong")
        assert await reader.readexactly(4) == b"pong"
    zcrx_server(zcrx, kind, body)
    zcrx.close()


def test_a_full_refill_queue_keeps_returns_until_the_kernel_makes_room():
    zcrx = SimulatedZeroCopyReceive.make(area_size=1 << 20, refill_entries=4)

    async def body(loop, protocols, reader, writer):
        p = protocols[0]
        for i in range(6):
            zcrx.feed(p.transport, 100, i * 4096)
        assert zcrx.refill.depth == 4 and zcrx.stats()["refill_waiting"] == 2
        assert struct.unpack_from("<I", zcrx.region_memory(), 4)[0] == 4   # published tail
        struct.pack_into("<I", zcrx.region_memory(), 0, 3)                # the kernel took 3
        zcrx.feed(p.transport, 100, 6 * 4096)
        assert zcrx.stats()["refill_waiting"] == 0 and zcrx.refill.depth == 4
        offs = [zcrx.refill.entry(i)[0] & ((1 << 48) - 1) for i in range(4, 7)]
        assert offs == [4 * 4096, 5 * 4096, 6 * 4096]                     # in order
    zcrx_server(zcrx, Plain, body)
    zcrx.close()


def test_held_pieces_past_half_the_area_stop_receiving_until_a_quarter_is_left():
    zcrx = SimulatedZeroCopyReceive.make(area_size=64 * 1024, refill_entries=64)

    async def body(loop, protocols, reader, writer):
        p = protocols[0]
        p.hold = True
        for i in range(9):                                # 36 KiB > 32 KiB high water
            zcrx.feed(p.transport, 4096, i * 4096)
        await until(lambda: not p.transport.get_extra_info("zerocopy_receive")["receive_armed"],
                    "the cancel")
        info = p.transport.get_extra_info("zerocopy_receive")
        assert info["stopped_for_area"] == 1 and not info["receive_armed"]
        assert info["held_bytes"] == 9 * 4096 and p.transport.is_reading()
        for piece in p.pieces[:4]:
            piece.release()                               # 20 KiB held: still above 16
        assert not p.transport.get_extra_info("zerocopy_receive")["receive_armed"]
        p.pieces[4].release()                             # 16 KiB: room again
        info = p.transport.get_extra_info("zerocopy_receive")
        assert info["stopped_for_area"] == 0 and info["receive_armed"]
        for piece in p.pieces[5:]:
            piece.release()
        assert zcrx.outstanding_bytes == 0
    zcrx_server(zcrx, Keeper, body)
    zcrx.close()


def test_pause_reading_keeps_pieces_in_order_and_cancels_the_receive():
    zcrx = SimulatedZeroCopyReceive.make(area_size=1 << 20, refill_entries=16)

    async def body(loop, protocols, reader, writer):
        p = protocols[0]
        area = zcrx.area_memory()
        for i, word in enumerate([b"one", b"two", b"three"]):
            area[i * 4096:i * 4096 + len(word)] = word
        zcrx.feed(p.transport, 3, 0)
        p.transport.pause_reading()
        zcrx.feed(p.transport, 3, 4096)                  # posted before the cancel landed
        assert p.data == [b"one"] and zcrx.outstanding_bytes == 3
        await until(lambda: not p.transport.get_extra_info("zerocopy_receive")["receive_armed"],
                    "the cancel")
        p.transport.resume_reading()
        await until(lambda: len(p.data) == 2, "the piece kept while paused")
        assert p.data == [b"one", b"two"] and zcrx.outstanding_bytes == 0
        assert p.transport.get_extra_info("zerocopy_receive")["receive_armed"]
        zcrx.feed(p.transport, 5, 8192)
        assert p.data == [b"one", b"two", b"three"]
    zcrx_server(zcrx, Keeper, body)
    zcrx.close()


def test_end_of_stream_arrives_through_the_cqe32_ring_for_each_connection():
    """The kernel itself posts these: a TIMEOUT completing as success with
    the connection's token on the dedicated CQE32 ring looks like RECV_ZC's
    final completion (res 0, no F_MORE) and, like it, completes from
    deferred task work.  The loop learns of it only through the eventfd,
    and reads the 32-byte entries at the right stride, or the tokens would
    not match."""
    zcrx = SimulatedZeroCopyReceive.make(area_size=1 << 20, refill_entries=16)

    async def main():
        loop = asyncio.get_running_loop()
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        uringloop.set_zerocopy(listener, receive=zcrx)
        protocols = []
        server = await loop.create_server(lambda: protocols.append(Keeper()) or protocols[-1],
                                          sock=listener)
        clients = [await asyncio.open_connection(*listener.getsockname()) for _ in range(5)]
        while len(protocols) < 5 or not all(hasattr(p, "transport") for p in protocols):
            await asyncio.sleep(0.01)
        await turns()                       # their receives are armed
        for p in protocols[1:4]:
            zcrx.post_end_of_stream(p.transport)
        for _ in range(100):
            if sum("eof" in p.events for p in protocols) == 3:
                break
            await asyncio.sleep(0.01)
        events = [p.events[:1] for p in protocols]
        for _, w in clients:
            w.close()
        server.close()
        for p in protocols:
            p.transport.close()
        await until_closed(*(p.transport for p in protocols))
        return events
    events = run(main())
    assert events[1:4] == [["eof"]] * 3 and events[0] != ["eof"] and events[4] != ["eof"]
    zcrx.close()


def test_an_error_completion_ends_the_connection_and_enospc_arms_again():
    zcrx = SimulatedZeroCopyReceive.make(area_size=1 << 20, refill_entries=16)

    async def body(loop, protocols, reader, writer):
        p = protocols[0]
        zcrx.feed(p.transport, -28, 0, more=False)       # -ENOSPC: the CQ overflowed
        assert p.transport.get_extra_info("zerocopy_receive")["receive_armed"]
        assert p.events == []
        zcrx.feed(p.transport, -104, 0, more=False)      # -ECONNRESET
        await until(lambda: p.events, "connection_lost()")
        assert isinstance(p.events[-1][1], ConnectionResetError)
    zcrx_server(zcrx, Keeper, body)
    zcrx.close()


def test_pieces_outlive_their_connection_and_loop_and_stay_readable():
    zcrx = SimulatedZeroCopyReceive.make(area_size=1 << 20, refill_entries=16)
    kept = []

    async def body(loop, protocols, reader, writer):
        p = protocols[0]
        p.hold = True
        zcrx.area_memory()[0:4] = b"last"
        zcrx.feed(p.transport, 4, 0)
        kept.append(p.pieces[0])
        p.transport.close()
        await until_closed(p.transport)
    zcrx_server(zcrx, Keeper, body)
    piece = kept[0]
    assert bytes(piece) == b"last"                        # the loop is closed
    assert not zcrx.active and "closed" in zcrx.reason
    piece.release()
    assert piece.returned
    zcrx.close()


def test_the_ring_belongs_to_the_first_loop_thread_and_other_loops_receive_ordinarily():
    """Made in this thread, served by a loop in another: that thread becomes
    the ring's issuer.  A second loop meanwhile gets ordinary receives, with
    the data intact."""
    import threading
    zcrx = SimulatedZeroCopyReceive.make(area_size=1 << 20, refill_entries=16)
    results = {}

    def serve(name, feed):
        async def body(loop, protocols, reader, writer):
            p = protocols[0]
            info = p.transport.get_extra_info("zerocopy_receive")
            if feed:
                zcrx.area_memory()[0:2] = b"zc"
                zcrx.feed(p.transport, 2, 0)
                zcrx.post_end_of_stream(p.transport)
                for _ in range(100):
                    if "eof" in p.events:
                        break
                    await asyncio.sleep(0.01)
                second.start()
                second.join(30)
            else:
                writer.write(b"plain")
                for _ in range(100):
                    if p.events:
                        break
                    await asyncio.sleep(0.01)
            return info["receiving_zerocopy"], p.data, p.events[:1]
        results[name] = zcrx_server(zcrx, Keeper, body)

    second = threading.Thread(target=serve, args=("second", False))
    first = threading.Thread(target=serve, args=("first", True))
    first.start()
    first.join(60)
    assert results["first"] == (True, [b"zc"], ["eof"])
    assert results["second"] == (False, [], [("data", b"plain")])
    zcrx.close()


def test_a_refused_recv_zc_leaves_the_connection_on_ordinary_receives(caplog):
    zcrx = SimulatedZeroCopyReceive.make(area_size=1 << 20, refill_entries=16)

    async def body(loop, protocols, reader, writer):
        p = protocols[0]
        zcrx.feed(p.transport, -22, 0, more=False)      # -EINVAL before any piece
        writer.write(b"still served")
        for _ in range(100):
            if p.events:
                break
            await asyncio.sleep(0.01)
        info = p.transport.get_extra_info("zerocopy_receive")
        return list(p.events), info
    with caplog.at_level(logging.WARNING, logger="asyncio"):
        events, info = zcrx_server(zcrx, Keeper, body)
    assert events == [("data", b"still served")]
    assert not info["receiving_zerocopy"] and info["refused_connections"] == 1
    assert info["copied_bytes"] == len(b"still served")
    assert sum("RECV_ZC refused" in r.getMessage() for r in caplog.records) == 1
    zcrx.close()


def test_small_held_pieces_count_as_the_buffers_they_pin():
    """A 100-byte piece still pins a page of the area: nine of them in a
    64 KiB area pass half of it and stop the receive."""
    zcrx = SimulatedZeroCopyReceive.make(area_size=64 * 1024, refill_entries=64)

    async def body(loop, protocols, reader, writer):
        p = protocols[0]
        p.hold = True
        for i in range(9):
            zcrx.feed(p.transport, 100, i * 4096)
        await until(lambda: not p.transport.get_extra_info("zerocopy_receive")["receive_armed"],
                    "the cancel")
        info = p.transport.get_extra_info("zerocopy_receive")
        assert info["held_bytes"] == 900 and info["held_area"] == 9 * 4096
        assert info["stopped_for_area"] == 1 and not info["receive_armed"]
        for piece in p.pieces:
            piece.release()
        info = p.transport.get_extra_info("zerocopy_receive")
        assert info["held_area"] == 0 and info["receive_armed"]
    zcrx_server(zcrx, Keeper, body)
    zcrx.close()


def test_closing_the_queue_leaves_live_connections_on_ordinary_receives():
    """zcrx.close() while connections are up, one of them stopped for area
    pressure: both go on receiving with ordinary RECVs; a piece held from
    before stays readable and giving it back later is harmless."""
    zcrx = SimulatedZeroCopyReceive.make(area_size=64 * 1024, refill_entries=64)

    async def body(loop, protocols, reader, writer):
        p = protocols[0]
        p.hold = True
        zcrx.area_memory()[0:4] = b"kept"
        for i in range(9):                                # past half: stopped
            zcrx.feed(p.transport, 4096, i * 4096)
        await until(lambda: not p.transport.get_extra_info("zerocopy_receive")["receive_armed"],
                    "the cancel")
        assert p.transport.get_extra_info("zerocopy_receive")["stopped_for_area"] == 1
        zcrx.close()
        info = p.transport.get_extra_info("zerocopy_receive")
        assert not info["receiving_zerocopy"] and info["receive_armed"]
        writer.write(b"after close")
        for _ in range(100):
            if p.events:
                break
            await asyncio.sleep(0.01)
        assert p.events == [("data", b"after close")]
        assert bytes(p.pieces[0])[:4] == b"kept"
        for piece in p.pieces:
            piece.release()
    zcrx_server(zcrx, Keeper, body)
    assert "closed" in zcrx.reason and not zcrx.active
