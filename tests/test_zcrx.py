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
from uringloop import RefillQueue, zcrx_offset, zcrx_split

pytestmark = pytest.mark.skipif(
    not uringloop.features()["opcodes"].get("RECV_ZC"),
    reason="kernel lacks IORING_OP_RECV_ZC (6.15)")


def run(coro, timeout=60):
    return uringloop.run(asyncio.wait_for(coro, timeout), strict=True)


class Echo(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport
        self.received = 0

    def data_received(self, data):
        self.received += len(data)
        self.transport.write(data)


def test_loopback_refuses_and_the_server_serves_with_ordinary_receives(caplog):
    zcrx = uringloop.ZeroCopyReceive("lo", queue=0, area_size=1 << 20, refill_entries=64)

    async def main():
        loop = asyncio.get_running_loop()
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        uringloop.set_zerocopy(listener, receive=zcrx)
        accepted = []

        def factory():
            accepted.append(Echo())
            return accepted[-1]
        server = await loop.create_server(factory, sock=listener)
        payload = os.urandom(300_000)
        for _ in range(3):
            reader, writer = await asyncio.open_connection(*listener.getsockname())
            writer.write(payload)
            assert await reader.readexactly(len(payload)) == payload
            writer.close()
            await writer.wait_closed()
        stats = accepted[0].transport.get_extra_info("zerocopy_receive")
        server.close()
        return stats

    with caplog.at_level(logging.WARNING, logger="asyncio"):
        stats = run(main())
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
