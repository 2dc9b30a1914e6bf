"""aiohttp server and client end to end over loopback, on uringloop and on
the selector loop alike: routes, a streamed response, a large upload,
websockets."""
import asyncio
import hashlib
import os

import pytest


aiohttp = pytest.importorskip("aiohttp")
from aiohttp import web  # noqa: E402


def make_app():
    async def hello(request):
        return web.Response(text="Hello, uringloop")

    async def echo_body(request):
        body = await request.read()
        return web.Response(body=hashlib.sha256(body).hexdigest().encode())

    async def stream(request):
        resp = web.StreamResponse()
        await resp.prepare(request)
        for i in range(100):
            await resp.write(b"chunk %03d\n" % i)
        await resp.write_eof()
        return resp

    async def ws(request):
        sock = web.WebSocketResponse()
        await sock.prepare(request)
        async for msg in sock:
            if msg.type == aiohttp.WSMsgType.TEXT:
                await sock.send_str(msg.data.upper())
            elif msg.type == aiohttp.WSMsgType.BINARY:
                await sock.send_bytes(msg.data[::-1])
        return sock

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_get("/", hello)
    app.router.add_post("/sha", echo_body)
    app.router.add_get("/stream", stream)
    app.router.add_get("/ws", ws)
    return app


async def serve_and_fetch():
    runner = web.AppRunner(make_app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(base + "/") as r:
                assert r.status == 200
                assert await r.text() == "Hello, uringloop"

            # many concurrent requests over a keep-alive pool
            async def one(i):
                async with session.get(base + "/") as r:
                    return await r.text()
            results = await asyncio.gather(*(one(i) for i in range(200)))
            assert set(results) == {"Hello, uringloop"}

            payload = os.urandom(5 * 1024 * 1024 + 3)
            async with session.post(base + "/sha", data=payload) as r:
                assert (await r.read()).decode() == hashlib.sha256(payload).hexdigest()

            async with session.get(base + "/stream") as r:
                lines = (await r.read()).splitlines()
                assert lines == [b"chunk %03d" % i for i in range(100)]

            async with session.ws_connect(base + "/ws") as sock:
                await sock.send_str("hello")
                assert (await sock.receive()).data == "HELLO"
                await sock.send_bytes(b"abc")
                assert (await sock.receive()).data == b"cba"
    finally:
        await runner.cleanup()


def test_aiohttp_server_and_client(any_loop):
    any_loop.run_until_complete(asyncio.wait_for(serve_and_fetch(), 60))
