"""No object reachable from the package crashes the interpreter, however it
is made or misused (issue #13, items 7-9): classes made with __new__ alone,
a ring that cannot be made in a tight RLIMIT_MEMLOCK, a zero-copy receive
area that cannot exist."""
import os
import subprocess
import sys
import textwrap

import pytest

import uringloop
from conftest import requires, without_ipc_lock

# Every class of uringloop.core: made with __new__ alone, then every method
# and property it has called with a few kinds of argument.  Any Python
# exception is fine; a crash is not.  It runs in a child so that a crash is
# a failed test with the last call printed, not a dead test run.
WALKER = textwrap.dedent("""
    import asyncio, inspect, sys, warnings
    warnings.simplefilter("ignore")
    import uringloop.core as core
    ARGS = [(), (0,), (1,), (-1,), (2**32,), (b"x",), (None,), (0, 0),
            (bytearray(16),), ("lo",)]
    # what a call may raise: a cancelled future's result() raises
    # CancelledError, a BaseException, as asyncio.Future's does
    SOFT = (Exception, asyncio.CancelledError)
    KEEP = {"__repr__", "__len__", "__bytes__", "__iter__", "__enter__",
            "__exit__", "__bool__", "__hash__", "__str__"}
    names = sorted(n for n, obj in vars(core).items()
                   if inspect.isclass(obj) and obj.__module__ == "uringloop.core")
    made = 0
    for name in names:
        cls = getattr(core, name)
        try:
            obj = cls.__new__(cls)
        except Exception:
            continue
        made += 1
        for attr in dir(cls):
            if attr.startswith("__") and attr not in KEEP:
                continue
            print(name, attr, flush=True)
            try:
                value = getattr(obj, attr)
            except Exception:
                continue
            if not callable(value):
                continue
            for args in ARGS:
                try:
                    result = value(*args)
                    if inspect.iscoroutine(result):
                        result.close()
                except SOFT:
                    pass
        for conv in (memoryview, bytes, len, repr):
            try:
                conv(obj)
            except SOFT:
                pass
    print("walked", len(names), "classes,", made, "made with __new__", flush=True)
""")


def test_every_class_made_with_new_alone_raises_instead_of_crashing():
    out = subprocess.run([sys.executable, "-c", WALKER], capture_output=True,
                         text=True, timeout=120)
    last = out.stdout.strip().splitlines()[-1:] or ["(nothing)"]
    assert out.returncode == 0, f"crashed ({out.returncode}) at: {last[0]}\n{out.stderr[-2000:]}"
    assert last[0].startswith("walked")


def test_transports_cannot_be_made_from_python():
    for cls in (uringloop.core.StreamTransport, uringloop.core.DatagramTransport,
                uringloop.core.ReadPipeTransport, uringloop.core.WritePipeTransport):
        with pytest.raises(TypeError, match="made by the loop"):
            cls.__new__(cls)


def test_refill_queue_made_with_new_alone_raises():
    q = uringloop.RefillQueue.__new__(uringloop.RefillQueue)
    for call in (lambda: q.depth, lambda: q.give(0, 1), q.commit, lambda: q.entry(0)):
        with pytest.raises(ValueError, match="not initialised"):
            call()


# ---- a ring in a tight RLIMIT_MEMLOCK ---------------------------------------

TIGHT = textwrap.dedent("""
    import asyncio, resource, socket, warnings, uringloop
    limit = {limit}
    resource.setrlimit(resource.RLIMIT_MEMLOCK, (limit, limit))
    warnings.simplefilter("error")          # no fall-back warning, no noise
    info = uringloop.features()
    async def main():
        loop = asyncio.get_running_loop()
        a, b = socket.socketpair()
        a.setblocking(False)
        b.setblocking(False)
        await loop.sock_sendall(a, b"ping")
        data = await loop.sock_recv(b, 10)
        r, w = await asyncio.open_connection(sock=a)
        w.write(b"stream")
        got = await loop.sock_recv(b, 10)
        w.close()
        b.close()
        return type(loop).__name__, data, got
    print(info["available"], info["ring_entries"], uringloop.run(main()), sep="|")
""")


@requires("ring")
@pytest.mark.parametrize("limit_kib", [16, 64, 256])
def test_a_loop_runs_in_a_tight_memlock_limit(limit_kib):
    out = subprocess.run(
        without_ipc_lock() + [sys.executable, "-c", TIGHT.format(limit=limit_kib * 1024)],
        capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stderr == ""           # nothing printed: no "Exception ignored"
    available, entries, result = out.stdout.strip().split("|")
    assert available == "True"
    assert result == "('Loop', b'ping', b'stream')"


FAILED_LOOP = textwrap.dedent("""
    import gc, resource, uringloop
    resource.setrlimit(resource.RLIMIT_MEMLOCK, (0, 0))
    try:
        uringloop.Loop()
    except uringloop.RingUnavailableError as exc:
        print("refused", exc.errno)
    else:
        print("made")
    gc.collect()
""")


def test_a_failed_loop_leaves_nothing_noisy_behind():
    # RLIMIT_MEMLOCK 0: no ring fits, not even the smallest; the ring is
    # asked for, so that the loop fails rather than take the epoll driver
    out = subprocess.run(without_ipc_lock() + [sys.executable, "-c", FAILED_LOOP],
                         capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, URINGLOOP_DRIVER="ring"))
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    # (refused 1: the whole test run is under a seccomp filter)
    assert out.stdout.strip() in ("refused 12", "refused 1", "made")


def test_run_takes_the_epoll_driver_when_no_ring_fits():
    code = FAILED_LOOP.split("try:")[0] + textwrap.dedent("""
        import asyncio, warnings
        async def main():
            loop = asyncio.get_running_loop()
            return type(loop).__name__, loop.stats()["driver"], loop.stats()["driver_reason"]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            print(*uringloop.run(main()), [str(w.message)[:40] for w in caught])
    """)
    env = {k: v for k, v in os.environ.items() if k != "URINGLOOP_DRIVER"}
    out = subprocess.run(without_ipc_lock() + [sys.executable, "-c", code],
                         capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    name, driver, *reason = out.stdout.split(" ")
    assert name == "Loop" and out.stdout.rstrip().endswith("[]"), out.stdout
    if driver == "ring":
        pytest.skip("this kernel does not charge the ring to RLIMIT_MEMLOCK")
    assert driver == "epoll" and ("ENOMEM" in out.stdout or "EPERM" in out.stdout), out.stdout


# ---- zero-copy receive with an impossible area ------------------------------

def test_zero_copy_receive_rejects_an_area_larger_than_memory():
    with pytest.raises(ValueError, match="memory"):
        uringloop.ZeroCopyReceive("lo", area_size=1 << 40)


def test_zero_copy_receive_failure_releases_everything_and_closes_cleanly():
    fds_before = set(os.listdir("/proc/self/fd"))
    zcrx = uringloop.ZeroCopyReceive("lo", area_size=1 << 20)
    assert zcrx.register() is False
    assert zcrx.reason
    assert "RLIMIT_MEMLOCK" not in zcrx.reason or "ENOMEM" in zcrx.reason
    leaked = set(os.listdir("/proc/self/fd")) - fds_before
    assert not leaked, [os.readlink(f"/proc/self/fd/{fd}") for fd in leaked
                        if os.path.exists(f"/proc/self/fd/{fd}")]
    zcrx.close()            # no EBADFD
    zcrx.close()


def test_call_connection_lost_wants_a_transport():
    """The function the loop schedules for connection_lost (a module
    function of uringloop.core, so reachable): anything but a transport,
    None included, is a TypeError, not a crash."""
    for bad in (None, object(), 0):
        with pytest.raises(TypeError):
            uringloop.core.call_connection_lost(bad, None)
