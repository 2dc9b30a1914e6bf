"""TLS through uringloop's SSL protocol (transports/tls.pyx: asyncio's
SSLProtocol with the path of an established connection's records
compiled), each scenario run on the selector loop too and compared.

The peer is a blocking ssl socket in a thread, so that what it sends --
records of many sizes, then close_notify right behind the last one -- can
reach the server in one read, which is where the compiled reading stops
early (no read that could only want more input)."""
import asyncio
import functools
import os
import random
import socket
import ssl
import threading
import time

import pytest

import uringloop
from protocols import echo_server, run_on_uringloop


LOOPS = {"selector": asyncio.SelectorEventLoop, "uringloop": uringloop.new_event_loop}


@pytest.fixture
def cert(self_signed_cert):
    return self_signed_cert


def trusting_client_context():
    """A client context that takes the self-signed certificate."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


class Recorder(asyncio.Protocol):
    """What the application sees: its data joined, and the order of the
    kinds of call (data runs folded into one)."""

    def __init__(self, done, echo=False):
        self.done, self.echo = done, echo
        self.data = bytearray()
        self.calls = []

    def connection_made(self, transport):
        self.transport = transport
        self.calls.append("made")

    def data_received(self, data):
        assert type(data) is bytes, type(data)
        self.data += data
        if self.calls[-1] != "data":
            self.calls.append("data")
        if self.echo:
            self.transport.write(data)

    def eof_received(self):
        self.calls.append("eof")

    def connection_lost(self, exc):
        self.calls.append("lost")
        self.done.set_result(None)


def peer(port, messages, echo, results):
    context = trusting_client_context()
    with socket.create_connection(("127.0.0.1", port)) as raw:
        with context.wrap_socket(raw) as tls:
            got = bytearray()
            sent = 0
            for message in messages:
                tls.sendall(message)
                sent += len(message)
                while echo and len(got) < sent:
                    got += tls.recv(65536)
            if not echo:
                tls.sendall(b"".join(messages[-3:]))    # then close_notify at once
            tls.unwrap()
            results.append(bytes(got))


def split_peer(seed, port, messages, echo, results):
    """A peer that makes its records with memory BIOs and sends them as
    bytes cut at random places, with pauses, so that the server's reads
    end inside records (OpenSSL then holds a record's first part, which
    the incoming BIO no longer counts); close_notify is the last piece."""
    rng = random.Random(seed)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = trusting_client_context().wrap_bio(incoming, outgoing)
    with socket.create_connection(("127.0.0.1", port)) as raw:
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                raw.sendall(outgoing.read())
                incoming.write(raw.recv(65536) or b"")
        for message in messages:
            tls.write(message)
        try:
            tls.unwrap()
        except ssl.SSLWantReadError:
            pass                    # close_notify written; the server's comes later
        stream = outgoing.read()
        at = 0
        while at < len(stream):
            cut = rng.choice([1, 2, 5, 29, 1000, 4000, 16000, 16413, 17000, 70000])
            raw.sendall(stream[at:at + cut])
            at += cut
            if rng.random() < 0.3:
                time.sleep(0.002)
        while raw.recv(65536):
            pass
        results.append(b"")


def serve(make_loop, cert, messages, echo=False, server_context=None, peer=peer):
    context = server_context or ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*cert)
    results = []

    async def main():
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        protocols = []

        def factory():
            protocols.append(Recorder(done, echo))
            return protocols[-1]

        server = await loop.create_server(factory, "127.0.0.1", 0, ssl=context)
        port = server.sockets[0].getsockname()[1]
        thread = threading.Thread(target=peer, args=(port, messages, echo, results))
        thread.start()
        await asyncio.wait_for(done, 30)
        await loop.run_in_executor(None, thread.join)
        server.close()
        await server.wait_closed()
        p = protocols[0]
        return bytes(p.data), p.calls

    loop = make_loop()
    try:
        return loop.run_until_complete(main()) + (results,)
    finally:
        loop.close()


def message_sizes(seed):
    rng = random.Random(seed)
    return [os.urandom(rng.choice([1, 2, 100, 16383, 16384, 16385, 70000])) for _ in range(12)]


@pytest.mark.parametrize("seed", range(4))
def test_records_then_close_notify_reach_the_protocol_as_on_the_selector_loop(cert, seed):
    messages = message_sizes(seed)
    expected = b"".join(messages) + b"".join(messages[-3:])
    seen = {name: serve(make, cert, messages) for name, make in LOOPS.items()}
    for name, (data, calls, _) in seen.items():
        assert data == expected, name
    assert seen["uringloop"][1] == seen["selector"][1] == ["made", "data", "eof", "lost"]


@pytest.mark.parametrize("max_size", [None, 1000])
@pytest.mark.parametrize("seed", range(3))
def test_records_cut_anywhere_reach_the_protocol_as_on_the_selector_loop(cert, seed, max_size,
                                                                        monkeypatch):
    """Reads that end inside records, on both loops: the compiled path
    sizes its one bytes from what is pending and a record's worth, or
    max_size if less (with 1000, a record whose first part came in
    earlier reads outgrows that, and the bytes grows)."""
    if max_size is not None:
        monkeypatch.setattr(asyncio.sslproto.SSLProtocol, "max_size", max_size)
    messages = message_sizes(seed)
    seen = {name: serve(make, cert, messages, peer=functools.partial(split_peer, seed))
            for name, make in LOOPS.items()}
    for name, (data, calls, _) in seen.items():
        assert data == b"".join(messages), name
    assert seen["uringloop"][1] == seen["selector"][1] == ["made", "data", "eof", "lost"]


def test_echo_over_tls_is_byte_exact(cert):
    messages = message_sizes(99)
    for name, make in LOOPS.items():
        data, calls, (got,) = serve(make, cert, messages, echo=True)
        assert data == got == b"".join(messages), name


def test_an_sslobject_class_of_the_users_own_is_called(cert):
    """The compiled path reads through _ssl directly only for a plain
    ssl.SSLObject: a context's sslobject_class subclass has its read()
    and write() called, as by the stdlib's SSLProtocol."""
    calls = {"read": 0, "write": 0}

    class Counting(ssl.SSLObject):
        def read(self, *args):
            calls["read"] += 1
            return super().read(*args)

        def write(self, data):
            calls["write"] += 1
            return super().write(data)

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.sslobject_class = Counting
    messages = message_sizes(7)
    data, _, (got,) = serve(uringloop.new_event_loop, cert, messages, echo=True,
                               server_context=context)
    assert data == got == b"".join(messages)
    assert calls["read"] >= 1 and calls["write"] >= 1


def test_the_uringloop_ssl_protocol_is_the_stdlibs_subclass(cert):
    async def main():
        loop = asyncio.get_running_loop()
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(*cert)
        client = trusting_client_context()
        done = loop.create_future()
        server = await loop.create_server(lambda: Recorder(done), "127.0.0.1", 0, ssl=context)
        port = server.sockets[0].getsockname()[1]
        transport, _ = await loop.create_connection(asyncio.Protocol, "127.0.0.1", port,
                                                    ssl=client)
        assert isinstance(transport, asyncio.sslproto._SSLProtocolTransport)
        assert isinstance(transport._ssl_protocol, asyncio.sslproto.SSLProtocol)
        assert type(transport._ssl_protocol).__name__ == "RingSSLProtocol"
        with pytest.raises(TypeError, match="expecting a bytes-like instance, got str"):
            transport.write("text")
        transport.close()
        await asyncio.wait_for(done, 30)        # the server side's connection_lost
        server.close()
        await server.wait_closed()

    loop = uringloop.new_event_loop()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()


def test_start_tls_upgrades_with_the_compiled_protocol_and_the_stdlibs_errors(cert):
    """loop.start_tls() is the loop's own (tls.pyx), with RingSSLProtocol:
    an echo through the upgraded transport, and the errors of bad
    arguments, the same on both loops."""
    def scenario():
        async def main():
            loop = asyncio.get_running_loop()
            server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            server_context.load_cert_chain(*cert)
            client_context = trusting_client_context()

            async def handle(reader, writer):
                await writer.start_tls(server_context)
                writer.write(await reader.readexactly(5))
                await writer.drain()
                writer.close()

            server = await asyncio.start_server(handle, "127.0.0.1", 0)
            port = server.sockets[0].getsockname()[1]
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            errors = []
            for bad in (object(), None):
                try:
                    await loop.start_tls(writer.transport, writer._protocol, bad)
                except TypeError as exc:
                    errors.append(str(exc).split(",")[0])
            await writer.start_tls(client_context)
            kind = type(writer.transport._ssl_protocol).__name__
            writer.write(b"hello")
            echo = await reader.readexactly(5)
            writer.close()
            await writer.wait_closed()
            server.close()
            await server.wait_closed()
            return echo, errors, kind
        return main()

    seen = {}
    for name, make in LOOPS.items():
        loop = make()
        try:
            seen[name] = loop.run_until_complete(scenario())
        finally:
            loop.close()
    assert seen["uringloop"][:2] == seen["selector"][:2]
    assert seen["uringloop"][0] == b"hello"
    assert seen["uringloop"][2] == "RingSSLProtocol"
    assert seen["selector"][2] == "SSLProtocol"


def test_tls_streams_with_a_self_signed_certificate(any_loop, self_signed_cert):
    cert, key = self_signed_cert
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    client_ctx = ssl.create_default_context(cafile=cert)
    payload = os.urandom(2 * 1024 * 1024)

    async def main():
        loop = asyncio.get_running_loop()
        server, addr = await echo_server(loop, ssl=server_ctx)
        async with server:
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", addr[1], ssl=client_ctx, server_hostname="localhost")
            assert writer.get_extra_info("peercert")["subject"][0][0][1] == "localhost"
            assert writer.get_extra_info("sslcontext") is client_ctx
            writer.write(payload)
            got = await reader.readexactly(len(payload))
            assert got == payload
            writer.close()
            await writer.wait_closed()

            with pytest.raises(ssl.SSLCertVerificationError):
                await asyncio.open_connection(
                    "127.0.0.1", addr[1], ssl=ssl.create_default_context(),
                    server_hostname="localhost")

    any_loop.run_until_complete(asyncio.wait_for(main(), 60))


def test_tls_connections_inherit_the_listeners_zero_copy_settings(self_signed_cert):
    cert, key = self_signed_cert
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    client_ctx = ssl.create_default_context(cafile=cert)

    async def main():
        loop = asyncio.get_running_loop()
        accepted = loop.create_future()

        class Server(asyncio.Protocol):
            def connection_made(self, transport):
                accepted.set_result(transport)

        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        uringloop.set_zerocopy(listener, mode=uringloop.ZC_ALWAYS, threshold=1)
        server = await loop.create_server(Server, sock=listener, ssl=server_ctx)
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", listener.getsockname()[1], ssl=client_ctx, server_hostname="localhost")
        tls = await accepted
        stats = tls.get_extra_info("zerocopy")     # the raw transport's policy
        assert stats["mode"] == "always" and stats["threshold"] == 1
        tls.write(b"x" * 100_000)
        assert await reader.readexactly(100_000) == b"x" * 100_000
        assert tls.get_extra_info("zerocopy")["zerocopy_sends"] >= 1
        writer.close()
        tls.close()
        server.close()
        await server.wait_closed()

    run_on_uringloop(main())
