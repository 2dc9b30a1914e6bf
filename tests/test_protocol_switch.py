"""set_protocol() between Protocol and BufferedProtocol while bytes flow
(issue #58, item 1): every byte reaches, in order, the protocol that is
current when it is handed over, and the EOF comes after them, through any
sequence of switches, in each read mode a stream takes (the ring's
provided buffers for small reads, a direct read for large ones, the
protocol's own buffer for a BufferedProtocol).  Each scenario runs on the
selector loop too, which gives the same answer."""
import asyncio
import random
import socket
import threading

import pytest


class Flow:
    """What every protocol of one connection reports to: the bytes in the
    order they were handed over, which protocol got them, the EOF."""

    def __init__(self, loop, switch_every, buffer_size):
        self.loop = loop
        self.switch_every = switch_every
        self.buffer_size = buffer_size
        self.calls = 0
        self.received = bytearray()
        self.events = []
        self.errors = []
        self.done = loop.create_future()

    def handed(self, protocol, data):
        if protocol is not protocol.transport_protocol():
            self.errors.append(f"{type(protocol).__name__} got bytes after it was replaced")
        self.received += data
        self.calls += 1
        if self.switch_every and self.calls % self.switch_every == 0:
            kind = Plain if isinstance(protocol, Buffered) else Buffered
            protocol.transport.set_protocol(kind(self, protocol.transport))

    def eof(self, protocol):
        if protocol is not protocol.transport_protocol():
            self.errors.append("EOF to a replaced protocol")
        self.events.append("eof")

    def lost(self, exc):
        self.events.append(("lost", exc))
        if not self.done.done():
            self.done.set_result(None)


class Switching:
    def __init__(self, flow, transport=None):
        self.flow = flow
        self.transport = transport

    def connection_made(self, transport):
        self.transport = transport

    def transport_protocol(self):
        return self.transport.get_protocol()

    def eof_received(self):
        self.flow.eof(self)

    def connection_lost(self, exc):
        self.flow.lost(exc)


class Plain(Switching, asyncio.Protocol):
    def data_received(self, data):
        self.flow.handed(self, bytes(data))


class Buffered(Switching, asyncio.BufferedProtocol):
    def __init__(self, flow, transport=None):
        super().__init__(flow, transport)
        self.buffer = bytearray(flow.buffer_size)

    def get_buffer(self, sizehint):
        return self.buffer

    def buffer_updated(self, nbytes):
        self.flow.handed(self, bytes(self.buffer[:nbytes]))


def send_in_thread(sock, payload, piece):
    def body():
        try:
            if piece is None:
                sock.sendall(payload)
            else:
                for i in range(0, len(payload), piece):
                    sock.sendall(payload[i:i + piece])
            sock.shutdown(socket.SHUT_WR)
        finally:
            sock.close()
    t = threading.Thread(target=body, daemon=True)
    t.start()
    return t


@pytest.mark.parametrize("first", ["plain", "buffered"])
@pytest.mark.parametrize("switch_every", [1, 3, 0], ids=["every-call", "every-3rd", "never"])
@pytest.mark.parametrize("buffer_size", [65536, 7], ids=["64k-buffer", "7-byte-buffer"])
@pytest.mark.parametrize("piece", [None, 1000], ids=["one-sendall", "1000-byte-sends"])
def test_every_byte_and_the_eof_reach_the_current_protocol(any_loop, first, switch_every,
                                                           buffer_size, piece):
    """The peer sends 1 MiB (one sendall(), or 1000-byte sends: large and
    small reads) and shuts its side; the protocols swap each other on
    every call, every third call, or never."""
    loop = any_loop
    size = (1 << 20) if buffer_size > 7 else (64 << 10)
    payload = random.Random(size + (piece or 0)).randbytes(size)

    async def main():
        flow = Flow(loop, switch_every, buffer_size)
        with socket.create_server(("127.0.0.1", 0)) as listener:
            b = socket.create_connection(listener.getsockname())
            a, _ = listener.accept()
        a.setblocking(False)
        kind = Plain if first == "plain" else Buffered
        tr, _ = await loop.connect_accepted_socket(lambda: kind(flow), a)
        sender = send_in_thread(b, payload, piece)
        await asyncio.wait_for(flow.done, 60)
        sender.join(10)
        return flow
    flow = loop.run_until_complete(main())
    assert flow.errors == []
    assert len(flow.received) == len(payload)
    assert flow.received == payload
    assert flow.events[:1] == ["eof"] and flow.events[-1] == ("lost", None)
