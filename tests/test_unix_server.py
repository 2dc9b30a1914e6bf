"""create_unix_server()'s socket file (issue #58, item 6): from CPython 3.13
on, stopping the server removes the file it bound, unless cleanup_socket
is False or the file was replaced meanwhile; before 3.13 the file stays and
cleanup_socket is no argument at all.  Each scenario runs on the selector
loop too, which gives the same answer on the Python that runs it."""
import asyncio
import os
import socket
import sys

import pytest

from protocols import Collect



CLEANS_UP = sys.version_info >= (3, 13)


@pytest.mark.parametrize("how", ["default", "cleanup-false", "replaced", "sock="])
def test_the_socket_file_after_the_server_stops(any_loop, tmp_path, how):
    loop = any_loop
    path = str(tmp_path / "s")

    async def main():
        kwargs = {}
        if how == "cleanup-false":
            if not CLEANS_UP:
                with pytest.raises(TypeError):
                    await loop.create_unix_server(asyncio.Protocol, path, cleanup_socket=False)
                return "no such argument"
            kwargs["cleanup_socket"] = False
        if how == "sock=":
            sock = socket.socket(socket.AF_UNIX)
            sock.bind(path)
            server = await loop.create_unix_server(asyncio.Protocol, sock=sock)
        else:
            server = await loop.create_unix_server(asyncio.Protocol, path, **kwargs)
        reader, writer = await asyncio.open_unix_connection(path)
        writer.close()
        await writer.wait_closed()
        if how == "replaced":
            os.unlink(path)
            other = socket.socket(socket.AF_UNIX)
            other.bind(path)
        server.close()
        await server.wait_closed()
        if how == "replaced":
            other.close()
        return os.path.exists(path)
    there = loop.run_until_complete(asyncio.wait_for(main(), 10))
    if how == "cleanup-false":
        assert there in (True, "no such argument")
    elif how == "replaced":
        assert there is True            # another file: not the server's to remove
    else:
        assert there is (not CLEANS_UP)


def test_unix_server_and_connection(any_loop, tmp_path):
    path = str(tmp_path / "sock")

    async def main():
        loop = asyncio.get_running_loop()
        received = Collect()
        server = await loop.create_unix_server(lambda: received, path)
        async with server:
            tr, cli = await loop.create_unix_connection(Collect, path)
            tr.write(b"over unix")
            tr.close()
            await received.done
            assert bytes(received.data) == b"over unix"

    any_loop.run_until_complete(asyncio.wait_for(main(), 60))
