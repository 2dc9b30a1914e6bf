"""An aiohttp app for the gunicorn tests: says which process and loop
served; /block?s=N holds its worker's loop for N seconds (a busy worker; with
&mark=PATH it adds a line to PATH as it begins)."""
import asyncio
import os
import time

from aiohttp import web


async def who(request):
    loop = asyncio.get_running_loop()
    return web.Response(text=f"{os.getpid()} {type(loop).__module__}.{type(loop).__name__}")


async def block(request):
    if "mark" in request.query:
        with open(request.query["mark"], "a") as f:
            f.write("blocking\n")
    time.sleep(float(request.query.get("s", "1")))      # the whole loop waits
    return web.Response(text=f"{os.getpid()}")


async def make_app():
    app = web.Application()
    app.router.add_get("/", who)
    app.router.add_get("/block", block)
    return app


def make_app_plain():
    """The same app from a plain `def` factory (aiohttp's own worker takes
    only an `async def` one)."""
    app = web.Application()
    app.router.add_get("/", who)
    return app
