"""An aiohttp app for the gunicorn test: says which process and loop served."""
import asyncio
import os

from aiohttp import web


async def who(request):
    loop = asyncio.get_running_loop()
    return web.Response(text=f"{os.getpid()} {type(loop).__module__}.{type(loop).__name__}")


async def make_app():
    app = web.Application()
    app.router.add_get("/", who)
    return app
