"""The benchmark's servers answer correctly on uringloop, so that a broken
server cannot pass for a fast one: each HTTP app gets keep-alive and
closing requests, the echo server every style with a checked payload."""
import json
import os
import socket
import subprocess
import sys
import time

import pytest

BENCH = os.path.join(os.path.dirname(__file__), os.pardir, "bench")


def start(script, *args):
    proc = subprocess.Popen([sys.executable, os.path.join(BENCH, script), "--loop", "uringloop",
                             *args], stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line.startswith("READY"), line
    return proc, int(line.split()[1])


def stop(proc):
    proc.terminate()
    try:
        proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()


def read_response(sock):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        assert chunk, data
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    length = int([h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")][0]
                 .split(b":")[1])
    while len(body) < length:
        body += sock.recv(4096)
    return head, body


@pytest.mark.parametrize("app", ["aiohttp", "raw"])
def test_http_apps_answer_keep_alive_and_closing_requests(app):
    if app == "raw":
        pytest.importorskip("httptools")
    proc, port = start("http_server.py", "--app", app)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            for _ in range(3):
                sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                head, body = read_response(sock)
                assert head.startswith(b"HTTP/1.1 200") and body == b"Hello, World!"
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            head, body = read_response(sock)
            assert body == b"Hello, World!" and sock.recv(10) == b""
    finally:
        stop(proc)


@pytest.mark.parametrize("style", ["protocol", "streams", "sock"])
def test_echo_server_styles_echo_every_byte(style):
    proc, port = start("echo_server.py", "--style", style)
    payload = os.urandom(300_000)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(payload)
            got = b""
            while len(got) < len(payload):
                chunk = sock.recv(65536)
                assert chunk
                got += chunk
            assert got == payload
    finally:
        stop(proc)


def test_tls_echo_server_and_client_check_every_byte(self_signed_cert):
    """bench/run_tls.py's pair: echo_server.py --tls and tls_client.py,
    whose JSON counts requests and echoes that differed."""
    proc, port = start("echo_server.py", "--tls", ",".join(self_signed_cert))
    try:
        out = subprocess.run([sys.executable, os.path.join(BENCH, "tls_client.py"),
                              "127.0.0.1", str(port), "2", "5000", "0.5", str(proc.pid)],
                             capture_output=True, text=True, timeout=60)
        result = json.loads(out.stdout)
        assert result["requests"] > 0 and result["errors"] == 0, out.stderr
    finally:
        stop(proc)


def _left_open():
    sys.path.insert(0, BENCH)
    try:
        from run_connect import left_open
    finally:
        sys.path.remove(BENCH)
    return left_open


def _wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_run_connect_counts_a_connection_the_server_keeps_after_the_peers_fin():
    """run_connect.py's "left open" column: a server socket whose peer has
    closed (CLOSE_WAIT) counts until the server closes it; the listener
    never counts."""
    left_open = _left_open()
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        assert left_open(port) == 0
        client = socket.create_connection(("127.0.0.1", port), timeout=10)
        conn, _ = listener.accept()
        client.close()
        assert conn.recv(1) == b""          # the FIN is in: CLOSE_WAIT
        assert left_open(port) == 1
        conn.close()
        _wait_for(lambda: left_open(port) == 0)


def test_the_echo_server_on_uringloop_leaves_no_connection_open():
    """What run_connect.py compares: each connection accepted, echoed once
    and closed by the peer is closed by the loop too (rloop 0.5.0 leaves
    them in CLOSE_WAIT, docs/benchmarks.md)."""
    left_open = _left_open()
    proc, port = start("echo_server.py", "--style", "protocol")
    try:
        for _ in range(20):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                sock.sendall(b"x")
                assert sock.recv(1) == b"x"
        _wait_for(lambda: left_open(port) == 0)
    finally:
        stop(proc)
