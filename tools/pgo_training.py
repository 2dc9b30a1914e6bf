"""The training run of a profile-guided build (setup.py, URINGLOOP_PGO=1).

setup.py compiles the extension instrumented, runs this script on that
build, and compiles it again with the counts it left: the compiler then
lays the paths this run took out together and moves the ones it never
took (error handling, mostly) out of their way.  What runs here is what a
server on the loop runs most: echo over TCP with protocols and with
streams at 1, 10 and 100 KiB, the sock_* methods, connections opened and
closed, UDP datagrams, timers and tasks; and the protocol echo once more
for a client in another process (plain blocking sockets), so that the
loop waits in io_uring_enter between requests, as a server does -- with
its clients in the same loop it always has work and never waits, and the
compiler took the waiting path for a cold one.  Every part is bounded in
count and the whole in time (DEADLINE); loopback only.

    PYTHONPATH=<dir holding the built package> python3 tools/pgo_training.py [--expect DIR]

(--expect: the package directory the build means to train; the run stops
if `import uringloop` finds another, an installed one say.)

Exits with 0 when it ran, 2 when the ring is not available here (the
build then goes on without a profile).
"""
import asyncio
import os
import signal
import socket
import sys

DEADLINE = 60           # seconds for the whole run, whatever happens
CONNS = 10
ROUNDS = {1024: 2000, 10240: 1000, 102400: 200}


class Echo(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.transport.write(data)


class DatagramEcho(asyncio.DatagramProtocol):
    def connection_made(self, transport):
        self.transport = transport

    def datagram_received(self, data, addr):
        self.transport.sendto(data, addr)


class DatagramClient(asyncio.DatagramProtocol):
    def __init__(self):
        self.received = 0
        self.waiter = None

    def datagram_received(self, data, addr):
        self.received += 1
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)


async def stream_client(port, size, rounds):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    message = bytes(range(256)) * (size // 256)
    for _ in range(rounds):
        writer.write(message)
        if await reader.readexactly(size) != message:
            raise RuntimeError("echo corrupted")
    writer.close()
    await writer.wait_closed()


async def streams_handler(reader, writer):
    while data := await reader.read(256 * 1024):
        writer.write(data)
        await writer.drain()
    writer.close()


async def sock_client(loop, port, size, rounds):
    sock = socket.socket()
    sock.setblocking(False)
    await loop.sock_connect(sock, ("127.0.0.1", port))
    message = b"s" * size
    buf = bytearray(size)
    for _ in range(rounds):
        await loop.sock_sendall(sock, message)
        got = 0
        while got < size:
            n = await loop.sock_recv_into(sock, memoryview(buf)[got:])
            if n == 0:
                raise RuntimeError("closed")
            got += n
    sock.close()


async def connects(port, count):
    for _ in range(count):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"x")
        await reader.readexactly(1)
        writer.close()
        await writer.wait_closed()


async def datagrams(loop, count):
    """count datagrams, 16 in flight at most (a drop costs that window
    a short wait, no more)."""
    server, _ = await loop.create_datagram_endpoint(DatagramEcho, local_addr=("127.0.0.1", 0))
    port = server.get_extra_info("sockname")[1]
    client, proto = await loop.create_datagram_endpoint(
        DatagramClient, remote_addr=("127.0.0.1", port))
    for i in range(0, count, 16):
        for _ in range(16):
            client.sendto(b"d" * 512)
        while proto.received < i + 16:
            proto.waiter = loop.create_future()
            try:
                await asyncio.wait_for(proto.waiter, 0.1)
            except asyncio.TimeoutError:
                break
    client.close()
    server.close()


def tick():
    pass


async def timers(loop, count):
    handles = [loop.call_later(0.001 * (i % 10), tick) for i in range(count)]
    for h in handles[::2]:
        h.cancel()
    for _ in range(count):
        await asyncio.sleep(0)
    await asyncio.gather(*(asyncio.sleep(0.001) for _ in range(count // 10)))
    await asyncio.sleep(0.02)


# the client in another process: lockstep rounds of one message on each
# connection, every reply read whole and checked
OUTSIDE_CLIENT = r"""
import socket, sys
port, conns = int(sys.argv[1]), int(sys.argv[2])
cells = [tuple(map(int, cell.split(":"))) for cell in sys.argv[3:]]   # size:rounds
socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(conns)]
for s in socks:
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.settimeout(30)
for size, rounds in cells:
    message = bytes(range(256)) * (size // 256)
    buf = bytearray(size)
    for _ in range(rounds):
        for s in socks:
            s.sendall(message)
        for s in socks:
            view, got = memoryview(buf), 0
            while got < size:
                n = s.recv_into(view[got:])
                if n == 0:
                    sys.exit("closed")
                got += n
            if buf != message:
                sys.exit("echo corrupted")
for s in socks:
    s.close()
"""


async def outside_client(port):
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", OUTSIDE_CLIENT, str(port), str(CONNS),
        *(f"{size}:{rounds}" for size, rounds in ROUNDS.items()))
    if await proc.wait() != 0:
        raise RuntimeError("the outside client failed")


async def train():
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    streams = await asyncio.start_server(streams_handler, "127.0.0.1", 0)
    streams_port = streams.sockets[0].getsockname()[1]
    await outside_client(port)
    for size, rounds in ROUNDS.items():
        await asyncio.gather(*(stream_client(port, size, rounds) for _ in range(CONNS)))
        await asyncio.gather(*(stream_client(streams_port, size, rounds // 2)
                               for _ in range(CONNS)))
        await asyncio.gather(*(sock_client(loop, port, size, rounds // 2) for _ in range(CONNS)))
    await connects(port, 200)
    await datagrams(loop, 2000)
    await timers(loop, 2000)
    server.close()
    streams.close()
    await server.wait_closed()
    await streams.wait_closed()


def main():
    import uringloop
    if "--expect" in sys.argv:
        expected = os.path.realpath(sys.argv[sys.argv.index("--expect") + 1])
        found = os.path.realpath(os.path.dirname(uringloop.core.__file__))
        if found != expected:
            print(f"pgo_training: imported uringloop from {found}, not {expected}",
                  file=sys.stderr)
            return 1
    try:
        loop = uringloop.Loop()
    except uringloop.RingUnavailableError as exc:
        print(f"pgo_training: no ring here ({exc})", file=sys.stderr)
        return 2
    # The deadline is an alarm, not asyncio.wait_for(): a timer pending
    # for the whole run would make every wait in io_uring_enter one with a
    # timeout, and the compiler would take the wait without one (a server
    # with no timers due) for a cold path.  SIGALRM's default action ends
    # the process, and the build goes on without a profile.
    signal.alarm(int(DEADLINE))
    try:
        loop.run_until_complete(train())
    finally:
        signal.alarm(0)
        loop.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
