"""The loop's own behaviour: callbacks, timers, threads, executors, errors,
life cycle.  Written against the stdlib loop's behaviour (any_loop)."""
import asyncio
import contextvars
import gc
import logging
import os
import socket
import subprocess
import sys
import threading
import time
import warnings
import weakref

import pytest

import uringloop
from conftest import LOOP_DRIVER, requires, turns, until_closed


def test_loop_is_an_asyncio_loop(uloop):
    assert isinstance(uloop, asyncio.AbstractEventLoop)
    assert isinstance(uloop, uringloop.Loop)


def test_call_soon_order_and_args(any_loop):
    calls = []
    any_loop.call_soon(calls.append, 1)
    any_loop.call_soon(calls.append, 2)
    h = any_loop.call_soon(calls.append, 3)
    h.cancel()
    any_loop.call_soon(any_loop.stop)
    any_loop.run_forever()
    assert calls == [1, 2]


def test_callbacks_added_while_running_wait_one_iteration(any_loop):
    calls = []

    def first():
        calls.append("first")
        any_loop.call_soon(calls.append, "nested")

    any_loop.call_soon(first)
    any_loop.call_soon(calls.append, "second")
    any_loop.call_soon(any_loop.stop)
    any_loop.run_forever()
    assert calls == ["first", "second"]
    any_loop.call_soon(any_loop.stop)
    any_loop.run_forever()
    assert calls == ["first", "second", "nested"]


def test_timers_fire_in_order_and_not_early(any_loop):
    # (call_at from one start: each call_later() reads the clock anew, and
    # on a loaded machine 30 ms could pass between two of them)
    fired = []
    start = any_loop.time()
    for delay in (0.03, 0.01, 0.02, 0.0):
        any_loop.call_at(start + delay, lambda d=delay: fired.append((d, any_loop.time() - start)))
    any_loop.call_at(start + 0.05, any_loop.stop)
    any_loop.run_forever()
    assert [d for d, _ in fired] == [0.0, 0.01, 0.02, 0.03]
    for delay, elapsed in fired:
        assert elapsed >= delay - any_loop._clock_resolution


def test_call_at_and_cancelled_timers_are_dropped(any_loop):
    fired = []
    handles = [any_loop.call_later(10 + i, fired.append, i) for i in range(200)]
    for h in handles:
        h.cancel()
    any_loop.call_at(any_loop.time() + 0.01, fired.append, "at")
    any_loop.call_later(0.02, any_loop.stop)
    any_loop.run_forever()
    assert fired == ["at"]
    # more than half the heap was cancelled: it was rebuilt
    assert len(any_loop._scheduled) == 0


def test_call_soon_threadsafe_wakes_a_sleeping_loop(any_loop):
    done = []

    def other_thread():
        time.sleep(0.05)    # (the loop is asleep by then: what is tested)
        any_loop.call_soon_threadsafe(done.append, "woken")
        any_loop.call_soon_threadsafe(any_loop.stop)

    t = threading.Thread(target=other_thread)
    t.start()
    # nothing else scheduled: the loop sleeps until the thread writes
    any_loop.call_later(30, any_loop.stop)
    t0 = time.monotonic()
    any_loop.run_forever()
    t.join()
    assert done == ["woken"]
    assert time.monotonic() - t0 < 20


def test_a_loop_run_in_a_thread_closes_quietly_from_another(any_loop, caplog):
    """tornado's test_add_callback_from_signal_other_thread: a loop runs in
    a thread until call_soon_threadsafe(stop), and the main thread closes
    it.  The ring's owner thread is gone, so the wake-up read re-armed after
    the last callback never reached the kernel; close() must end it rather
    than keep its buffer and warn."""
    t = threading.Thread(target=any_loop.run_forever)
    t.start()
    any_loop.call_soon_threadsafe(any_loop.stop)
    t.join(30)
    assert not t.is_alive()
    with caplog.at_level(logging.WARNING):
        any_loop.close()
    assert caplog.records == []
    if isinstance(any_loop, uringloop.Loop):
        assert any_loop.stats()["ops_in_flight"] == 0


@pytest.mark.kept_by_kernel(operations=1)
def test_a_loop_closed_from_another_thread_frees_its_memory(caplog):
    """tornado's SyncHTTPClientTest: a server loop runs in a thread, which
    ends; the main thread closes the loop.  The loop's standing wake-up
    read is in the kernel and only the ended thread could have cancelled
    it.  close() stays quiet about it, still frees the receive buffer ring
    (16 MiB of address space), and the loop itself is collected; only the
    read's own operation stays (the debug build counts it)."""
    loop = uringloop.new_event_loop()

    async def serve_one_connection():
        async def echo(reader, writer):
            writer.write(await reader.read(10))
            writer.close()

        server = await asyncio.start_server(echo, "127.0.0.1", 0)
        reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname())
        writer.write(b"hi")
        assert await reader.read(10) == b"hi"
        writer.close()
        await writer.wait_closed()
        server.close()
        await server.wait_closed()
        await turns()                # (the wake-up read is submitted)

    t = threading.Thread(target=loop.run_until_complete, args=(serve_one_connection(),))
    t.start()
    t.join(30)
    assert not t.is_alive()

    def vm_size_kib():
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmSize:"))

    before = vm_size_kib()
    with caplog.at_level(logging.WARNING):
        loop.close()
    assert caplog.records == []
    assert before - vm_size_kib() >= 16 * 1024
    ref = weakref.ref(loop)
    del loop
    gc.collect()
    assert ref() is None


def test_call_soon_threadsafe_many_threads(uloop):
    n_threads, per_thread = 4, 500
    got = []

    def worker(k):
        for i in range(per_thread):
            uloop.call_soon_threadsafe(got.append, (k, i))

    async def main():
        threads = [threading.Thread(target=worker, args=(k,)) for k in range(n_threads)]
        for t in threads:
            t.start()
        while len(got) < n_threads * per_thread:
            await asyncio.sleep(0.001)
        for t in threads:
            t.join()

    uloop.run_until_complete(asyncio.wait_for(main(), 30))
    for k in range(n_threads):
        assert [i for kk, i in got if kk == k] == list(range(per_thread))


def test_run_in_executor_and_default_executor(any_loop):
    async def main():
        r = await any_loop.run_in_executor(None, sum, [1, 2, 3])
        tid = await any_loop.run_in_executor(None, threading.get_ident)
        return r, tid

    r, tid = any_loop.run_until_complete(main())
    assert r == 6 and tid != threading.get_ident()
    any_loop.run_until_complete(any_loop.shutdown_default_executor())


def test_create_task_name_and_context(any_loop):
    var = contextvars.ContextVar("var", default="default")
    ctx = contextvars.copy_context()
    ctx.run(var.set, "in ctx")

    async def read_var():
        return var.get()

    task = any_loop.create_task(read_var(), name="reader")
    assert task.get_name() == "reader"
    assert any_loop.run_until_complete(task) == "default"
    # Python 3.11 create_task has context=
    task = any_loop.create_task(read_var(), context=ctx)
    assert any_loop.run_until_complete(task) == "in ctx"


def test_task_factory(any_loop):
    made = []

    def factory(loop, coro):
        made.append(coro)
        return asyncio.Task(coro, loop=loop)

    any_loop.set_task_factory(factory)
    assert any_loop.get_task_factory() is factory

    async def f():
        return 5

    assert any_loop.run_until_complete(f()) == 5
    assert len(made) == 1


def test_exception_in_callback_goes_to_handler_and_loop_goes_on(any_loop):
    seen = []
    any_loop.set_exception_handler(lambda loop, ctx: seen.append(ctx))

    def boom():
        raise ZeroDivisionError("boom")

    any_loop.call_soon(boom)
    later = []
    any_loop.call_soon(later.append, 1)
    any_loop.call_soon(any_loop.stop)
    any_loop.run_forever()
    assert isinstance(seen[0]["exception"], ZeroDivisionError)
    assert later == [1]
    assert any_loop.get_exception_handler() is not None


def test_keyboard_interrupt_propagates_out_of_run(any_loop):
    def interrupt():
        raise KeyboardInterrupt

    any_loop.call_soon(interrupt)
    with pytest.raises(KeyboardInterrupt):
        any_loop.run_forever()
    assert not any_loop.is_running()


def test_slow_callback_warning_in_debug_mode(any_loop, caplog):
    any_loop.set_debug(True)
    any_loop.slow_callback_duration = 0.01
    any_loop.call_soon(time.sleep, 0.03)
    any_loop.call_soon(any_loop.stop)
    with caplog.at_level(logging.WARNING, logger="asyncio"):
        any_loop.run_forever()
    assert any("took" in r.getMessage() for r in caplog.records)


def test_stop_close_states(any_loop):
    assert not any_loop.is_running() and not any_loop.is_closed()

    async def inside():
        assert any_loop.is_running()
        with pytest.raises(RuntimeError):
            any_loop.close()
        coro = asyncio.sleep(0)
        with pytest.raises(RuntimeError):
            any_loop.run_until_complete(coro)
        coro.close()

    any_loop.run_until_complete(inside())
    any_loop.close()
    assert any_loop.is_closed()
    any_loop.close()   # twice is fine
    with pytest.raises(RuntimeError):
        any_loop.call_soon(print)
    with pytest.raises(RuntimeError):
        any_loop.run_forever()


def test_shutdown_asyncgens(any_loop):
    finalized = []

    async def agen():
        try:
            yield 1
            yield 2
        finally:
            finalized.append(True)

    async def main():
        g = agen()
        await g.__anext__()
        return g

    g = any_loop.run_until_complete(main())
    any_loop.run_until_complete(any_loop.shutdown_asyncgens())
    assert finalized == [True]


def test_getaddrinfo_and_getnameinfo(any_loop):
    infos = any_loop.run_until_complete(any_loop.getaddrinfo("127.0.0.1", 80))
    assert any(info[4][0] == "127.0.0.1" for info in infos)
    name = any_loop.run_until_complete(any_loop.getnameinfo(("127.0.0.1", 80)))
    assert len(name) == 2


def test_run_until_complete_result_and_exception(any_loop):
    async def ok():
        await asyncio.sleep(0.001)
        return "ok"

    async def bad():
        raise ValueError("bad")

    assert any_loop.run_until_complete(ok()) == "ok"
    with pytest.raises(ValueError):
        any_loop.run_until_complete(bad())


def test_runner_and_run_entry_points():
    async def main():
        return type(asyncio.get_running_loop())

    assert uringloop.run(main()) is uringloop.Loop
    with asyncio.Runner(loop_factory=uringloop.new_event_loop) as runner:
        assert runner.run(main()) is uringloop.Loop


# (asyncio's policy functions are deprecated from 3.14; what install() and
# the policy class do still needs them to be checked)
@pytest.mark.filterwarnings(
    "ignore:'asyncio.[gs]et_event_loop_policy' is deprecated:DeprecationWarning")
def test_install_sets_the_policy():
    old = asyncio.get_event_loop_policy()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error" if sys.version_info < (3, 12) else "ignore")
            uringloop.install()
        loop = asyncio.new_event_loop()
        assert isinstance(loop, uringloop.Loop)
        loop.close()
    finally:
        asyncio.set_event_loop_policy(old)


# (asyncio's policy functions are deprecated from 3.14; what install() and
# the policy class do still needs them to be checked)
@pytest.mark.filterwarnings(
    "ignore:'asyncio.[gs]et_event_loop_policy' is deprecated:DeprecationWarning")
def test_install_and_policy_carry_uvloops_deprecation_story(monkeypatch):
    """install() warns on 3.12+ (uvloop does the same), the policy class on
    3.14+ where asyncio deprecates policies; importing never warns."""
    old = asyncio.get_event_loop_policy()
    try:
        monkeypatch.setattr(sys, "version_info", (3, 12, 0, "final", 0))
        with pytest.warns(DeprecationWarning, match="uringloop.run"):
            uringloop.install()
        assert isinstance(asyncio.get_event_loop_policy(), uringloop.EventLoopPolicy)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            uringloop.EventLoopPolicy()
        monkeypatch.setattr(sys, "version_info", (3, 14, 0, "final", 0))
        with pytest.warns(DeprecationWarning, match="policy"):
            uringloop.EventLoopPolicy()
    finally:
        asyncio.set_event_loop_policy(old)
    out = subprocess.run([sys.executable, "-W", "error", "-c", "import uringloop"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


@requires("ring")
def test_features_reports_the_probe():
    info = uringloop.features()
    assert info["available"] is True
    assert info["kernel"] == os.uname().release
    assert info["opcodes"]["RECV"] and info["opcodes"]["SEND"]
    assert info["last_opcode"] >= 47


# (3.12+ warns of any fork in a process with threads; this child only
# checks that the loop refuses to run, and exits)
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_loop_refuses_a_forked_child(uloop):
    uloop.run_until_complete(asyncio.sleep(0))
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            uloop.run_until_complete(asyncio.sleep(0))
        except RuntimeError as exc:
            code = 0 if "another process" in str(exc) else 2
        except BaseException:
            code = 3
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_loop_error_nobody_expected_fails_the_test():
    """tests/conftest.py fails a test whose loop reported an error through
    its default exception handler, unless the test says it expects one
    (issue #18): run tests/helpers/inner_loop_errors.py and see."""
    here = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run(
        # (no:logging: captured log records would keep the failing loop alive,
        # which the debug build counts as a leak)
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:logging",
         "-rfE", os.path.join(here, "helpers", "inner_loop_errors.py")],
        capture_output=True, text=True, timeout=120, cwd=os.path.dirname(here))
    # (the failure comes at the test's teardown: pytest says ERROR)
    assert out.returncode != 0, out.stdout[-3000:]
    assert "2 passed, 1 error" in out.stdout, out.stdout[-3000:]
    assert "ERROR tests/helpers/inner_loop_errors.py::test_unexpected" in out.stdout
    assert "the loop reported unexpected errors" in out.stdout
    assert "protocol.data_received() call failed" in out.stdout


def test_stats_count_this_loops_transports_until_collected():
    """loop.stats()['transports'] counts the transports this loop made and
    that are not yet collected, per loop (the suite's teardown checks it
    is 0 for every closed loop); a transport may outlive its loop."""
    import gc
    import socket as socket_module

    loop = uringloop.new_event_loop()
    other = uringloop.new_event_loop()

    async def make():
        a, b = socket_module.socketpair()
        tr, _ = await asyncio.get_running_loop().create_connection(asyncio.Protocol, sock=a)
        b.close()
        return tr

    tr1 = loop.run_until_complete(make())
    tr2 = loop.run_until_complete(make())
    tr3 = other.run_until_complete(make())
    assert loop.stats()["transports"] == 2 and other.stats()["transports"] == 1
    tr1.close()
    loop.run_until_complete(until_closed(tr1))
    assert loop.stats()["transports"] == 2         # closed, still referenced
    del tr1
    gc.collect()
    assert loop.stats()["transports"] == 1
    tr3.close()
    other.run_until_complete(until_closed(tr3))
    other.close()
    del other
    gc.collect()            # the transport holds its loop: both still alive
    assert tr3.is_closing()
    del tr3
    gc.collect()            # the loop and its counts go with its last transport
    tr2.close()
    loop.run_until_complete(until_closed(tr2))
    loop.close()
    del tr2
    gc.collect()
    assert loop.stats()["transports"] == 0


@pytest.mark.loop_errors_expected       # "Task was destroyed but it is pending!"
def test_a_closed_loop_keeps_no_socket_open(any_loop):
    """100 sock_recv() tasks left waiting and 50 transports with sends the
    peer never reads (on uringloop, zero-copy ones too), the loop closed, then the tasks, transports and the
    peers' sockets dropped: once collected, no descriptor is left open,
    whether the closed loop object is still referenced or not (98 of 100
    sockets stayed open while it was)."""
    loop = any_loop

    def open_fds():
        return len(os.listdir("/proc/self/fd"))

    async def main():
        pairs = [socket.socketpair() for _ in range(100)]
        for a, _ in pairs:
            a.setblocking(False)
        tasks = [loop.create_task(loop.sock_recv(a, 100)) for a, _ in pairs]
        transports = []
        for i in range(50):
            mine, peer = socket.socketpair()
            tr, _ = await loop.create_connection(asyncio.Protocol, sock=mine)
            tr.write(bytes(1 << 20))        # more than the socket takes
            if i % 2 and isinstance(loop, uringloop.Loop):
                for _ in range(4):
                    tr.write_zerocopy(bytearray(256 * 1024))
            transports.append((tr, peer))
        await turns()                       # the sends and receives are in flight
        return pairs, tasks, transports

    before = open_fds()
    made = loop.run_until_complete(main())
    loop.close()
    for _, peer in made[0] + made[2]:
        peer.close()
    del made
    gc.collect()
    assert open_fds() - before <= 0


NO_FD_LEFT = r"""
import asyncio, os, resource, sys, uringloop
make = uringloop.new_event_loop if sys.argv[1] == "uringloop" else asyncio.SelectorEventLoop
resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
fds = []
try:
    while True:
        fds.append(os.open("/dev/null", os.O_RDONLY))
except OSError:
    pass
try:
    make()
    print("made")
except OSError as exc:
    print(type(exc).__name__, exc.errno)
    print(exc.strerror, file=sys.stderr)
for fd in fds[:8]:
    os.close(fd)
loop = make()
print(loop.run_until_complete(asyncio.sleep(0, "then made")))
loop.close()
"""


def test_no_file_descriptor_left_for_a_loop_is_the_stdlibs_oserror():
    """With every file descriptor taken, making a loop raises the OSError
    (EMFILE) the selector loop raises, naming what could not be made: not a
    refusal of io_uring, which would send the loop to the epoll driver for
    want of a descriptor that driver needs too -- and a loop can be made
    once descriptors are free again."""
    got, said = {}, {}
    for which in ("stdlib", "uringloop"):
        out = subprocess.run([sys.executable, "-c", NO_FD_LEFT, which],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        got[which], said[which] = out.stdout.split("\n"), out.stderr
    assert got["uringloop"] == got["stdlib"] == ["OSError 24", "then made", ""]
    made = "io_uring" if LOOP_DRIVER == "ring" else "epoll driver"
    assert made in said["uringloop"], said["uringloop"]
