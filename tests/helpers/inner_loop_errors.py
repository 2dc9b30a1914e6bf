"""Run by tests/test_loop.py::test_a_loop_error_nobody_expected_fails_the_test
(through tests/conftest.py's no_unexpected_loop_errors): the first test
must fail, the second must pass."""
import asyncio

import pytest

import uringloop


async def _raise_in_data_received():
    loop = asyncio.get_running_loop()
    done = loop.create_future()

    class Broken(asyncio.Protocol):
        def data_received(self, data):
            raise RuntimeError("a bug in the protocol")

        def connection_lost(self, exc):
            done.set_result(None)

    server = await loop.create_server(Broken, "127.0.0.1", 0)
    _, writer = await asyncio.open_connection(*server.sockets[0].getsockname())
    writer.write(b"x")
    await asyncio.wait_for(done, 5)
    writer.close()
    server.close()


def test_unexpected():
    uringloop.run(_raise_in_data_received())


@pytest.mark.loop_errors_expected
def test_expected():
    uringloop.run(_raise_in_data_received())
