"""Every public name of uringloop, used as a typed program would: checked
with mypy --strict by tests/test_typing.py (never run)."""
import asyncio
import os
import socket
from typing import Any

import uringloop
import uringloop.gunicorn
from uringloop import (AsyncFile, AsyncTextFile, DatagramTransport, EventLoopPolicy, Loop,
                       RefillQueue, RegisteredBuffer, RingUnavailableError, StreamTransport,
                       ZeroCopyFuture, ZeroCopyPiece, ZeroCopyReceive, ZeroCopyResult)


class Echo(asyncio.Protocol):
    def data_received(self, data: bytes) -> None:
        pass

    def zerocopy_received(self, piece: ZeroCopyPiece) -> None:
        view = memoryview(piece)
        n: int = len(piece) + len(view)
        copy: bytes = piece.tobytes() + bytes(piece)
        if not piece.returned:
            piece.hold()
            piece.release()
        del n, copy


async def main() -> int:
    loop = asyncio.get_running_loop()
    assert isinstance(loop, Loop)
    counters: dict[str, Any] = loop.stats()
    buf: RegisteredBuffer = loop.zerocopy_buffer(1 << 16)
    with buf:
        memoryview(buf)[:5] = b"hello"
        registered: bool = buf.registered
    buf.release()

    server = await loop.create_server(Echo, "127.0.0.1", 0)
    transport, _ = await loop.create_connection(asyncio.Protocol, "127.0.0.1", 8080)
    if isinstance(transport, StreamTransport):
        result: ZeroCopyResult = await transport.write_zerocopy(b"x" * 100000)
        sent: int = result.nbytes
        whole: bool = result.zerocopy
    dgram, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol,
                                                   remote_addr=("127.0.0.1", 9))
    if isinstance(dgram, DatagramTransport):
        pending: ZeroCopyFuture = dgram.sendto_zerocopy(b"y" * 1000)
        pending.add_done_callback(lambda f: None)
        if not pending.done() and not pending.cancelled():
            # (asyncio.wait() takes it too, but typeshed types wait() for
            # Future subclasses only)
            await asyncio.shield(pending)
            assert pending.exception() is None
        await asyncio.gather(pending, asyncio.wait_for(pending, 1))

    listener = socket.create_server(("127.0.0.1", 0))
    receive = ZeroCopyReceive("eth0", queue=1, area_size=1 << 24, refill_entries=1024)
    uringloop.set_zerocopy(listener, mode=uringloop.ZC_AUTO, threshold=16384,
                           receive=receive)
    active: bool = receive.active
    why: str | None = receive.reason
    registered = receive.register()
    numbers: list[int] = [receive.queue, receive.area_size, receive.refill_entries,
                          receive.zcrx_id, receive.area_token, receive.outstanding_bytes,
                          receive.held_area, receive.zerocopy_bytes, receive.pieces,
                          receive.fallbacks, receive.high_water, receive.low_water]
    name: str = receive.interface
    info: dict[str, Any] = receive.stats()
    area: memoryview = receive.area_memory()
    queue: RefillQueue | None = receive.refill
    if queue is not None:
        queue.give(uringloop.zcrx_offset(0, 4096), 4096)
        queue.commit()
        slot: tuple[int, int] = queue.entry(0)
        depth: int = queue.depth + queue.entries + queue.tail
    area_id, offset = uringloop.zcrx_split(uringloop.zcrx_offset(1, 8192))
    receive.close()

    sock = transport.get_extra_info("socket")
    sock.setsockopt(uringloop.SOL_URINGLOOP, uringloop.ZC_MODE, uringloop.ZC_NEVER)
    sock.setsockopt(uringloop.SOL_URINGLOOP, uringloop.ZC_THRESHOLD, 65536)
    modes: tuple[int, int, int, int] = (uringloop.ZC_ALWAYS, uringloop.ZC_AUTO,
                                        uringloop.ZC_NEVER, uringloop.SO_ZEROCOPY)
    server.close()
    return area_id + offset


async def files() -> None:
    async with uringloop.open("data.txt", encoding="utf-8", newline="") as text:
        line: str = await text.readline()
        lines: list[str] = [x async for x in text]
        cookie: int = await text.tell()
        await text.seek(cookie)
        written: int = await text.write(line)
    binary: AsyncFile = await uringloop.open("data.bin", "r+b")
    head: bytes = await binary.read(10)
    at: bytes = await binary.pread(4096, 1 << 32)
    count: int = await binary.pwrite(b"x", 0) + await binary.readinto(bytearray(8))
    await binary.fsync()
    info: os.stat_result = await binary.stat()
    await binary.close()
    other: AsyncTextFile = await uringloop.open(3, "w", closefd=False)
    await other.close()
    anything: Any = await uringloop.open("data", input("mode? "))
    size: int = (await uringloop.stat("data.txt", follow_symlinks=False)).st_size
    del lines, written, head, at, count, info, anything, size


def run_it() -> None:
    facts: dict[str, Any] = uringloop.features()
    value: int = uringloop.run(main(), debug=False, strict=True)
    with asyncio.Runner(loop_factory=uringloop.new_event_loop) as runner:
        runner.run(main())
    made: Loop = uringloop.new_event_loop()
    made.close()
    either: asyncio.AbstractEventLoop = uringloop.loop_factory()
    either.close()
    with asyncio.Runner(loop_factory=uringloop.loop_factory) as runner:
        runner.run(main())
    policy: asyncio.AbstractEventLoopPolicy = EventLoopPolicy()
    uringloop.install(strict=False)
    try:
        Loop()
    except RingUnavailableError as exc:
        code: int | None = exc.errno
    version: str = uringloop.__version__
    worker_ok: bool = issubclass(uringloop.gunicorn.UringUvicornWorker, object)
    del facts, value, policy, version, worker_ok
