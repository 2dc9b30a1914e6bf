"""Stream helpers the behaviour files share: an echo server, a collecting
protocol, and run_on_uringloop(coro, timeout).

    from streams import Collect, echo_server      # (helpers/ is on sys.path)
"""
import asyncio

import uringloop


def run_on_uringloop(coro, timeout=60):
    return uringloop.run(asyncio.wait_for(coro, timeout))


class Collect(asyncio.Protocol):
    """Collects what arrives; `done` resolves at connection_lost."""

    def __init__(self):
        self.data = bytearray()
        self.eof = False
        self.done = asyncio.get_running_loop().create_future()
        self.events = []

    def connection_made(self, transport):
        self.transport = transport
        self.events.append("made")

    def data_received(self, data):
        assert isinstance(data, bytes)
        self.data += data

    def eof_received(self):
        self.eof = True
        self.events.append("eof")

    def connection_lost(self, exc):
        self.events.append("lost")
        if not self.done.done():
            self.done.set_result(exc)


async def echo_server(loop, **kwargs):
    handlers = set()

    async def handle(reader, writer):
        handlers.add(asyncio.current_task())
        try:
            while data := await reader.read(1 << 20):
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, **kwargs)
    server.handlers = handlers      # to wait for before the loop ends
    return server, server.sockets[0].getsockname()
