"""A blob server that sends a file from an mmap with write_zerocopy(): no
copy into Python objects, the mapping held until the kernel lets go of it;
--demo fetches it back through the loop, checks the bytes and prints the
transport's zero-copy statistics.

    python3 examples/zerocopy_blob_server.py --demo
    python3 examples/zerocopy_blob_server.py --file big.iso --port 25001

Protocol: the client sends one line "GET\\n"; the server answers with the
8-byte big-endian length and the file's bytes, then closes.  Over loopback
the kernel copies anyway and auto mode knows it (zerocopy=False in the
result); towards a real NIC the same code sends without copying.
"""
import argparse
import asyncio
import hashlib
import mmap
import os
import tempfile

import uringloop


class BlobProtocol(asyncio.Protocol):
    def __init__(self, blob):
        self.blob = blob

    def connection_made(self, transport):
        self.transport = transport
        self.request = b""

    def data_received(self, data):
        self.request += data
        if b"\n" not in self.request:
            return
        self.transport.write(len(self.blob).to_bytes(8, "big"))
        done = self.transport.write_zerocopy(self.blob)
        done.add_done_callback(self.sent)

    def sent(self, future):
        if not future.cancelled() and future.exception() is None:
            print("sent", future.result(), "stats:", self.transport.get_extra_info("zerocopy"))
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
        server = await loop.create_server(lambda: BlobProtocol(blob), args.host, args.port)
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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--demo", action="store_true")
    uringloop.run(main(parser.parse_args()))
