"""A blob server that sends a file without copying it into Python objects:
from an mmap with write_zerocopy(), or (--registered) streamed through four
registered buffers of loop.zerocopy_buffer(), each refilled once its future
says the kernel let go of it.  --demo fetches the file back, checks the bytes
and prints the transport's zero-copy statistics.

    python3 examples/zerocopy_blob_server.py --demo [--registered]
    python3 examples/zerocopy_blob_server.py --file big.iso --port 25001

Protocol: the client sends "GET\\n"; the server answers with the 8-byte
big-endian length and the file's bytes, then closes.  Over loopback the
kernel copies anyway and auto mode knows it (zerocopy=False in the result);
towards a real NIC the same code sends without copying.
"""
import argparse
import asyncio
import hashlib
import mmap
import os
import tempfile

import uringloop


class BlobProtocol(asyncio.Protocol):
    def __init__(self, path, blob, registered):
        self.path, self.blob, self.registered = path, blob, registered
        self.request = b""

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.request += data
        if b"\n" in self.request and not hasattr(self, "task"):
            self.transport.write(len(self.blob).to_bytes(8, "big"))
            send = self.send_registered() if self.registered else self.send_mapped()
            self.task = asyncio.ensure_future(send)

    async def send_mapped(self):
        self.done(await self.transport.write_zerocopy(self.blob))

    async def send_registered(self):
        loop = asyncio.get_running_loop()
        buffers = [loop.zerocopy_buffer(1 << 20) for _ in range(4)]
        pending = [None] * len(buffers)
        results = []
        with open(self.path, "rb") as f:
            for i in range(-(-len(self.blob) // len(buffers[0]))):
                slot = i % len(buffers)
                if pending[slot] is not None:
                    results.append(await pending[slot])   # the kernel let go of it
                n = f.readinto(buffers[slot])
                pending[slot] = self.transport.write_zerocopy(memoryview(buffers[slot])[:n])
        results += await asyncio.gather(*[p for p in pending if p is not None])
        self.done(uringloop.ZeroCopyResult(sum(r.nbytes for r in results),
                                           all(r.zerocopy for r in results)))

    def done(self, result):
        print("sent", result, "stats:", self.transport.get_extra_info("zerocopy"))
        self.transport.close()


async def fetch(host, port):
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(b"GET\n")
    size = int.from_bytes(await reader.readexactly(8), "big")
    data = await reader.readexactly(size)
    writer.close()
    await writer.wait_closed()
    return data


async def main(args):
    loop = asyncio.get_running_loop()
    path = args.file
    if path is None:                    # --demo: a 64 MiB file of random bytes
        fd, path = tempfile.mkstemp()
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(64 * 1024 * 1024))
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as blob:
        server = await loop.create_server(
            lambda: BlobProtocol(path, blob, args.registered), args.host, args.port)
        port = server.sockets[0].getsockname()[1]
        print(f"serving {path} ({len(blob)} bytes) on {args.host}:{port}")
        async with server:
            if args.demo:
                data = await fetch(args.host, port)
                ok = hashlib.sha256(data).digest() == hashlib.sha256(blob).digest()
                print("fetched", len(data), "bytes, identical:", ok)
                os.unlink(path)
            else:
                await server.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--file")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--demo", action="store_true")
    parser.add_argument("--registered", action="store_true")
    uringloop.run(main(parser.parse_args()))
