"""Where io_uring is refused -- a real seccomp filter, as Docker's default
profile, on a child process -- the loop runs on its epoll driver: every
way of making a loop gives a uringloop Loop, with one INFO log line and no
warning.  A forced ring (URINGLOOP_DRIVER=ring, strict) raises instead."""
import asyncio
import ctypes
import gc
import os
import platform
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

import uringloop
from conftest import io_uring_disabled, turns, until, until_closed


def run_child(prefix, code, env=None):
    full_env = dict(os.environ)
    for name in ("URINGLOOP_STRICT", "URINGLOOP_DRIVER"):
        full_env.pop(name, None)
    full_env.update(env or {})
    return subprocess.run(prefix + [sys.executable, "-W", "always", "-c",
                                    textwrap.dedent(code)],
                          capture_output=True, text=True, env=full_env, timeout=60)


CHECK_REFUSED = """
    import asyncio, logging, sys, warnings, uringloop
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(name)s %(levelname)s %(message)s")

    async def main():
        loop = asyncio.get_running_loop()
        reader, writer = await asyncio.open_connection(*server_address)
        writer.write(b"ping")
        answer = await reader.read(4)
        writer.close()
        await writer.wait_closed()
        return type(loop).__name__, loop.stats()["driver"], answer

    async def serve():
        async def echo(reader, writer):
            writer.write(await reader.read(4))
            await writer.drain()
            writer.close()
        return await asyncio.start_server(echo, "127.0.0.1", 0)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loop = uringloop.new_event_loop()
        stats = loop.stats()
        server = loop.run_until_complete(serve())
        server_address = server.sockets[0].getsockname()
        import threading
        threading.Thread(target=loop.run_forever, daemon=True).start()
        results = [uringloop.run(main())]
        with asyncio.Runner(loop_factory=uringloop.loop_factory) as runner:
            results.append(runner.run(main()))
        with asyncio.Runner(loop_factory=uringloop.new_event_loop) as runner:
            results.append(runner.run(main()))
        loop.call_soon_threadsafe(loop.stop)
    print("driver:", stats["driver"], stats["driver_reason"])
    assert stats["driver"] == "epoll" and "EPERM" in stats["driver_reason"], stats
    assert results == [("Loop", "epoll", b"ping")] * 3, results
    runtime = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert runtime == [], runtime
    info = uringloop.features()
    assert info["available"] is False and "io_uring_setup failed" in info["error"]
    print("OK")
"""


def test_seccomp_refusal_runs_every_loop_on_the_epoll_driver(deny_io_uring):
    r = run_child([deny_io_uring], CHECK_REFUSED)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "OK" in r.stdout
    said = [line for line in r.stderr.splitlines() if line.startswith("uringloop INFO")]
    assert len(said) == 1, r.stderr               # once per process, naming the cause
    assert "epoll driver" in said[0] and "seccomp" in said[0]


CHECK_FORCED_RING = """
    import asyncio, errno, warnings, uringloop
    async def main():
        pass
    try:
        uringloop.new_event_loop()
    except uringloop.RingUnavailableError as exc:
        assert exc.errno == errno.EPERM, exc
    else:
        raise SystemExit("new_event_loop() did not raise")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for call in (lambda: uringloop.run(main()), uringloop.loop_factory):
            try:
                call()
            except uringloop.RingUnavailableError as exc:
                print("raised:", exc.errno)
            else:
                raise SystemExit("a forced ring that is refused did not raise")
    # (no 'coroutine was never awaited' for the main run() could not start)
    assert not caught, [str(w.message) for w in caught]
    print("OK")
"""


def test_a_forced_ring_that_is_refused_raises(deny_io_uring):
    for env in ({"URINGLOOP_DRIVER": "ring"}, {"URINGLOOP_STRICT": "1"}):
        r = run_child([deny_io_uring], CHECK_FORCED_RING, env=env)
        assert r.returncode == 0, (env, r.stdout + r.stderr)
        assert r.stdout.count("raised: 1") == 2, r.stdout


CHECK_FORCED_EPOLL = """
    import asyncio, uringloop
    async def main():
        return asyncio.get_running_loop().stats()["driver"]
    print(uringloop.run(main()), uringloop.run(main(), strict=True))
"""


def test_the_epoll_driver_can_be_asked_for_and_a_bad_setting_is_an_error():
    r = run_child([], CHECK_FORCED_EPOLL, env={"URINGLOOP_DRIVER": "epoll"})
    assert r.returncode == 0 and r.stdout.split() == ["epoll", "epoll"], r.stdout + r.stderr
    assert "INFO" not in r.stderr       # asked for: nothing to explain
    r = run_child([], CHECK_FORCED_EPOLL, env={"URINGLOOP_DRIVER": "kqueue"})
    assert r.returncode != 0 and "URINGLOOP_DRIVER must be" in r.stderr


def test_io_uring_disabled_sysctl():
    with io_uring_disabled("2"):
        r = run_child([], CHECK_REFUSED)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "OK" in r.stdout


def test_more_connections_than_receive_buffers_make_no_request_per_message(monkeypatch):
    """On the epoll driver, rounds of messages on more connections than the
    loop has receive buffers (64) are read without the receives ending and
    being armed again: where the kernel ends a multishot receive that finds
    no buffer (-ENOBUFS), the driver keeps it for the next enter.  Counted
    in requests submitted: 5 rounds of 200 messages."""
    monkeypatch.setenv("URINGLOOP_DRIVER", "epoll")
    loop = uringloop.new_event_loop()
    assert loop.stats()["driver"] == "epoll"
    got = [0]

    class Counting(asyncio.Protocol):
        def data_received(self, data):
            got[0] += len(data)

    async def main():
        pairs = []
        for _ in range(200):
            a, b = socket.socketpair()
            tr, _ = await loop.create_connection(Counting, sock=a)
            pairs.append((tr, b))
        await turns()
        before = loop.stats()["sqes_submitted"]
        for rnd in range(1, 6):
            for _, b in pairs:
                b.send(b"x" * 1024)
            await until(lambda: got[0] >= rnd * 200 * 1024, f"round {rnd}'s messages")
        submitted = loop.stats()["sqes_submitted"] - before
        for tr, b in pairs:
            tr.close()
            b.close()
        await until_closed(*(tr for tr, _ in pairs))
        return submitted

    try:
        submitted = loop.run_until_complete(asyncio.wait_for(main(), 60))
    finally:
        loop.close()
    assert got[0] == 5 * 200 * 1024
    assert submitted < 50, submitted        # (one per message was 1000-odd)


# (the fork is made with the driver's threads running on purpose: CPython
# 3.12+ warns of just that)
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_lets_go_of_its_parents_epoll_driven_loop(monkeypatch, tmp_path):
    """A child forked from a process whose loop runs on the epoll driver,
    its threads started by a file request, drops the loop at exit without
    touching the threads' lock (which a thread may have held at the fork)
    and exits; the parent's loop goes on."""
    monkeypatch.setenv("URINGLOOP_DRIVER", "epoll")
    loop = uringloop.new_event_loop()
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100)

    async def read():
        async with uringloop.open(path, "rb") as f:      # OPENAT: a driver thread
            return await f.read()
    try:
        assert loop.run_until_complete(read()) == b"x" * 100
        pid = os.fork()
        if pid == 0:                                    # the child
            code = 0
            try:
                loop.close()        # (a loop of another process: refused)
            except BaseException:
                code = 1
            del loop                # its ring and driver go here
            gc.collect()
            os._exit(code)
        deadline = time.monotonic() + 20
        while not os.waitpid(pid, os.WNOHANG)[0]:
            if time.monotonic() > deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                raise AssertionError("the child did not exit")
            time.sleep(0.05)
        assert loop.run_until_complete(read()) == b"x" * 100
    finally:
        loop.close()


# system call numbers: tgkill, and openat (read in /proc/TID/syscall)
TGKILL, OPENAT = {"x86_64": (234, 257), "aarch64": (131, 56)}.get(platform.machine(),
                                                                (None, None))


@pytest.mark.skipif(TGKILL is None, reason="tgkill's number is known for x86_64 and aarch64 here")
def test_a_signal_does_not_cut_short_a_driver_threads_blocking_call(monkeypatch, tmp_path):
    """A signal sent to the epoll driver's thread while it blocks (the open
    of a FIFO, which waits for a reader) is not taken there: the open goes
    on and succeeds, as the kernel's io-wq does, and never fails with
    EINTR (CPython's handlers are installed without SA_RESTART)."""
    monkeypatch.setenv("URINGLOOP_DRIVER", "epoll")
    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo)
    libc = ctypes.CDLL(None, use_errno=True)
    before = set(os.listdir("/proc/self/task"))
    old = signal.signal(signal.SIGUSR1, lambda *a: None)   # (no SA_RESTART)
    loop = uringloop.new_event_loop()

    def blocked_in_open():
        for tid in set(os.listdir("/proc/self/task")) - before:
            try:
                with open(f"/proc/self/task/{tid}/syscall") as f:
                    if f.read().split()[0] == str(OPENAT):
                        return tid
            except (OSError, IndexError):
                pass
        return None

    async def main():
        opening = asyncio.ensure_future(uringloop.open(fifo, "wb"))
        tid = await until(blocked_in_open, "the driver's thread blocks in openat()")
        assert libc.syscall(TGKILL, os.getpid(), int(tid), signal.SIGUSR1) == 0
        await turns(3)
        assert not opening.done()
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        try:
            f = await opening
            try:
                await f.write(b"through")
            finally:
                await f.close()
            return os.read(reader, 100)
        finally:
            os.close(reader)
    try:
        assert loop.run_until_complete(main()) == b"through"
    finally:
        loop.close()
        signal.signal(signal.SIGUSR1, old)


def test_the_epoll_drivers_threads_end_when_idle(monkeypatch, tmp_path):
    """The driver's threads for blocking work end after some seconds
    without any (as io-wq's workers do, after 5), so a process that opened
    a few files at start does not carry them -- into a fork(), say -- for
    the rest of its life; the next blocking request starts one again."""
    monkeypatch.setenv("URINGLOOP_DRIVER", "epoll")
    before = set(os.listdir("/proc/self/task"))
    loop = uringloop.new_event_loop()

    def threads():
        return len(set(os.listdir("/proc/self/task")) - before)

    async def write(name):
        async with uringloop.open(tmp_path / name, "w") as f:    # O_CREAT: a thread
            await f.write("x")

    async def main():
        await write("a")
        assert threads() >= 1
        await until(lambda: threads() == 0, "the idle threads' end", timeout=30)
        await write("b")
        return (tmp_path / "b").read_text()
    try:
        assert loop.run_until_complete(main()) == "x"
    finally:
        loop.close()
