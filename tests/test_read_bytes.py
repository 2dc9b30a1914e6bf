"""The bytes objects data_received() gets are the protocol's to keep.

uringloop gives the block of a read's bytes object to the next read when,
once data_received() has returned, nothing but the loop refers to it
(src/uringloop/read_bytes.h: the loop's spare).  What a protocol keeps --
the object itself, a memoryview of it, the object as a dict key, in a
closure until the next call -- must hold what it held when it came, and a
hash taken of one read's object must not be the hash the next read's
object reports.  Each scenario runs an echo on uringloop and on
asyncio.SelectorEventLoop (`any_loop`) over reads from the provided-buffer
ring (small) and direct reads (8 KiB and more), and both loops must see
every check hold."""
import asyncio
import random
import socket

import pytest

SMALL = [1, 2, 100, 1000, 1024, 1024, 1024, 4096, 4096]
LARGE = [8192, 10240, 10240, 10240, 10240, 10250, 10230, 65536, 100 * 1024,
         100 * 1024, 256 * 1024, 256 * 1024 + 1, 1024 * 1024]


def sizes(seed):
    """Messages of the sizes above, repeated (the same size in a row is
    what lets a block be given on), and random ones."""
    rng = random.Random(seed)
    return (SMALL * 3 + LARGE * 2 + [10240] * 20 + [1024] * 20
            + [rng.choice([rng.randint(1, 300), rng.randint(300, 9000),
                           rng.randint(8192, 300_000)]) for _ in range(60)])


def message(size, seed):
    block = bytes((i * 31 + seed) & 0xFF for i in range(257))
    return (block * (size // len(block) + 1))[:size]


class Echo(asyncio.Protocol):
    """Writes each read back, and checks, per `keep`, what it is given:

    "nothing"   keeps no reference; the hash of each read's object is
                that of a copy made now (a hash is kept in the object)
    "objects"   keeps every `every`-th object, with a copy made now
    "views"     keeps a memoryview of every `every`-th, with a copy
    "keys"      keeps every `every`-th as a dict key (its hash taken)
    "until_next" keeps each until the next read, where it is compared
    """

    def __init__(self, keep, every=1):
        self.keep = keep
        self.every = every
        self.count = 0
        self.kept = []
        self.keys = {}
        self.previous = None
        self.bad = []

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.count += 1
        copy = bytes(bytearray(data))
        if hash(data) != hash(copy):
            self.bad.append(("hash", self.count, len(data)))
        if self.previous is not None:
            if self.previous[0] != self.previous[1]:
                self.bad.append(("until_next", self.count))
            self.previous = None
        if self.count % self.every == 0:
            if self.keep == "objects":
                self.kept.append((data, copy))
            elif self.keep == "views":
                self.kept.append((memoryview(data), copy))
            elif self.keep == "keys":
                self.keys[data] = copy
            elif self.keep == "until_next":
                self.previous = (data, copy)
        self.transport.write(data)

    def check_kept(self):
        for held, copy in self.kept:
            if bytes(held) != copy:
                self.bad.append(("kept", len(copy)))
        for key, copy in self.keys.items():
            if key != copy or hash(key) != hash(copy):
                self.bad.append(("key", len(copy)))
        return self.bad


async def echo_run(loop, keep, every, seed):
    """Send each message and wait for its echo; what the server's protocol
    found wrong, and whether every echo was the message."""
    protocols = []

    def factory():
        protocols.append(Echo(keep, every))
        return protocols[-1]
    server = await loop.create_server(factory, "127.0.0.1", 0)
    client = socket.create_connection(server.sockets[0].getsockname())
    client.setblocking(False)
    echoes_ok = True
    try:
        for i, size in enumerate(sizes(seed)):
            data = message(size, seed + i)
            await loop.sock_sendall(client, data)
            got = bytearray()
            while len(got) < size:
                chunk = await loop.sock_recv(client, 1024 * 1024)
                assert chunk, "the server closed"
                got += chunk
            echoes_ok = echoes_ok and got == data
    finally:
        client.close()
        server.close()
        await server.wait_closed()
    (proto,) = protocols
    return echoes_ok, proto.check_kept(), proto.count > 0


@pytest.mark.parametrize("keep,every", [
    ("nothing", 1), ("objects", 1), ("objects", 2), ("objects", 3),
    ("views", 2), ("keys", 2), ("until_next", 1), ("until_next", 3)])
def test_what_a_protocol_keeps_stays_what_it_was(any_loop, keep, every):
    result = any_loop.run_until_complete(
        asyncio.wait_for(echo_run(any_loop, keep, every, seed=every * 7), 120))
    assert result == (True, [], True)


class Raises(Echo):
    """Echoes, then raises out of every third data_received(): the
    transport's fatal error; the exception, with the object in its
    traceback's frame, goes to the loop's exception handler."""

    def data_received(self, data):
        super().data_received(data)
        if self.count % 3 == 0:
            raise ValueError(bytes(bytearray(data)))


@pytest.mark.loop_errors_expected
def test_an_object_in_a_raising_call_s_traceback_stays_what_it_was(any_loop):
    seen = []
    any_loop.set_exception_handler(lambda loop, context: seen.append(context))

    async def main():
        protocols = []

        def factory():
            protocols.append(Raises("nothing"))
            return protocols[-1]
        server = await any_loop.create_server(factory, "127.0.0.1", 0)
        client = socket.create_connection(server.sockets[0].getsockname())
        client.setblocking(False)
        for size in (10240, 10240, 10240, 1024):
            await any_loop.sock_sendall(client, message(size, size))
            await asyncio.sleep(0.05)
        client.close()
        server.close()
        await server.wait_closed()
        return protocols[0]
    proto = any_loop.run_until_complete(asyncio.wait_for(main(), 60))
    # each exception's traceback holds the data_received frame, and in it
    # the object it was given, which must still be what it was then
    checked = 0
    for context in seen:
        exc = context.get("exception")
        if not isinstance(exc, ValueError):
            continue
        tb = exc.__traceback__
        while tb is not None:
            data = tb.tb_frame.f_locals.get("data")
            if tb.tb_frame.f_code.co_name == "data_received" and data is not None:
                assert data == exc.args[0]
                assert hash(data) == hash(exc.args[0])
                checked += 1
            tb = tb.tb_next
    assert checked, seen
    assert proto.bad == []
    seen.clear()    # (the contexts hold the transport)
