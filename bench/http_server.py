"""Hello-world HTTP server for the HTTP benchmark, on a chosen loop: an
aiohttp app, or a raw asyncio.Protocol with the httptools parser.  With
--static DIR, the aiohttp app also serves DIR's files at /static/<name>
with web.FileResponse (bench/run_static.py).

    python3 bench/http_server.py --loop uringloop [--app aiohttp|raw] [--static DIR]
Prints "READY <port>"; exits on SIGTERM.
"""
import argparse
import asyncio
import signal

from aiohttp import web

from echo_server import loop_factory


async def hello(request):
    return web.Response(text="Hello, World!")


RAW_RESPONSE = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\n"
                b"Content-Length: 13\r\n\r\nHello, World!")


class RawHttp(asyncio.Protocol):
    """The same answer without a framework: httptools parses, the protocol
    writes one fixed response per request (keep-alive, as wrk asks)."""

    def connection_made(self, transport):
        import httptools
        self.transport = transport
        self.parser = httptools.HttpRequestParser(self)
        self.parse_error = httptools.HttpParserError

    def data_received(self, data):
        try:
            self.parser.feed_data(data)
        except self.parse_error:
            self.transport.close()

    def on_message_complete(self):
        self.transport.write(RAW_RESPONSE)
        if not self.parser.should_keep_alive():
            self.transport.close()


async def main_raw():
    loop = asyncio.get_running_loop()
    server = await loop.create_server(RawHttp, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    stop = loop.create_future()
    loop.add_signal_handler(signal.SIGTERM, stop.set_result, None)
    print(f"READY {port}", flush=True)
    await stop
    server.close()


async def main(static=None):
    app = web.Application()
    app.router.add_get("/", hello)
    if static:
        async def serve_file(request):
            return web.FileResponse(f"{static}/{request.match_info['name']}")
        app.router.add_get("/static/{name}", serve_file)
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
    parser.add_argument("--app", default="aiohttp", choices=["aiohttp", "raw"])
    parser.add_argument("--static")
    args = parser.parse_args()
    with asyncio.Runner(loop_factory=loop_factory(args.loop)) as runner:
        runner.run(main(args.static) if args.app == "aiohttp" else main_raw())
