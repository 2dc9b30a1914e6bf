"""An upload server that hashes what it receives without copying it into
Python objects, on a NIC queue bound with io_uring zero-copy receive (zcrx).
Its protocol has zerocopy_received(piece): each piece is a read-only view of
the kernel's area, hashed in place and given back when the callback returns.
Where zcrx is refused (no capable NIC, no CAP_NET_ADMIN, loopback) the same
server runs on ordinary receives and says why; data_received takes over.

    python3 examples/zcrx_upload_server.py --demo          # loopback: falls back
    python3 examples/zcrx_upload_server.py --interface eth0 --queue 8 --port 25002

Protocol: the client sends bytes and shuts down its side; the server
answers with the SHA-256 of everything it received and closes.  Prepare the
NIC first (docs/zerocopy-receive.md): header/data split on and the
port's flows steered to --queue.
"""
import argparse
import asyncio
import hashlib
import os
import socket

import uringloop


class HashUpload(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport
        self.digest = hashlib.sha256()
        self.pieces = self.copied = 0

    def zerocopy_received(self, piece):
        self.digest.update(piece)          # reads the area in place
        self.pieces += 1

    def data_received(self, data):
        self.digest.update(data)
        self.copied += len(data)

    def eof_received(self):
        self.transport.write(self.digest.hexdigest().encode() + b"\n")
        self.transport.close()


def make_listener(host, port, zcrx):
    listener = socket.create_server((host, port))
    uringloop.set_zerocopy(listener, receive=zcrx)
    return listener


async def demo():
    loop = asyncio.get_running_loop()
    zcrx = uringloop.ZeroCopyReceive("lo", queue=0, area_size=4 << 20)
    listener = make_listener("127.0.0.1", 0, zcrx)
    server = await loop.create_server(HashUpload, sock=listener)
    payload = os.urandom(3 << 20)
    reader, writer = await asyncio.open_connection(*listener.getsockname())
    writer.write(payload)
    writer.write_eof()
    answer = (await reader.readline()).decode().strip()
    writer.close()
    server.close()
    await server.wait_closed()
    print(f"sha256 matches: {answer == hashlib.sha256(payload).hexdigest()}")
    print(f"zero-copy receive active: {zcrx.active}; reason: {zcrx.reason}")
    zcrx.close()


async def serve(args):
    loop = asyncio.get_running_loop()
    zcrx = uringloop.ZeroCopyReceive(args.interface, queue=args.queue,
                                     area_size=args.area_mib << 20)
    listener = make_listener(args.host, args.port, zcrx)
    server = await loop.create_server(HashUpload, sock=listener)
    zcrx.register()
    print(f"listening on {listener.getsockname()}; zero-copy receive: "
          f"{'on' if zcrx.active else 'off: ' + str(zcrx.reason)}", flush=True)
    async with server:
        await server.serve_forever()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--demo", action="store_true")
    parser.add_argument("--interface", default="eth0")
    parser.add_argument("--queue", type=int, default=0)
    parser.add_argument("--area-mib", type=int, default=64)
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=25002)
    args = parser.parse_args()
    uringloop.run(demo() if args.demo else serve(args))


if __name__ == "__main__":
    main()
