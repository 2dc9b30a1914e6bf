"""sock_* methods: real sockets over TCP (IPv4, IPv6), Unix streams and UDP,
checked byte for byte; cancellation with the kernel holding the buffer."""
import asyncio
import os
import socket
import tempfile

import pytest

import uringloop
from conftest import recv_until_eof, turns, until

HAS_IPV6 = socket.has_ipv6 and os.path.exists("/proc/net/if_inet6")


def nonblocking(*socks):
    for s in socks:
        s.setblocking(False)
    return socks


async def tcp_pair(loop, family=socket.AF_INET):
    host = "::1" if family == socket.AF_INET6 else "127.0.0.1"
    srv = socket.socket(family, socket.SOCK_STREAM)
    srv.bind((host, 0))
    srv.listen()
    cli = socket.socket(family, socket.SOCK_STREAM)
    nonblocking(srv, cli)
    accept = asyncio.ensure_future(loop.sock_accept(srv))
    await loop.sock_connect(cli, srv.getsockname())
    conn, addr = await accept
    assert addr[:2] == cli.getsockname()[:2]
    srv.close()
    return cli, conn


async def unix_pair(loop, path):
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen()
    cli = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    nonblocking(srv, cli)
    accept = asyncio.ensure_future(loop.sock_accept(srv))
    await loop.sock_connect(cli, path)
    conn, addr = await accept
    assert addr == ""   # unbound client, as socket.accept() says
    srv.close()
    return cli, conn


async def transfer(loop, a, b, payload, chunk=65536):
    sender = asyncio.ensure_future(loop.sock_sendall(a, payload))
    got = bytearray()
    while len(got) < len(payload):
        data = await loop.sock_recv(b, chunk)
        assert data, "EOF before all data arrived"
        got += data
    await sender
    return bytes(got)


@pytest.mark.parametrize("family", [
    socket.AF_INET,
    pytest.param(socket.AF_INET6, marks=pytest.mark.skipif(not HAS_IPV6, reason="no IPv6")),
])
def test_tcp_roundtrip_all_methods(any_loop, family):
    async def main():
        cli, conn = await tcp_pair(any_loop, family)
        with cli, conn:
            payload = os.urandom(3 * 1024 * 1024 + 17)
            assert await transfer(any_loop, cli, conn, payload) == payload
            assert await transfer(any_loop, conn, cli, payload[:100000]) == payload[:100000]
            await any_loop.sock_sendall(cli, b"into")
            buf = bytearray(10)
            n = await any_loop.sock_recv_into(conn, buf)
            assert buf[:n] == b"into"[:n]
            cli.shutdown(socket.SHUT_WR)
            rest = await recv_until_eof(any_loop, conn, 10)
            assert (bytes(buf[:n]) + rest) == b"into"

    any_loop.run_until_complete(asyncio.wait_for(main(), 60))


def test_unix_stream_roundtrip(any_loop):
    async def main():
        with tempfile.TemporaryDirectory() as d:
            cli, conn = await unix_pair(any_loop, os.path.join(d, "s"))
            with cli, conn:
                payload = os.urandom(1 << 20)
                assert await transfer(any_loop, cli, conn, payload) == payload

    any_loop.run_until_complete(asyncio.wait_for(main(), 60))


def test_unix_abstract_namespace_connect(any_loop):
    async def main():
        name = b"\0uringloop-test-%d" % os.getpid()
        cli, conn = await unix_pair(any_loop, name)
        with cli, conn:
            assert cli.getpeername() == name
            assert await transfer(any_loop, conn, cli, b"abstract") == b"abstract"

    any_loop.run_until_complete(asyncio.wait_for(main(), 30))


def test_udp_sendto_recvfrom(any_loop):
    async def main():
        a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        with a, b:
            a.bind(("127.0.0.1", 0))
            b.bind(("127.0.0.1", 0))
            nonblocking(a, b)
            n = await any_loop.sock_sendto(a, b"x" * 1000, b.getsockname())
            assert n == 1000
            data, addr = await any_loop.sock_recvfrom(b, 4096)
            assert data == b"x" * 1000 and addr == a.getsockname()
            await any_loop.sock_sendto(b, b"reply", a.getsockname())
            buf = bytearray(100)
            n, addr = await any_loop.sock_recvfrom_into(a, buf)
            assert buf[:n] == b"reply" and addr == b.getsockname()
            await any_loop.sock_sendto(b, b"truncated-datagram", a.getsockname())
            n, addr = await any_loop.sock_recvfrom_into(a, buf, 4)
            assert buf[:n] == b"trun"
            with pytest.raises(ValueError):
                await any_loop.sock_recvfrom_into(a, buf, 1000)

    any_loop.run_until_complete(asyncio.wait_for(main(), 30))


@pytest.mark.skipif(not HAS_IPV6, reason="no IPv6")
def test_udp_ipv6_address_form(any_loop):
    async def main():
        a = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        b = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        with a, b:
            a.bind(("::1", 0))
            b.bind(("::1", 0))
            nonblocking(a, b)
            await any_loop.sock_sendto(a, b"v6", b.getsockname())
            data, addr = await any_loop.sock_recvfrom(b, 100)
            assert data == b"v6" and addr == a.getsockname()

    any_loop.run_until_complete(asyncio.wait_for(main(), 30))


def test_sendto_resolves_names(any_loop):
    async def main():
        a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        with a, b:
            b.bind(("127.0.0.1", 0))
            nonblocking(a, b)
            await any_loop.sock_sendto(a, b"named", ("localhost", b.getsockname()[1]))
            data, _ = await any_loop.sock_recvfrom(b, 100)
            assert data == b"named"

    any_loop.run_until_complete(asyncio.wait_for(main(), 30))


def test_connect_refused_is_connection_refused_error(any_loop):
    async def main():
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()
        s = socket.socket()
        s.setblocking(False)
        with s, pytest.raises(ConnectionRefusedError):
            await any_loop.sock_connect(s, ("127.0.0.1", port))

    any_loop.run_until_complete(asyncio.wait_for(main(), 30))


def test_errors_and_bad_arguments(any_loop):
    async def main():
        a, b = socket.socketpair()
        nonblocking(a, b)
        with pytest.raises(ValueError):
            await any_loop.sock_recv(a, -1)
        with pytest.raises(TypeError):
            await any_loop.sock_recv(a, "10")
        with pytest.raises(TypeError):
            await any_loop.sock_sendall(a, "not bytes")
        with pytest.raises(TypeError):
            await any_loop.sock_recv_into(a, b"read-only")
        assert await any_loop.sock_recv(a, 0) == b""
        await any_loop.sock_sendall(a, b"")
        b.close()
        with pytest.raises((BrokenPipeError, ConnectionResetError)):
            for _ in range(100):
                await any_loop.sock_sendall(a, b"x" * 65536)
        a.close()
        with pytest.raises(OSError):
            await any_loop.sock_recv(a, 10)

    any_loop.run_until_complete(asyncio.wait_for(main(), 30))


def test_peer_reset_is_connection_reset_error(any_loop):
    async def main():
        cli, conn = await tcp_pair(any_loop)
        with cli, conn:
            # SO_LINGER 0: close sends RST
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
            conn.close()
            with pytest.raises(ConnectionResetError):
                await any_loop.sock_recv(cli, 10)

    any_loop.run_until_complete(asyncio.wait_for(main(), 30))


def test_cancelled_recv_loses_no_data(any_loop):
    """A receive cancelled in the step its data arrives leaves the data in
    the socket: the next receive gets it."""
    async def main():
        a, b = socket.socketpair()
        nonblocking(a, b)
        with a, b:
            for i in range(50):
                task = asyncio.ensure_future(any_loop.sock_recv(b, 100))
                await asyncio.sleep(0)
                a.send(b"%04d" % i)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                assert await any_loop.sock_recv(b, 100) == b"%04d" % i

    any_loop.run_until_complete(asyncio.wait_for(main(), 30))


def test_a_waiting_recv_into_leaves_its_buffer_free(any_loop):
    """While sock_recv_into() waits for data, its buffer is not exported
    (the kernel is not given it): a bytearray can be resized, as on the
    stdlib loop; the data then goes where the buffer is when it comes."""
    async def main():
        a, b = socket.socketpair()
        nonblocking(a, b)
        with a, b:
            buf = bytearray(64)
            task = asyncio.ensure_future(any_loop.sock_recv_into(b, buf))
            await turns()                   # it waits
            buf.extend(b"x")
            a.send(b"data")
            n = await asyncio.wait_for(task, 5)
            return n, bytes(buf[:n]), len(buf)
    assert any_loop.run_until_complete(main()) == (4, b"data", 65)


def test_cancelled_accept_keeps_the_connection(any_loop):
    async def main():
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        srv.setblocking(False)
        cli = socket.socket()
        with srv, cli:
            task = asyncio.ensure_future(any_loop.sock_accept(srv))
            await asyncio.sleep(0)
            cli.connect(srv.getsockname())
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            conn, _ = await any_loop.sock_accept(srv)
            with conn:
                assert conn.getpeername() == cli.getsockname()
                assert conn.gettimeout() == 0

    any_loop.run_until_complete(asyncio.wait_for(main(), 30))


def test_cancel_connect_then_retry(any_loop):
    """A sock_connect() cancelled at its first await leaves nothing behind
    that hinders the next: each time, a fresh socket then connects, and the
    server accepts that connection and reads the byte it sent (behind the
    cancelled attempt's connection, which may have been queued first)."""
    async def main():
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(32)
        srv.setblocking(False)
        address = srv.getsockname()
        served = []
        with srv:
            for i in range(10):
                s = socket.socket()
                s.setblocking(False)
                with s:
                    t = asyncio.ensure_future(any_loop.sock_connect(s, address))
                    await asyncio.sleep(0)
                    t.cancel()
                    try:
                        await t
                    except asyncio.CancelledError:
                        pass
                retry = socket.socket()
                retry.setblocking(False)
                with retry:
                    await any_loop.sock_connect(retry, address)
                    await any_loop.sock_sendall(retry, b"%d;" % i)
                    while True:             # the cancelled one's, if queued, is empty
                        conn, _ = await any_loop.sock_accept(srv)
                        with conn:
                            got = await any_loop.sock_recv(conn, 16)
                        if got:
                            served.append(got)
                            break
        return served

    served = any_loop.run_until_complete(asyncio.wait_for(main(), 30))
    assert served == [b"%d;" % i for i in range(10)]


def test_sock_sendfile(any_loop, tmp_path):
    payload = os.urandom(700_000)
    path = tmp_path / "blob"
    path.write_bytes(payload)

    async def main():
        cli, conn = await tcp_pair(any_loop)
        with cli, conn, open(path, "rb") as f:
            async def receive(n):
                got = bytearray()
                while len(got) < n:
                    got += await any_loop.sock_recv(conn, 65536)
                return bytes(got)

            reader = asyncio.ensure_future(receive(len(payload)))
            sent = await any_loop.sock_sendfile(cli, f)
            assert sent == len(payload)
            assert f.tell() == len(payload)
            assert await reader == payload

            reader = asyncio.ensure_future(receive(1000))
            sent = await any_loop.sock_sendfile(cli, f, offset=5000, count=1000)
            assert sent == 1000 and f.tell() == 6000
            assert await reader == payload[5000:6000]

    any_loop.run_until_complete(asyncio.wait_for(main(), 30))


def test_many_concurrent_operations_overflow_the_submission_queue(uloop):
    """More requests in one iteration than the SQ has entries."""
    n = uloop.stats()["sq_entries"] * 2 + 10

    async def main():
        pairs = [socket.socketpair() for _ in range(n // 2)]
        try:
            for a, b in pairs:
                nonblocking(a, b)
            recvs = [asyncio.ensure_future(uloop.sock_recv(b, 10)) for a, b in pairs]
            sends = [asyncio.ensure_future(uloop.sock_sendall(a, b"%d" % i))
                     for i, (a, b) in enumerate(pairs)]
            await asyncio.gather(*sends)
            got = await asyncio.gather(*recvs)
            assert got == [b"%d" % i for i in range(len(pairs))]
        finally:
            for a, b in pairs:
                a.close()
                b.close()

    uloop.run_until_complete(asyncio.wait_for(main(), 60))


# its cancelled tasks never run again: "Task was destroyed but it is pending!"
@pytest.mark.loop_errors_expected
def test_close_with_operations_in_flight(uloop):
    a, b = socket.socketpair()
    nonblocking(a, b)
    buf = bytearray(100)

    async def main():
        tasks = [asyncio.ensure_future(uloop.sock_recv(b, 10)),
                 asyncio.ensure_future(uloop.sock_recv_into(a, buf))]
        await until(lambda: uloop.stats()["ops_in_flight"] >= 3, "the receives")
        return tasks

    tasks = uloop.run_until_complete(main())
    assert uloop.stats()["ops_in_flight"] >= 3
    for t in tasks:
        t.cancel()
    uloop.close()
    assert uloop.stats()["ops_in_flight"] == 0
    buf.extend(b"free")     # the kernel let go of it
    a.close()
    b.close()


def test_cancelled_recvfrom_keeps_the_datagram(any_loop):
    async def main():
        a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        with a, b:
            a.bind(("127.0.0.1", 0))
            b.bind(("127.0.0.1", 0))
            nonblocking(a, b)
            for i in range(30):
                task = asyncio.ensure_future(any_loop.sock_recvfrom(b, 100))
                await asyncio.sleep(0)
                a.sendto(b"dgram %d" % i, b.getsockname())
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                got = await any_loop.sock_recvfrom(b, 100)
                assert got == (b"dgram %d" % i, a.getsockname())

    any_loop.run_until_complete(asyncio.wait_for(main(), 30))


class Swappable(socket.socket):
    """A socket whose methods a test replaces on the instance (a socket
    subclass has an instance dict; Mock(sock) does the same in CPython's
    test_sendto_blocking)."""


@pytest.mark.parametrize("method", ["recv", "recv_into", "recvfrom", "sendto", "accept"])
def test_a_retry_calls_the_method_the_socket_has_now(any_loop, method):
    """A sock_* call that met BlockingIOError tries again with the socket's
    method as it is then, looked up anew, as the selector loop does: here
    the first one always refuses and a callback puts the real one back."""
    async def main():
        loop = asyncio.get_running_loop()
        kind = socket.SOCK_STREAM if method == "accept" else socket.SOCK_DGRAM
        sock = Swappable(socket.AF_INET, kind)
        sock.setblocking(False)
        sock.bind(("127.0.0.1", 0))
        peer = socket.socket(socket.AF_INET, kind)
        if method == "accept":
            sock.listen(1)
            peer.connect(sock.getsockname())
        else:
            peer.bind(("127.0.0.1", 0))
            peer.sendto(b"ping", sock.getsockname())
        calls = []

        def refuse(*args):
            calls.append(args)
            raise BlockingIOError
        setattr(sock, method, refuse)
        loop.call_soon(delattr, sock, method)
        try:
            if method == "recv":
                result = await loop.sock_recv(sock, 100)
            elif method == "recv_into":
                buf = bytearray(100)
                result = bytes(buf[:await loop.sock_recv_into(sock, buf)])
            elif method == "recvfrom":
                result = (await loop.sock_recvfrom(sock, 100))[0]
            elif method == "sendto":
                # (a mock's family is no address family: the socket's
                # sendto() itself is called, not the ring's)
                sock.__class__ = type("NoFamily", (Swappable,), {"family": -1})
                result = await loop.sock_sendto(sock, b"pong", peer.getsockname())
                result = (result, peer.recv(10))
            else:
                conn, _ = await loop.sock_accept(sock)
                result = conn.getpeername() == peer.getsockname()
                conn.close()
        finally:
            sock.close()
            peer.close()
        return len(calls), result
    calls, result = any_loop.run_until_complete(asyncio.wait_for(main(), 10))
    assert calls == 1
    assert result == {"recv": b"ping", "recv_into": b"ping", "recvfrom": b"ping",
                      "sendto": (4, b"pong"), "accept": True}[method]


def _error_scenarios(loop, tmp_path):
    """What each failing call raises, as (type name, args)."""
    outcomes = {}

    async def outcome(name, make):
        try:
            result = make()
            if asyncio.iscoroutine(result):
                await result
        except Exception as exc:
            outcomes[name] = (type(exc).__name__, exc.args)
        else:
            outcomes[name] = "no error"

    async def main():
        missing = str(tmp_path / "missing.sock")
        not_listening = str(tmp_path / "bound.sock")
        bound = socket.socket(socket.AF_UNIX)
        bound.bind(not_listening)
        closed_port = socket.socket()
        closed_port.bind(("127.0.0.1", 0))
        port = closed_port.getsockname()[1]
        for name, family, address in [
                ("connect to a missing path", socket.AF_UNIX, missing),
                ("connect to a path nobody listens on", socket.AF_UNIX, not_listening),
                ("connect to a closed port", socket.AF_INET, ("127.0.0.1", port))]:
            s = socket.socket(family)
            s.setblocking(False)
            with s:
                await outcome(name, lambda: loop.sock_connect(s, address))
        await outcome("open_unix_connection to a missing path",
                      lambda: asyncio.open_unix_connection(missing))
        await outcome("sock_recv of an int", lambda: loop.sock_recv(5, 10))
        with open(__file__, "rb") as f:
            await outcome("sock_recv of a file", lambda: loop.sock_recv(f, 10))
            await outcome("sock_accept of a file", lambda: loop.sock_accept(f))
        a, b = socket.socketpair()
        tr, _ = await loop.create_connection(asyncio.Protocol, sock=a)
        await outcome("writelines of a str", lambda: tr.writelines(["a"]))
        await outcome("writelines of an int after bytes", lambda: tr.writelines([b"x", 7]))
        await outcome("write of a str", lambda: tr.write("a"))
        tr.abort()
        b.close()
        bound.close()
        closed_port.close()
        return port

    port = loop.run_until_complete(main())
    return {name: str(outcome).replace(str(tmp_path), "TMP").replace(str(port), "PORT")
            for name, outcome in outcomes.items()}


def test_failed_calls_raise_what_the_stdlib_raises(uloop, tmp_path):
    """The same exception type and arguments (the message included) as on
    the selector loop: a connect that fails at once carries the system's
    message (redis-py builds its own text from it); a non-socket gets the
    AttributeError of the missing method; writelines() the TypeError of
    the stdlib's own check."""
    stdlib = asyncio.SelectorEventLoop()
    try:
        (tmp_path / "stdlib").mkdir()
        expected = _error_scenarios(stdlib, tmp_path / "stdlib")
    finally:
        stdlib.close()
    (tmp_path / "uring").mkdir()
    got = _error_scenarios(uloop, tmp_path / "uring")
    assert got == expected
    assert expected["connect to a missing path"] == \
        "('FileNotFoundError', (2, 'No such file or directory'))"
