"""A bare ASGI app for the uvicorn and gunicorn tests.

    /          the class of the loop that served
    /pid       "<pid> <loop class>"
    /slow?s=N  the same as /pid, after N seconds of asyncio.sleep
               (&mark=PATH: a line is added to PATH as the wait begins)
"""
import asyncio
import os
from urllib.parse import parse_qs


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    loop = asyncio.get_running_loop()
    name = f"{type(loop).__module__}.{type(loop).__name__}"
    if scope["path"] == "/slow":
        query = parse_qs(scope["query_string"].decode())
        if "mark" in query:
            with open(query["mark"][0], "a") as f:
                f.write("waiting\n")
        await asyncio.sleep(float(query.get("s", ["1"])[0]))
    body = name if scope["path"] == "/" else f"{os.getpid()} {name}"
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": body.encode()})
