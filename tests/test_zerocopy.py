"""Zero-copy send: the policy, notifications and buffer lifetimes, socket
options, fall-backs.  Over loopback the kernel always copies (it reports
IORING_NOTIF_USAGE_ZC_COPIED): that is what auto mode must detect."""
import asyncio
import errno
import os
import socket
import subprocess
import sys
import textwrap

import pytest

import uringloop
from conftest import readable, requires, run_with_tiny_memlock, until
from protocols import Sink

pytestmark = requires("SEND_ZC")


def run(coro, timeout=60):
    return uringloop.run(asyncio.wait_for(coro, timeout))


async def connected_pair(family=socket.AF_INET, path=None):
    loop = asyncio.get_running_loop()
    sink = Sink()
    if family == socket.AF_UNIX:
        server = await loop.create_unix_server(lambda: sink, path)
        tr, _ = await loop.create_unix_connection(asyncio.Protocol, path)
    else:
        server = await loop.create_server(lambda: sink, "127.0.0.1", 0)
        tr, _ = await loop.create_connection(asyncio.Protocol, *server.sockets[0].getsockname())
    return server, tr, sink


async def drain_notifications(tr):
    for _ in range(1000):
        if tr.get_extra_info("zerocopy")["notifications_pending"] == 0 and \
                tr.get_write_buffer_size() == 0:
            return
        await asyncio.sleep(0.001)
    raise AssertionError("notifications still pending")


def test_auto_mode_starts_off_for_a_local_peer():
    async def main():
        server, tr, sink = await connected_pair()
        stats = tr.get_extra_info("zerocopy")
        assert stats["mode"] == "auto" and not stats["active"]
        assert "on this host" in stats["off_reason"]
        tr.write(os.urandom(1 << 20))
        await drain_notifications(tr)
        assert tr.get_extra_info("zerocopy")["zerocopy_sends"] == 0
        tr.close()
        await sink.done
        server.close()

    run(main())


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1"])
def test_auto_mode_knows_loopback_peers_on_both_ends(host):
    # the accepted end too: its peer is parsed with inet_pton, not ipaddress
    if host == "::1" and not socket.has_ipv6:
        pytest.skip("no IPv6")

    async def main():
        loop = asyncio.get_running_loop()
        accepted = loop.create_future()

        class Keep(asyncio.Protocol):
            def connection_made(self, transport):
                accepted.set_result(transport)

        try:
            server = await loop.create_server(Keep, host, 0)
        except OSError as exc:
            pytest.skip(f"cannot listen on {host}: {exc}")
        tr, _ = await loop.create_connection(asyncio.Protocol, *server.sockets[0].getsockname()[:2])
        theirs = await accepted
        for end in (tr, theirs):
            stats = end.get_extra_info("zerocopy")
            assert stats["mode"] == "auto" and not stats["active"], end
            assert "on this host" in stats["off_reason"]
        tr.close()
        theirs.close()
        server.close()
        await server.wait_closed()

    run(main())


def test_auto_mode_detects_loopback_copies_and_turns_itself_off():
    async def main():
        server, tr, sink = await connected_pair()
        # an explicit ZC_AUTO lifts the local-peer guess: auto mode then
        # learns from the kernel's reports, as on a veth path it cannot guess
        tr.get_extra_info("socket").setsockopt(
            uringloop.SOL_URINGLOOP, uringloop.ZC_MODE, uringloop.ZC_AUTO)
        payload = os.urandom(64 * 1024)
        for i in range(20):
            tr.write(payload)
            await drain_notifications(tr)
            if i == 3:
                # the connection's first 256 KiB go ordinarily (BBR's start)
                stats = tr.get_extra_info("zerocopy")
                assert stats["warmup_bytes"] == 256 * 1024
                assert stats["zerocopy_sends"] == 0 and stats["ordinary_bytes"] == 4 * len(payload)
        stats = tr.get_extra_info("zerocopy")
        assert stats["mode"] == "auto" and stats["active"] is False
        assert "COPIED" in stats["off_reason"]
        # exactly one notification per SEND_ZC, all of them reported copied
        assert stats["zerocopy_sends"] == stats["copied_reports"] == 4
        assert stats["zerocopy_reports"] == 0
        assert stats["ordinary_sends"] >= 1
        assert stats["zerocopy_bytes"] + stats["ordinary_bytes"] == 20 * len(payload)
        tr.close()
        await sink.done
        assert bytes(sink.data) == payload * 20
        server.close()

    run(main())


def test_small_writes_stay_ordinary_in_auto_mode():
    async def main():
        server, tr, sink = await connected_pair()
        tr.get_extra_info("socket").setsockopt(
            uringloop.SOL_URINGLOOP, uringloop.ZC_MODE, uringloop.ZC_AUTO)
        for _ in range(10):
            tr.write(b"x" * 1000)
            await drain_notifications(tr)
        stats = tr.get_extra_info("zerocopy")
        assert stats["zerocopy_sends"] == 0 and stats["active"]
        tr.close()
        await sink.done
        server.close()

    run(main())


def test_always_mode_keeps_zero_copy_and_data_is_exact():
    async def main():
        server, tr, sink = await connected_pair()
        sock = tr.get_extra_info("socket")
        sock.setsockopt(uringloop.SOL_URINGLOOP, uringloop.ZC_MODE, uringloop.ZC_ALWAYS)
        assert sock.getsockopt(uringloop.SOL_URINGLOOP, uringloop.ZC_MODE) == uringloop.ZC_ALWAYS
        chunks = [os.urandom(n) for n in (1, 4096, 70000, 1 << 20, 333)]
        for c in chunks * 3:
            tr.write(c)
        await drain_notifications(tr)
        stats = tr.get_extra_info("zerocopy")
        # every byte left zero-copy, in fewer requests than chunks when
        # they queue up (SENDMSG_ZC takes several)
        assert stats["active"] and stats["zerocopy_bytes"] == len(b"".join(chunks * 3))
        assert stats["ordinary_bytes"] == 0
        assert stats["copied_reports"] + stats["zerocopy_reports"] == stats["zerocopy_sends"]
        tr.close()
        await sink.done
        assert bytes(sink.data) == b"".join(chunks * 3)
        server.close()

    run(main())


@pytest.mark.parametrize("mode", ["ZC_ALWAYS", "ZC_AUTO"])
def test_zero_copy_chunks_queued_together_leave_in_few_requests(mode):
    """300 write_zerocopy() calls (with write()s among them) in one
    callback: the chunks queued behind a send in flight leave together in
    SENDMSG_ZC requests of up to 64, not one request (and one enter) each;
    every byte arrives in order, every future resolves with its size.
    In auto mode the write()s between them end a batch (they are copied),
    and on loopback auto mode soon stops zero-copy (the kernel copies):
    the chunks then leave in ordinary SENDMSGs, as many at once."""
    async def main():
        loop = asyncio.get_running_loop()
        server, tr, sink = await connected_pair()
        tr.get_extra_info("socket").setsockopt(
            uringloop.SOL_URINGLOOP, uringloop.ZC_MODE, getattr(uringloop, mode))
        expected = bytearray()
        futures = []
        before = loop.stats()["sqes_submitted"]
        for i in range(300):
            buf = bytearray(os.urandom(4096))
            expected += buf
            futures.append((tr.write_zerocopy(buf), len(buf)))
            if i % 50 == 0:
                marker = b"<%d>" % i
                tr.write(marker)
                expected += marker
        results = await asyncio.gather(*(f for f, _ in futures))
        assert [r.nbytes for r in results] == [n for _, n in futures]
        await drain_notifications(tr)
        stats = tr.get_extra_info("zerocopy")
        if mode == "ZC_ALWAYS":
            assert stats["batched_sends"] >= 4, stats
        requests = loop.stats()["sqes_submitted"] - before
        assert requests < 60, requests
        tr.close()
        await sink.done
        assert bytes(sink.data) == bytes(expected)
        server.close()

    run(main())


def test_write_zerocopy_holds_the_buffer_until_the_kernel_lets_go():
    async def main():
        server, tr, sink = await connected_pair()
        tr.get_extra_info("socket").setsockopt(
            uringloop.SOL_URINGLOOP, uringloop.ZC_MODE, uringloop.ZC_ALWAYS)
        buf = bytearray(os.urandom(512 * 1024))
        expected = bytes(buf)
        tr.write(b"before:")
        fut = tr.write_zerocopy(buf)
        tr.write(b":after")
        with pytest.raises(BufferError):
            buf.append(0)          # exported until the notification
        assert tr.get_write_buffer_size() >= len(buf)
        result = await fut
        assert result == uringloop.ZeroCopyResult(len(expected), False)  # loopback copies
        buf.append(0)              # released
        # a cancelled future does not release early either
        buf2 = bytearray(100000)
        fut2 = tr.write_zerocopy(buf2)
        fut2.cancel()
        with pytest.raises(BufferError):
            buf2.append(0)
        await drain_notifications(tr)
        buf2.append(0)
        tr.close()
        await sink.done
        assert bytes(sink.data) == b"before:" + expected + b":after" + bytes(100000)
        server.close()

    run(main())


def test_write_zerocopy_bad_input_and_closed_transport():
    async def main():
        server, tr, sink = await connected_pair()
        with pytest.raises(TypeError):
            tr.write_zerocopy("text")
        with pytest.raises(ValueError):
            tr.write_zerocopy(memoryview(bytearray(100))[::2])
        assert await tr.write_zerocopy(b"") == (0, False)
        fut = tr.write_zerocopy(bytearray(1 << 22))
        tr.abort()
        with pytest.raises(ConnectionError):
            await fut
        with pytest.raises(ConnectionError):
            await tr.write_zerocopy(b"after abort")
        await sink.done
        server.close()

    run(main())


def test_socket_options_validate_and_so_zerocopy_zero_means_never():
    async def main():
        server, tr, sink = await connected_pair()
        sock = tr.get_extra_info("socket")
        sock.setsockopt(uringloop.SOL_URINGLOOP, uringloop.ZC_THRESHOLD, 32768)
        assert sock.getsockopt(uringloop.SOL_URINGLOOP, uringloop.ZC_THRESHOLD) == 32768
        assert tr.get_extra_info("zerocopy")["threshold"] == 32768
        for level, opt, value, err in (
                (uringloop.SOL_URINGLOOP, uringloop.ZC_THRESHOLD, -1, errno.EINVAL),
                (uringloop.SOL_URINGLOOP, uringloop.ZC_THRESHOLD, 1 << 50, errno.EINVAL),
                (uringloop.SOL_URINGLOOP, uringloop.ZC_MODE, 7, errno.EINVAL),
                (uringloop.SOL_URINGLOOP, uringloop.ZC_MODE, "auto", errno.EINVAL),
                (uringloop.SOL_URINGLOOP, 99, 1, errno.ENOPROTOOPT)):
            with pytest.raises(OSError) as info:
                sock.setsockopt(level, opt, value)
            assert info.value.errno == err
        with pytest.raises(OSError):
            sock.getsockopt(uringloop.SOL_URINGLOOP, 99)
        sock.setsockopt(socket.SOL_SOCKET, uringloop.SO_ZEROCOPY, 0)
        assert tr.get_extra_info("zerocopy")["mode"] == "never"
        tr.write(os.urandom(1 << 20))
        await drain_notifications(tr)
        assert tr.get_extra_info("zerocopy")["zerocopy_sends"] == 0
        tr.close()
        await sink.done
        server.close()

    run(main())


def test_unix_streams_fall_back_and_write_zerocopy_still_works(tmp_path):
    async def main():
        server, tr, sink = await connected_pair(socket.AF_UNIX, str(tmp_path / "s"))
        stats = tr.get_extra_info("zerocopy")
        assert not stats["active"] and "AF_UNIX" in stats["off_reason"]
        buf = bytearray(os.urandom(200000))
        assert await tr.write_zerocopy(buf) == (200000, False)
        tr.close()
        await sink.done
        assert bytes(sink.data) == bytes(buf)
        server.close()

    run(main())


def test_loop_wide_default_from_the_environment():
    code = textwrap.dedent("""
        import asyncio, uringloop
        async def main():
            loop = asyncio.get_running_loop()
            srv = await loop.create_server(asyncio.Protocol, '127.0.0.1', 0)
            tr, _ = await loop.create_connection(asyncio.Protocol, *srv.sockets[0].getsockname())
            s = tr.get_extra_info('zerocopy')
            print(s['mode'], s['threshold'])
            tr.close(); srv.close()
        uringloop.run(main())
    """)
    env = dict(os.environ, URINGLOOP_ZC_MODE="never", URINGLOOP_ZC_THRESHOLD="65536")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.stdout.split() == ["never", "65536"], out.stderr


@requires("ring")
def test_memlock_too_small_for_pinning_falls_back_with_data_intact():
    """Non-fixed SEND_ZC pins the pages against RLIMIT_MEMLOCK."""
    out = run_with_tiny_memlock("""
async def main():
    loop, tr, got, done = await sink_connection()
    payload = os.urandom(4 << 20)
    tr.write(payload)
    r = await tr.write_zerocopy(bytearray(payload))
    tr.close(); await done
    assert got == payload * 2, "data differs"
    print("OK", r, tr.get_extra_info('zerocopy')['zerocopy_sends'])
""")
    assert out.startswith("OK ZeroCopyResult(nbytes=4194304, zerocopy=False)")


SINK_CHILD = """
import asyncio, sys, uringloop
size, count, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
async def main():
    loop = asyncio.get_running_loop()
    tr, _ = await loop.create_datagram_endpoint(
        asyncio.DatagramProtocol, remote_addr=('198.18.0.2', 9999))
    tr.get_extra_info('socket').setsockopt(
        uringloop.SOL_URINGLOOP, uringloop.ZC_MODE, getattr(uringloop, mode))
    payload = bytes(size)
    for i in range(count):
        tr.sendto(payload)
        if tr.get_write_buffer_size() > 1 << 20:
            while tr.get_write_buffer_size():
                await asyncio.sleep(0)
    while tr.get_write_buffer_size() or tr.get_extra_info('zerocopy')['notifications_pending']:
        await asyncio.sleep(0.001)
    s = tr.get_extra_info('zerocopy')
    print(s['zerocopy_sends'], s['zerocopy_reports'], s['copied_reports'], s['active'])
    tr.close()
uringloop.run(main(), strict=True)
"""


@requires("ring")
@pytest.mark.parametrize("mode,size,zerocopy", [
    ("ZC_ALWAYS", 60000, True), ("ZC_ALWAYS", 4000, True),
    ("ZC_AUTO", 60000, True), ("ZC_AUTO", 4000, False)])
def test_udp_into_a_dropping_sink_is_really_zero_copy(udp_sink_namespaces, mode, size,
                                                      zerocopy):
    """ZC_ALWAYS: every datagram leaves with SEND_ZC and is reported not
    copied.  Auto mode sends datagrams from 7.5 KiB up with SEND_ZC (where
    it was measured faster) and smaller ones with the direct sendto(2)."""
    out = subprocess.run(["ip", "netns", "exec", udp_sink_namespaces, sys.executable,
                          "-c", SINK_CHILD, str(size), "500", mode],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    sends, clean, copied, active = out.stdout.split()
    assert active == "True" and int(copied) == 0
    if zerocopy:
        assert int(sends) == 500 and int(clean) == 500      # not copied
    else:
        assert int(sends) == 0 and int(clean) == 0


def test_udp_auto_mode_to_this_host_sends_ordinarily(uloop):
    """A datagram transport connected to a loopback peer starts with
    zero-copy off in auto mode (the kernel would copy), as TCP does."""
    async def main():
        loop = asyncio.get_running_loop()
        rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        rx.bind(("127.0.0.1", 0))
        tr, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol,
                                                    remote_addr=rx.getsockname())
        tr.sendto(bytes(20000))
        await until(lambda: readable(rx), "the datagram")
        stats = tr.get_extra_info("zerocopy")
        assert stats["threshold"] == 7680 and stats["zerocopy_sends"] == 0
        assert stats["active"] is False and "this host" in stats["off_reason"]
        assert len(rx.recv(30000)) == 20000
        tr.close()
        rx.close()
    uloop.run_until_complete(main())


def test_set_zerocopy_on_plain_sockets_before_the_transport_exists():
    async def main():
        loop = asyncio.get_running_loop()
        accepted = loop.create_future()

        class Server(asyncio.Protocol):
            def connection_made(self, transport):
                accepted.set_result(transport)

        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        uringloop.set_zerocopy(listener, mode=uringloop.ZC_ALWAYS, threshold=1)
        server = await loop.create_server(Server, sock=listener)
        client = socket.socket()
        client.connect(listener.getsockname())
        uringloop.set_zerocopy(client, mode=uringloop.ZC_NEVER)
        tr, _ = await loop.create_connection(asyncio.Protocol, sock=client)
        srv_tr = await accepted
        assert tr.get_extra_info("zerocopy")["mode"] == "never"
        stats = srv_tr.get_extra_info("zerocopy")
        assert stats["mode"] == "always" and stats["threshold"] == 1
        with pytest.raises(ValueError):
            uringloop.set_zerocopy(client, mode=9)
        with pytest.raises(ValueError):
            uringloop.set_zerocopy(client, threshold=-5)
        tr.close()
        srv_tr.close()
        server.close()
        await server.wait_closed()

    run(main())
