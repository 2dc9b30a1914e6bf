"""Echo server for the benchmarks, in three styles on a chosen loop.

    python3 bench/echo_server.py --loop uringloop --style protocol --port 0
    python3 bench/echo_server.py --tls CERT,KEY     # the protocol style over TLS

Prints "READY <port>" when listening; on SIGTERM prints one JSON line with
the ring counters (uringloop only) and exits.
"""
import argparse
import asyncio
import json
import os
import signal
import socket
import ssl
import sys


class EchoProtocol(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.transport.write(data)


async def streams_handler(reader, writer):
    try:
        while data := await reader.read(102400):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    writer.close()


async def sock_handler(loop, conn):
    with conn:
        try:
            while data := await loop.sock_recv(conn, 102400):
                await loop.sock_sendall(conn, data)
        except ConnectionError:
            pass


async def main(args):
    loop = asyncio.get_running_loop()
    stop = loop.create_future()
    loop.add_signal_handler(signal.SIGTERM, stop.set_result, None)
    if args.tls:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(*args.tls.split(","))
        server = await loop.create_server(EchoProtocol, "127.0.0.1", args.port,
                                          ssl=context)
        port = server.sockets[0].getsockname()[1]
    elif args.style == "protocol":
        server = await loop.create_server(EchoProtocol, "127.0.0.1", args.port)
        port = server.sockets[0].getsockname()[1]
    elif args.style == "streams":
        server = await asyncio.start_server(streams_handler, "127.0.0.1", args.port)
        port = server.sockets[0].getsockname()[1]
    else:
        listener = socket.create_server(("127.0.0.1", args.port))
        listener.setblocking(False)
        port = listener.getsockname()[1]

        async def accept_loop():
            while True:
                conn, _ = await loop.sock_accept(listener)
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                loop.create_task(sock_handler(loop, conn))
        server = loop.create_task(accept_loop())
    print(f"READY {port}", flush=True)
    await stop
    stats = loop.stats() if hasattr(loop, "stats") else {}
    print(json.dumps(stats), flush=True)


# (uringloop.shortcuts() lists them; named here so that choosing one does
# not import uringloop before the setting is made)
SHORTCUT_NAMES = ("kept_methods", "spare_bytes", "handle_slots", "socket_objects",
                  "loop_methods", "run_once_tag", "ready_queue")


def loop_factory(name):
    if name.startswith("uringloop-no"):
        # uringloop-noshortcuts: every CPython shortcut off (docs/design.md);
        # uringloop-no-NAME: all but that one (the setting is read at import)
        off = name[len("uringloop-no"):].lstrip("-")
        os.environ["URINGLOOP_SHORTCUTS"] = "0" if off == "shortcuts" else ",".join(
            n for n in SHORTCUT_NAMES if n != off)
        name = "uringloop"
    if name == "uringloop":
        import uringloop
        return uringloop.new_event_loop
    if name == "uvloop":
        import uvloop
        return uvloop.new_event_loop
    if name == "rloop":
        import rloop
        return rloop.new_event_loop
    return asyncio.new_event_loop


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--loop", default="uringloop",
                        choices=["asyncio", "uvloop", "uringloop", "uringloop-noshortcuts", "rloop"]
                        + [f"uringloop-no-{n}" for n in SHORTCUT_NAMES])
    parser.add_argument("--style", default="protocol",
                        choices=["protocol", "streams", "sock"])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--tls", metavar="CERT,KEY",
                        help="serve the protocol style over TLS with this certificate")
    args = parser.parse_args()
    with asyncio.Runner(loop_factory=loop_factory(args.loop)) as runner:
        runner.run(main(args))
    sys.exit(0)
