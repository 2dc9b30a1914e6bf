"""Protocols the tests share: a sink that keeps what it receives, and
echo servers for streams, BufferedProtocol streams and datagrams.

    from protocols import Sink, Echo      # (conftest.py puts helpers/ on sys.path)
"""
import asyncio


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
