"""Datagram transports and datagram sockets: sends then abort, send
errors, raising and interrupted datagram_received(), netlink and packet
sockets.

A test that takes `any_loop` runs its scenario on uringloop and on
asyncio.SelectorEventLoop and expects the same outcome; the others look
at what uringloop itself does (its requests, its own protocols)."""
import asyncio
import os
import socket
import struct
import sys

import pytest

import uringloop
from conftest import cycle_garbage, on_both_loops, until
from recorders import (datagram_pair,
                       DatagramRecorder,
                       Events,
                       handler_calls,
                       run_through_interrupts)


NETLINK_ROUTE = 0


RTM_GETLINK = 18
NLM_F_REQUEST_DUMP = 0x1 | 0x300


def _getlink_request(seq):
    body = struct.pack("=BBHiII", 0, 0, 0, 0, 0, 0)       # struct ifinfomsg
    return struct.pack("=IHHII", 16 + len(body), RTM_GETLINK, NLM_F_REQUEST_DUMP,
                       seq, 0) + body


def _netlink_socket(kind=socket.SOCK_RAW):
    if not hasattr(socket, "AF_NETLINK"):
        pytest.skip("no AF_NETLINK on this platform")
    s = socket.socket(socket.AF_NETLINK, kind, NETLINK_ROUTE)
    s.bind((0, 0))
    s.setblocking(False)
    return s


def test_netlink_sock_sendto_and_recvfrom(any_loop):
    loop = any_loop

    async def main():
        with _netlink_socket() as s:
            await loop.sock_sendto(s, _getlink_request(1), (0, 0))
            data, addr = await asyncio.wait_for(loop.sock_recvfrom(s, 65536), 5)
            buf = bytearray(65536)
            await loop.sock_sendto(s, _getlink_request(2), (0, 0))
            n, addr2 = await asyncio.wait_for(loop.sock_recvfrom_into(s, buf), 5)
            return addr, addr2, struct.unpack_from("=IH", data)[1], n > 0
    addr, addr2, msg_type, got = loop.run_until_complete(main())
    assert addr == (0, 0) and addr2 == (0, 0)
    assert msg_type == 16 and got                 # RTM_NEWLINK answers


def test_netlink_datagram_transport(any_loop):
    loop = any_loop

    async def main():
        got = loop.create_future()

        class P(asyncio.DatagramProtocol):
            def datagram_received(self, data, addr):
                if not got.done():
                    got.set_result(addr)

            def error_received(self, exc):
                if not got.done():
                    got.set_exception(exc)
        # (netlink takes SOCK_DGRAM as SOCK_RAW; asyncio wants SOCK_DGRAM)
        tr, _ = await loop.create_datagram_endpoint(P, sock=_netlink_socket(socket.SOCK_DGRAM))
        tr.sendto(_getlink_request(3), (0, 0))
        try:
            return await asyncio.wait_for(got, 5)
        finally:
            tr.close()
    assert loop.run_until_complete(main()) == (0, 0)


def test_packet_socket_addresses(any_loop):
    loop = any_loop
    if not hasattr(socket, "AF_PACKET"):
        pytest.skip("no AF_PACKET on this platform")
    try:
        p = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(0x0800))
    except PermissionError:
        pytest.skip("AF_PACKET needs CAP_NET_RAW")

    async def main():
        with p:
            p.bind(("lo", 0x0800))
            p.setblocking(False)
            u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            u.sendto(b"packet", ("127.0.0.1", 9))
            u.close()
            data, addr = await asyncio.wait_for(loop.sock_recvfrom(p, 65536), 5)
            # send an IPv4 packet back out on lo through the packet socket
            sent = await loop.sock_sendto(p, data, ("lo", 0x0800))
            return addr, sent == len(data)
    addr, sent = loop.run_until_complete(main())
    assert addr[:2] == ("lo", 0x0800) and len(addr) == 5 and isinstance(addr[4], bytes)
    assert sent


def test_datagrams_sent_then_abort_in_one_callback_reach_the_peer(any_loop):
    """As above for datagrams: the selector loop's sendto() sends at once;
    uringloop chains the datagrams after the first into its next enter,
    and an abort before then sends them directly."""
    loop = any_loop

    async def main():
        peer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        peer.bind(("127.0.0.1", 0))
        peer.setblocking(False)
        tr, _ = await loop.create_datagram_endpoint(
            asyncio.DatagramProtocol, remote_addr=peer.getsockname())
        sent = [b"one", b"two" * 100, b"three"]
        for data in sent:
            tr.sendto(data)
        tr.abort()
        got = []
        for _ in sent:
            got.append(await asyncio.wait_for(loop.sock_recv(peer, 65536), 5))
        peer.close()
        await asyncio.sleep(0)
        return got == sent, tr.is_closing(), tr.get_write_buffer_size()
    assert loop.run_until_complete(main()) == (True, True, 0)


def test_datagram_send_error_then_abort_goes_to_error_received(any_loop):
    """sendto() to a broadcast address without SO_BROADCAST fails with
    EACCES: the selector loop's sendto() hands that to error_received()
    and the datagrams around it still leave.  uringloop queues the later
    datagrams for its next enter; abort() sends them and reports the error
    the same way, before connection_lost()."""
    loop = any_loop

    async def scenario():
        peer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        peer.bind(("127.0.0.1", 0))
        peer.setblocking(False)
        proto = Events()
        tr, _ = await loop.create_datagram_endpoint(
            lambda: proto, local_addr=("127.0.0.1", 0))
        tr.sendto(b"one", peer.getsockname())
        tr.sendto(b"lost", ("255.255.255.255", 9))
        tr.sendto(b"three", peer.getsockname())
        tr.abort()
        got = [await asyncio.wait_for(loop.sock_recv(peer, 100), 5) for _ in range(2)]
        peer.close()
        for _ in range(3):
            await asyncio.sleep(0)
        return got, proto.events
    assert loop.run_until_complete(scenario()) == (
        [b"one", b"three"],
        [("error_received", PermissionError), ("connection_lost", type(None))])


def _raising_datagram_scenario(loop, on_instance):
    """datagram_received() raises for the first of two datagrams: on the
    selector loop the exception goes to the exception handler (its
    _read_ready() calls the protocol outside its try block) and the
    transport reads on.  `on_instance`: the method is an attribute of the
    protocol object, which uringloop cannot keep (the looked-up call)."""
    seen = []
    reports = handler_calls(loop)

    class Receiver(asyncio.DatagramProtocol):
        def __init__(self):
            if on_instance:
                self.datagram_received = self.received

        def datagram_received(self, data, addr):
            self.received(data, addr)

        def received(self, data, addr):
            seen.append(data)
            if data == b"first":
                raise ValueError("raised by datagram_received")

        def connection_lost(self, exc):
            seen.append(("connection_lost", exc))

    async def main():
        tr, _ = await loop.create_datagram_endpoint(Receiver, local_addr=("127.0.0.1", 0))
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for data in (b"first", b"second"):
                s.sendto(data, tr.get_extra_info("sockname"))
                await until(lambda: data in seen, f"{data!r} delivered")
        closing = tr.is_closing()
        tr.close()
        await until(lambda: type(seen[-1]) is tuple, "connection_lost()")
        return closing
    closing = loop.run_until_complete(main())
    return (seen, closing,
            [(type(r.get("exception")).__name__, str(r.get("exception"))) for r in reports])


@pytest.mark.parametrize("on_instance", [False, True])
def test_a_raising_datagram_received_is_reported_and_the_transport_reads_on(on_instance):
    ours, reference = on_both_loops(_raising_datagram_scenario, on_instance)
    assert reference == ([b"first", b"second", ("connection_lost", None)], False,
                         [("ValueError", "raised by datagram_received")])
    assert ours == reference


def test_a_keyboard_interrupt_in_datagram_received_leaves_reading_on(any_loop):
    loop = any_loop
    done = loop.create_future()

    class Raising(DatagramRecorder):
        def saw(self, n):
            super().saw(n)
            if self.calls == 20 and not done.done():
                done.set_result(self.calls)
            if self.calls in (1, 3):
                raise KeyboardInterrupt

    tr, proto, peer, address = loop.run_until_complete(datagram_pair(loop, Raising))
    for i in range(20):
        peer.sendto(b"%03d" % i, address)
    timeout = loop.call_later(20, lambda: done.done() or done.set_result("timed out"))
    got, interrupts = run_through_interrupts(loop, done)
    timeout.cancel()
    tr.close()
    peer.close()
    loop.run_until_complete(asyncio.sleep(0))
    assert (got, interrupts) == (20, 2)


class FirstDatagram(asyncio.DatagramProtocol):
    # (at module level: a class made per run is cycle garbage itself)
    def __init__(self, got):
        self.got = got

    def datagram_received(self, data, addr):
        if not self.got.done():
            self.got.set_result(data)


def test_closed_datagram_and_pipe_transports_leave_no_cycle_garbage(any_loop):
    """A datagram or pipe transport that has reported connection_lost() is
    freed by its reference count, as the selector loop's are: its
    operations and it no longer hold each other."""
    async def datagrams():
        got = any_loop.create_future()
        receiver, _ = await any_loop.create_datagram_endpoint(
            lambda: FirstDatagram(got), local_addr=("127.0.0.1", 0))
        sender, _ = await any_loop.create_datagram_endpoint(
            asyncio.DatagramProtocol, remote_addr=receiver.get_extra_info("sockname"))
        sender.sendto(b"x")
        assert await got == b"x"
        receiver.close()
        sender.close()
        await asyncio.sleep(0)

    async def pipes():
        r, w = os.pipe()
        reader = asyncio.StreamReader()
        read_transport, _ = await any_loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), open(r, "rb", 0))
        write_transport, _ = await any_loop.connect_write_pipe(
            asyncio.Protocol, open(w, "wb", 0))
        write_transport.write(b"hi")
        assert await reader.readexactly(2) == b"hi"
        write_transport.close()
        assert await reader.read() == b""
        read_transport.close()
        await asyncio.sleep(0)

    assert cycle_garbage(any_loop, datagrams) == []
    assert cycle_garbage(any_loop, pipes) == []


def test_udp_datagram_endpoint_roundtrip(any_loop):
    async def main():
        loop = asyncio.get_running_loop()

        class Echo(asyncio.DatagramProtocol):
            def connection_made(self, transport):
                self.transport = transport

            def datagram_received(self, data, addr):
                self.transport.sendto(data.upper(), addr)

        class Client(asyncio.DatagramProtocol):
            def __init__(self):
                self.got = []
                self.errors = []
                self.all = loop.create_future()

            def datagram_received(self, data, addr):
                self.got.append(data)
                if len(self.got) == 100:
                    self.all.set_result(None)

            def error_received(self, exc):
                self.errors.append(exc)

        srv_tr, _ = await loop.create_datagram_endpoint(Echo, local_addr=("127.0.0.1", 0))
        addr = srv_tr.get_extra_info("sockname")
        cli_tr, cli = await loop.create_datagram_endpoint(Client, remote_addr=addr)
        # (the stdlib's datagram transport is an asyncio.DatagramTransport
        # from 3.12 on; ours always is)
        assert (isinstance(cli_tr, asyncio.DatagramTransport)
                or (sys.version_info < (3, 12) and not isinstance(loop, uringloop.Loop)))
        for i in range(100):
            cli_tr.sendto(b"dgram %d" % i)
        await cli.all
        assert sorted(cli.got) == sorted(b"DGRAM %d" % i for i in range(100))
        with pytest.raises(ValueError):
            cli_tr.sendto(b"x", ("127.0.0.1", 1))
        cli_tr.close()
        srv_tr.close()

    any_loop.run_until_complete(asyncio.wait_for(main(), 60))


def test_udp_send_error_goes_to_error_received(any_loop):
    async def main():
        loop = asyncio.get_running_loop()
        probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        probe.bind(("127.0.0.1", 0))
        dead = probe.getsockname()
        probe.close()
        errors = loop.create_future()

        class Client(asyncio.DatagramProtocol):
            def error_received(self, exc):
                if not errors.done():
                    errors.set_result(exc)

        tr, _ = await loop.create_datagram_endpoint(Client, remote_addr=dead)
        for _ in range(3):
            tr.sendto(b"nobody listens")
            await asyncio.sleep(0.01)
        assert isinstance(await errors, ConnectionRefusedError)
        tr.close()

    any_loop.run_until_complete(asyncio.wait_for(main(), 60))
