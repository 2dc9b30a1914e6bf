"""A bare ASGI app for the uvicorn test: says which loop served."""
import asyncio


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    loop = asyncio.get_running_loop()
    body = f"{type(loop).__module__}.{type(loop).__name__}".encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": body})
