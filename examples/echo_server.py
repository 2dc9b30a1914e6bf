"""A TCP echo server on uringloop with the loop's sock_* methods; --demo also
runs clients against it, checks every echoed byte and prints ring counters.

    python3 examples/echo_server.py --demo          # serve, test, exit
    python3 examples/echo_server.py --port 25000    # serve until Ctrl-C
"""
import argparse
import asyncio
import os
import signal
import socket

import uringloop


async def echo(loop, conn):
    with conn:
        while data := await loop.sock_recv(conn, 65536):
            await loop.sock_sendall(conn, data)


async def serve(listener, stop):
    loop = asyncio.get_running_loop()
    tasks = set()
    accept = asyncio.ensure_future(loop.sock_accept(listener))
    while True:
        done, _ = await asyncio.wait({accept, stop}, return_when=asyncio.FIRST_COMPLETED)
        if stop in done:
            accept.cancel()
            break
        conn, _ = accept.result()
        task = asyncio.create_task(echo(loop, conn))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        accept = asyncio.ensure_future(loop.sock_accept(listener))
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def client(loop, address, rounds, size):
    sock = socket.socket()
    sock.setblocking(False)
    with sock:
        await loop.sock_connect(sock, address)
        for _ in range(rounds):
            payload = os.urandom(size)
            await loop.sock_sendall(sock, payload)
            got = bytearray()
            while len(got) < size:
                got += await loop.sock_recv(sock, 65536)
            assert got == payload, "echo mismatch"


async def main(args):
    loop = asyncio.get_running_loop()
    listener = socket.create_server((args.host, args.port), reuse_port=False)
    listener.setblocking(False)
    address = listener.getsockname()
    stop = loop.create_future()
    loop.add_signal_handler(signal.SIGINT, lambda: stop.done() or stop.set_result(None))
    print(f"echo server on {address[0]}:{address[1]} ({type(loop).__module__}.{type(loop).__name__})")
    server = asyncio.create_task(serve(listener, stop))
    if args.demo:
        await asyncio.gather(*(client(loop, address, args.rounds, args.size)
                               for _ in range(args.clients)))
        n = args.clients * args.rounds
        print(f"{n} echoes of {args.size} bytes verified")
        if isinstance(loop, uringloop.Loop):
            print("ring counters:", loop.stats())
        stop.set_result(None)
    await server
    listener.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--demo", action="store_true")
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--size", type=int, default=1024)
    uringloop.run(main(parser.parse_args()))
