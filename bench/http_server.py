"""aiohttp hello-world server for the HTTP benchmark, on a chosen loop.

    python3 bench/http_server.py --loop uringloop
Prints "READY <port>"; exits on SIGTERM.
"""
import argparse
import asyncio
import signal

from aiohttp import web

from echo_server import loop_factory


async def hello(request):
    return web.Response(text="Hello, World!")


async def main():
    app = web.Application()
    app.router.add_get("/", hello)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    stop = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set_result, None)
    print(f"READY {port}", flush=True)
    await stop
    await runner.cleanup()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--loop", default="uringloop")
    args = parser.parse_args()
    with asyncio.Runner(loop_factory=loop_factory(args.loop)) as runner:
        runner.run(main())
