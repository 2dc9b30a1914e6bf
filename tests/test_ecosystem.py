"""Where uvloop users plug a loop in today: gunicorn with aiohttp workers,
uvicorn's custom loop option, pytest-asyncio.  Real processes, real HTTP."""
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

import uringloop

APPS = os.path.join(os.path.dirname(__file__), "apps")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, timeout=5):
    req = urllib.request.Request(url, headers={"Connection": "close"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.read().decode()


def wait_until_serving(proc, url, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited: {proc.stderr.read()[-2000:]}")
        try:
            return get(url, timeout=1)
        except OSError:
            time.sleep(0.1)
    raise AssertionError("server did not start")


def marked(path, lines, seconds=30):
    """Wait until the app has added `lines` lines to the file at path (it
    does as a request begins its wait)."""
    deadline = time.monotonic() + seconds
    while not (os.path.exists(path) and open(path).read().count("\n") >= lines):
        assert time.monotonic() < deadline, f"{lines} requests never began"
        time.sleep(0.01)


@pytest.fixture
def server_process():
    procs = []

    def start(args):
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True, cwd=APPS)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_gunicorn_two_uringloop_workers_both_serve(server_process):
    pytest.importorskip("gunicorn")
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    proc = server_process([sys.executable, "-m", "gunicorn", "aiohttp_app:make_app",
                           "-k", "uringloop.gunicorn.UringWebWorker", "-w", "2",
                           "-b", f"127.0.0.1:{port}", "--graceful-timeout", "5"])
    wait_until_serving(proc, url)
    pids, loops = set(), set()
    # bounded in time and count: the kernel spreads the accepts, once the
    # second worker has booted (seconds after the first in a fresh venv,
    # where both write aiohttp's .pyc files: CI saw 300 requests served by
    # the first one alone)
    deadline = time.monotonic() + 30
    for _ in range(20000):
        pid, loop = get(url).split()
        pids.add(pid)
        loops.add(loop)
        if len(pids) == 2 or time.monotonic() > deadline:
            break
    assert loops == {"uringloop.core.Loop"}
    assert len(pids) == 2, f"only workers {pids} answered"
    # the workers exit cleanly: a Loop collected while the interpreter
    # shuts down said "Exception ignored in: Loop.__del__" (module globals
    # gone) on every worker's exit
    proc.terminate()
    _, err = proc.communicate(timeout=15)
    assert "Worker exiting" in err and "Exception ignored" not in err, err[-2000:]


@pytest.mark.parametrize("worker", ["uringloop.gunicorn.UringWebWorker",
                                    "aiohttp.worker.GunicornWebWorker"],
                         ids=["uringloop", "stdlib"])
def test_gunicorn_a_blocked_worker_leaves_new_connections_to_the_other(server_process,
                                                                      worker, tmp_path):
    """One worker's loop is held (a handler that blocks); connections made
    meanwhile, one after the other, are all served at once by the other
    worker, as with the stdlib loop: a worker that is not running takes no
    connection from the shared socket."""
    pytest.importorskip("gunicorn")
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    proc = server_process([sys.executable, "-m", "gunicorn", "aiohttp_app:make_app",
                           "-k", worker, "-w", "2",
                           "-b", f"127.0.0.1:{port}", "--graceful-timeout", "5",
                           "--timeout", "60"])
    wait_until_serving(proc, url)
    # both workers have booted and taken a connection
    assert len(answering_pids(url, loop_name=None)) == 2
    mark = tmp_path / "began"
    blocker = socket.create_connection(("127.0.0.1", port))
    try:
        blocker.sendall(f"GET /block?s=6&mark={mark} HTTP/1.1\r\nHost: x\r\n"
                        "Connection: close\r\n\r\n".encode())
        marked(mark, 1)             # one worker is now inside time.sleep()
        pids = []
        for _ in range(12):
            start = time.monotonic()
            pid, _loop = get(url, timeout=4).split()
            pids.append((pid, round(time.monotonic() - start, 2)))
        assert len({pid for pid, _ in pids}) == 1, pids
        assert max(t for _, t in pids) < 3, pids
        blocked_pid = blocker.recv(4096).rsplit(b"\r\n\r\n", 1)[1].decode()
        assert blocked_pid != pids[0][0]
    finally:
        blocker.close()


def gunicorn_asgi(server_process, port, *extra):
    pytest.importorskip("gunicorn")
    pytest.importorskip("uvicorn")
    return server_process([sys.executable, "-m", "gunicorn", "asgi_app:app",
                           "-k", "uringloop.gunicorn.UringUvicornWorker", "-w", "2",
                           "-b", f"127.0.0.1:{port}", "--graceful-timeout", "10", *extra])


def answering_pids(url, want=2, seconds=30, loop_name="uringloop.core.Loop"):
    pids = set()
    deadline = time.monotonic() + seconds
    for _ in range(20000):          # bounded: the kernel spreads the accepts
        pid, loop = get(url).split()
        assert loop_name is None or loop == loop_name
        pids.add(pid)
        if len(pids) == want or time.monotonic() > deadline:
            break
    return pids


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_gunicorn_asgi_workers_both_serve_and_reload_on_sighup(server_process):
    port = free_port()
    url = f"http://127.0.0.1:{port}/pid"
    proc = gunicorn_asgi(server_process, port)
    wait_until_serving(proc, url)
    before = answering_pids(url)
    assert len(before) == 2, f"only workers {before} answered"
    proc.send_signal(signal.SIGHUP)         # graceful reload: new workers
    # While the old workers stop, a connection one of them had accepted but
    # not read is closed unanswered (uvicorn's shutdown, whatever the loop):
    # a client retries, as this one does, until both new workers answer.
    deadline = time.monotonic() + 30
    after = set()
    while time.monotonic() < deadline and len(after) < 2:
        try:
            pid, loop = get(url).split()
        except OSError:                     # RemoteDisconnected, refused
            time.sleep(0.05)
            continue
        assert loop == "uringloop.core.Loop"
        if pid not in before:
            after.add(pid)
    assert len(after) == 2, f"after SIGHUP: {after}, before: {before}"
    while time.monotonic() < deadline and any(alive(int(pid)) for pid in before):
        time.sleep(0.1)                     # the old workers finish and exit
    assert not any(alive(int(pid)) for pid in before), "old workers still running"
    for _ in range(20):                     # reloaded: every request is served
        assert get(url).split()[0] in after


def test_gunicorn_asgi_sigterm_finishes_requests_in_flight(server_process, tmp_path):
    port = free_port()
    mark = tmp_path / "began"
    proc = gunicorn_asgi(server_process, port)
    wait_until_serving(proc, f"http://127.0.0.1:{port}/pid")
    results = []

    def slow_request():
        try:
            results.append(get(f"http://127.0.0.1:{port}/slow?s=2&mark={mark}", timeout=15))
        except OSError as exc:
            results.append(exc)

    threads = [threading.Thread(target=slow_request) for _ in range(4)]
    for t in threads:
        t.start()
    marked(mark, 4)                 # the requests are inside asyncio.sleep()
    proc.send_signal(signal.SIGTERM)
    for t in threads:
        t.join(20)
    assert proc.wait(timeout=20) == 0, proc.stderr.read()[-2000:]
    assert len(results) == 4
    for body in results:
        assert isinstance(body, str) and body.endswith("uringloop.core.Loop"), results


@pytest.mark.parametrize("factory", ["new_event_loop", "loop_factory"])
def test_uvicorn_custom_loop_factory(server_process, factory):
    pytest.importorskip("uvicorn")
    port = free_port()
    proc = server_process([sys.executable, "-m", "uvicorn", "asgi_app:app",
                           "--loop", f"uringloop:{factory}",
                           "--host", "127.0.0.1", "--port", str(port)])
    assert wait_until_serving(proc, f"http://127.0.0.1:{port}/") == "uringloop.core.Loop"


@pytest.mark.parametrize("factory", ["loop_factory", "new_event_loop"])
def test_uvicorn_serves_on_the_epoll_driver_where_io_uring_is_refused(server_process,
                                                                     deny_io_uring, factory):
    """`--loop uringloop:loop_factory` (and `:new_event_loop`) serves on a
    uringloop Loop, its epoll driver, where a seccomp profile refuses
    io_uring, as run() and the gunicorn workers do; no warning."""
    pytest.importorskip("uvicorn")
    port = free_port()
    proc = server_process([deny_io_uring, sys.executable, "-m", "uvicorn", "asgi_app:app",
                           "--loop", f"uringloop:{factory}",
                           "--host", "127.0.0.1", "--port", str(port)])
    served_by = wait_until_serving(proc, f"http://127.0.0.1:{port}/")
    assert served_by == "uringloop.core.Loop"
    proc.terminate()
    _, err = proc.communicate(timeout=15)
    assert "Warning" not in err, err[-2000:]


def test_gunicorn_aiohttp_worker_takes_a_plain_def_factory(server_process):
    """gunicorn app:make_app with `def make_app()`: aiohttp's worker exits
    with status 3 on it; uringloop's calls it on the running loop."""
    pytest.importorskip("gunicorn")
    port = free_port()
    proc = server_process([sys.executable, "-W", "always::DeprecationWarning",
                           "-m", "gunicorn", "aiohttp_app:make_app_plain",
                           "-k", "uringloop.gunicorn.UringWebWorker", "-w", "1",
                           "-b", f"127.0.0.1:{port}", "--graceful-timeout", "5"])
    served_by = wait_until_serving(proc, f"http://127.0.0.1:{port}/")
    assert served_by.split()[1] == "uringloop.core.Loop"
    proc.terminate()
    _, err = proc.communicate(timeout=15)
    # none of the worker's own (asyncio's policy functions warn on 3.12+)
    assert "uringloop/gunicorn.py" not in err, err[-2000:]


# pytest-asyncio runs this on uringloop through tests/conftest.py (the
# pytest_asyncio_loop_factories hook, or event_loop_policy on older versions).
@pytest.mark.asyncio
async def test_pytest_asyncio_runs_on_uringloop():
    loop = asyncio.get_running_loop()
    assert isinstance(loop, uringloop.Loop)
    await asyncio.sleep(0.001)


# ---- gunicorn --reuse-port: a listening socket per worker ----------------------

PROBE = os.path.join(os.path.dirname(__file__), "helpers", "reuseport_probe.py")


@pytest.fixture
def reuseport_probe():
    """Runs tests/helpers/reuseport_probe.py in a network namespace of its
    own whose net.ipv4.tcp_migrate_req is set as asked (the host's is left
    alone); returns its JSON line."""
    pytest.importorskip("gunicorn")
    if os.geteuid() != 0 or not os.path.exists("/proc/sys/net/ipv4/tcp_migrate_req"):
        pytest.skip("needs root (network namespaces) and net.ipv4.tcp_migrate_req (5.14)")
    try:
        subprocess.run(["ip", "-V"], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("ip (iproute2) not installed")
    made = []

    def run(scenario, migrate, worker="uringloop.gunicorn.UringWebWorker"):
        name = f"ulrp{os.getpid()}m{migrate}"
        if name not in made:
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
            subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True)
            made.append(name)
            subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
            # (the namespace's own setting, written without sysctl(8):
            # procps is not everywhere, Debian's minimal chroot has none)
            subprocess.run(["ip", "netns", "exec", name, sys.executable, "-c",
                            "open('/proc/sys/net/ipv4/tcp_migrate_req', 'w')"
                            f".write('{migrate}')"], check=True)
        out = subprocess.run(["ip", "netns", "exec", name, sys.executable, PROBE, scenario,
                              "8000", worker], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    yield run
    for name in made:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def test_gunicorn_reuse_port_workers_listen_apart_and_both_serve(reuseport_probe):
    """gunicorn --reuse-port gives each worker a listening socket of its
    own and the kernel spreads connections over them by address, whoever
    runs first: both uringloop workers serve a burst of 64 (the even split
    the shared socket leaves to the scheduler; bench/run_gunicorn.py)."""
    out = reuseport_probe("spread", 1)
    assert out["listeners"] == 2
    assert len(out["served"]) == 2, out
    assert sum(out["served"].values()) == 64


@pytest.mark.parametrize("how", ["term", "kill"])
def test_gunicorn_reuse_port_worker_exit_loses_no_queued_connection(reuseport_probe, how):
    """A --reuse-port worker that exits while connections wait on its own
    socket: with net.ipv4.tcp_migrate_req = 1 the kernel moves them to the
    other worker's socket, and every one is answered; a worker told to
    exit (SIGTERM) answers them itself before its server closes, whatever
    the setting."""
    out = reuseport_probe(how, 1)
    assert (out["answered"], out["failed"]) == (40, []), out
    if how == "term":
        out = reuseport_probe(how, 0)
        assert (out["answered"], out["failed"]) == (40, []), out


def test_gunicorn_reuse_port_kill_without_migration_resets_the_queued(reuseport_probe):
    """The control for the test above: without tcp_migrate_req the
    connections queued on a killed worker's socket are reset (the kernel's
    doing, the same with the stdlib loop's worker), so that scenario really
    leaves connections on the worker's own socket."""
    out = reuseport_probe("kill", 0)
    assert 0 < out["answered"] < 40 and set(out["failed"]) == {"ConnectionResetError"}, out
