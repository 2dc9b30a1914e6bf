"""Protocols the tests share: a sink that keeps what it receives (and
Collect, one that also notes its events), echo servers for streams,
BufferedProtocol streams and datagrams, a connected pair of collectors,
and run_on_uringloop(coro, timeout).

    from protocols import Sink, Echo      # (conftest.py puts helpers/ on sys.path)
"""
import asyncio
import contextlib

import uringloop


def run_on_uringloop(coro, timeout=60):
    return uringloop.run(asyncio.wait_for(coro, timeout))


class Sink(asyncio.Protocol):
    """Keeps every byte in .data; .done resolves with connection_lost()'s
    argument.  With until=n, .enough resolves once n bytes have come."""

    def __init__(self, until=None):
        loop = asyncio.get_running_loop()
        self.data = bytearray()
        self.done = loop.create_future()
        self.until = until
        self.enough = loop.create_future()

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.data += data
        if self.until is not None and len(self.data) >= self.until and not self.enough.done():
            self.enough.set_result(None)

    def connection_lost(self, exc):
        if not self.done.done():
            self.done.set_result(exc)


class Echo(asyncio.Protocol):
    """Writes back what it receives; counts it in .received."""

    def connection_made(self, transport):
        self.transport = transport
        self.received = 0

    def data_received(self, data):
        self.received += len(data)
        self.transport.write(data)


class EchoBuffered(asyncio.BufferedProtocol):
    """Echo as a BufferedProtocol: receives into its own 64 KiB buffer."""

    def connection_made(self, transport):
        self.transport = transport
        self.buf = bytearray(65536)

    def get_buffer(self, sizehint):
        return self.buf

    def buffer_updated(self, nbytes):
        self.transport.write(bytes(self.buf[:nbytes]))


class EchoDatagram(asyncio.DatagramProtocol):
    """Sends each datagram back to where it came from."""

    def connection_made(self, transport):
        self.transport = transport

    def datagram_received(self, data, addr):
        self.transport.sendto(data, addr)


def collecting(factory, into):
    """A protocol factory that also appends each protocol it makes to `into`
    (a server's protocols, for the test to look at)."""
    def make():
        protocol = factory()
        into.append(protocol)
        return protocol
    return make


class Collect(Sink):
    """A Sink that also notes its events in .events ('made', 'eof',
    'lost') and .eof, and checks that every read is a bytes object."""

    def __init__(self):
        super().__init__()
        self.eof = False
        self.events = []

    def connection_made(self, transport):
        super().connection_made(transport)
        self.events.append("made")

    def data_received(self, data):
        assert isinstance(data, bytes)
        super().data_received(data)

    def eof_received(self):
        self.eof = True
        self.events.append("eof")

    def connection_lost(self, exc):
        self.events.append("lost")
        super().connection_lost(exc)


@contextlib.asynccontextmanager
async def collected_connection(loop, received=None):
    """A TCP server on loopback whose one protocol is `received` (a new
    Collect by default) and a Collect client connected to it: yields
    (client transport, client protocol, received) inside `async with` the
    server."""
    received = Collect() if received is None else received
    server = await loop.create_server(lambda: received, "127.0.0.1", 0)
    async with server:
        tr, client = await loop.create_connection(Collect, *server.sockets[0].getsockname())
        yield tr, client, received


async def echo_server(loop, **kwargs):
    """A stream echo server made with asyncio.start_server(): (server,
    address); server.handlers holds its handler tasks."""
    handlers = set()

    async def handle(reader, writer):
        handlers.add(asyncio.current_task())
        try:
            while data := await reader.read(1 << 20):
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, **kwargs)
    server.handlers = handlers      # to wait for before the loop ends
    return server, server.sockets[0].getsockname()
