"""What a protocol sees of write flow control (issue #58, item 3): the
selector loop's write() sends at once, so bytes the socket takes are never
buffered there; uringloop sends small writes at the iteration's submit,
and a protocol must see the same: get_write_buffer_size() of 0 and no
pause_writing() while the socket takes them, a pause once it cannot.
Each scenario runs on the selector loop too, which gives the same answer."""
import asyncio
import socket

import pytest


class Recorder(asyncio.Protocol):
    def __init__(self):
        self.events = []

    def connection_made(self, transport):
        self.transport = transport

    def pause_writing(self):
        self.events.append("pause")

    def resume_writing(self):
        self.events.append("resume")


async def connected(loop):
    with socket.create_server(("127.0.0.1", 0)) as listener:
        peer = socket.create_connection(listener.getsockname())
        ours, _ = listener.accept()
    tr, proto = await loop.create_connection(Recorder, sock=ours)
    await asyncio.sleep(0)
    return tr, proto, peer


async def read_exactly(loop, sock, n):
    sock.setblocking(False)
    got = bytearray()
    while len(got) < n:
        got += await loop.sock_recv(sock, n - len(got))
    return bytes(got)


@pytest.mark.parametrize("size", [1, 100, 5000, 8191, 8192, 60000])
@pytest.mark.parametrize("high", [None, 64], ids=["default-limits", "high-64"])
def test_a_write_the_socket_takes_is_not_buffered(any_loop, size, high):
    """write() on an idle connection: nothing is buffered right after it,
    and the protocol is neither paused nor resumed, with the default
    limits or a high-water mark below the write."""
    loop = any_loop

    async def main():
        tr, proto, peer = await connected(loop)
        if high is not None:
            tr.set_write_buffer_limits(high=high)
        sizes = []
        for i in range(3):
            tr.write(bytes([65 + i]) * size)
            sizes.append(tr.get_write_buffer_size())
            assert await read_exactly(loop, peer, size) == bytes([65 + i]) * size
            sizes.append(tr.get_write_buffer_size())
        tr.close()
        peer.close()
        return sizes, proto.events
    sizes, events = loop.run_until_complete(asyncio.wait_for(main(), 30))
    assert sizes == [0] * 6
    assert events == []


def test_small_writes_to_a_peer_that_does_not_read_pause_the_protocol(any_loop):
    """1000-byte writes while not paused, to a peer that reads nothing: the
    socket fills and the protocol is paused (on the selector loop within
    write(); here by the time the loop has run), with the bytes buffered
    above the high-water mark; once the peer reads it all, resumed."""
    loop = any_loop

    async def main():
        tr, proto, peer = await connected(loop)
        written = 0
        for _ in range(200):                   # iterations
            while "pause" not in proto.events and written < (256 << 20):
                tr.write(b"z" * 1000)
                written += 1000
                if written % (64 << 10) == 0:
                    break                      # let the loop run now and then
            if "pause" in proto.events:
                break
            await asyncio.sleep(0)
        assert proto.events == ["pause"], (written, tr.get_write_buffer_size())
        assert tr.get_write_buffer_size() > tr.get_write_buffer_limits()[1]
        assert await read_exactly(loop, peer, written) == b"z" * written
        for _ in range(100):
            if tr.get_write_buffer_size() == 0:
                break
            await asyncio.sleep(0)
        tr.close()
        peer.close()
        return proto.events, tr.get_write_buffer_size()
    events, left = loop.run_until_complete(asyncio.wait_for(main(), 60))
    assert events == ["pause", "resume"] and left == 0
