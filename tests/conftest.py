"""Shared fixtures.

`any_loop` runs a test on uringloop and on the stdlib loop: the stdlib is the
reference for behaviour, so a test written against it must pass on both.
`uloop` is a uringloop Loop only.  Both check, after the test, that the loop
has no io_uring request left in flight once closed.  In the debug build
(`URINGLOOP_DEBUG=1 pip install -e .`, see tests/test_debug_build.py) every
test also ends with no loop, operation, transport, held buffer view or
registered buffer left alive.
"""
import asyncio
import concurrent.futures
import contextlib
import gc
import glob
import os
import shutil
import subprocess
import sys
import threading

import pytest

import uringloop
from uringloop.core import debug_counters as _debug_counters

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "helpers"))
import netns  # noqa: E402  (tests/helpers/netns.py: the UDP sink namespaces)


# The Linux release that brought each io_uring feature a test may need.
FEATURE_SINCE = {"SEND_ZC": "6.0", "SENDMSG_ZC": "6.1", "RECV_ZC": "6.15",
                 "TASKRUN_FLAG": "5.19", "DEFER_TASKRUN": "6.1",
                 "READ_MULTISHOT": "6.7", "WAITID": "6.7", "BIND": "6.11",
                 "LISTEN": "6.11", "READV_FIXED": "6.15"}


def _loop_driver():
    """The driver a new loop runs on here ('ring' or 'epoll'), and why."""
    loop = uringloop.new_event_loop()
    try:
        stats = loop.stats()
        return stats["driver"], stats["driver_reason"]
    finally:
        loop.close()


LOOP_DRIVER, LOOP_DRIVER_REASON = _loop_driver()


def requires(*needs):
    """A mark (for a test, or a module's pytestmark) that skips unless the
    loops run on the kernel's io_uring and it offers every one of `needs`:
    opcode names ("SEND_ZC") or setup flag names ("TASKRUN_FLAG"), as
    features() reports them, or "ring" alone (a test of the ring's own
    mechanism: its counts, real zero copy, locked memory).  The one way
    tests skip on a missing kernel feature, and on the epoll driver."""
    info = uringloop.features()
    have = {name for name, ok in info["opcodes"].items() if ok} | set(info["setup_flags"])
    unknown = [n for n in needs if n not in info["opcodes"] and n not in FEATURE_SINCE
               and n not in info["setup_flags"] and n != "ring"]
    if unknown:
        raise ValueError(f"requires(): unknown io_uring features {unknown}")
    if LOOP_DRIVER != "ring":
        missing = [n for n in needs if n not in EPOLL_DRIVER_OPCODES]
        return pytest.mark.skipif(bool(missing), reason=(
            f"the loops run on the epoll driver ({LOOP_DRIVER_REASON}), "
            f"which has no {', '.join(missing)}"))
    missing = [n for n in needs if n not in have and n != "ring"]
    reason = ("kernel's io_uring lacks " + ", ".join(
        f"{n} (Linux {FEATURE_SINCE[n]})" if n in FEATURE_SINCE else n for n in missing))
    return pytest.mark.skipif(bool(missing), reason=reason)


# What the epoll driver carries out (ring/readiness.c): zero-copy sends as
# copies, so a test of their contract runs on it and one of real zero copy
# asks for "ring" too.
EPOLL_DRIVER_OPCODES = {"NOP", "READ", "WRITE", "FSYNC", "POLL_ADD", "SENDMSG", "RECVMSG",
                        "TIMEOUT", "ASYNC_CANCEL", "OPENAT", "CLOSE", "STATX", "SEND",
                        "RECV", "SPLICE", "SEND_ZC", "SENDMSG_ZC", "FTRUNCATE"}


def _close_and_check(loop):
    if not loop.is_closed():
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
    if isinstance(loop, uringloop.Loop):
        assert loop.stats()["ops_in_flight"] == 0, loop.stats()


@pytest.fixture
def uloop():
    loop = uringloop.new_event_loop()
    asyncio.set_event_loop(loop)
    yield loop
    asyncio.set_event_loop(None)
    _close_and_check(loop)
    gc.collect()


@pytest.fixture(params=["uringloop", "asyncio"])
def any_loop(request):
    if request.param == "uringloop":
        loop = uringloop.new_event_loop()
    else:
        loop = asyncio.SelectorEventLoop()
    asyncio.set_event_loop(loop)
    yield loop
    asyncio.set_event_loop(None)
    _close_and_check(loop)
    gc.collect()


@pytest.fixture(autouse=True)
def no_unexpected_loop_errors(monkeypatch, request):
    """An error a uringloop Loop reports through its default exception
    handler (an exception raised in a completion handler, a callback or a
    protocol; a transport's fatal error) fails the test, unless the test is
    marked `loop_errors_expected` -- otherwise a broken completion handler
    is only a log line and every test passes (issue #18).  Tests that set
    their own handler see the calls themselves."""
    seen = []
    original = uringloop.Loop.default_exception_handler

    def recording(self, context):
        seen.append((context.get("message"), repr(context.get("exception"))))
        return original(self, context)

    monkeypatch.setattr(uringloop.Loop, "default_exception_handler", recording)
    yield
    gc.collect()        # a task of this test destroyed pending says so now
    if seen and request.node.get_closest_marker("loop_errors_expected") is None:
        pytest.fail(f"the loop reported unexpected errors: {seen}", pytrace=False)


@pytest.fixture(autouse=True)
def every_closed_loop_is_drained(monkeypatch, request):
    """After each test, every uringloop Loop the test made and closed has
    no io_uring request left in flight: close() got every buffer back from
    the kernel (otherwise it keeps them, and says so)."""
    import weakref

    made = []
    original_init = uringloop.Loop.__init__

    def tracking_init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        made.append(weakref.ref(self))

    monkeypatch.setattr(uringloop.Loop, "__init__", tracking_init)
    before = _owned_by_no_open_loop()
    yield
    for ref in made:
        loop = ref()
        if loop is not None and loop.is_closed():
            assert loop.stats()["ops_in_flight"] == 0, (loop, loop.stats())
            if (loop.stats()["transports"]
                    and request.node.module.__name__ != "test_cpython_asyncio"):
                # every transport of a closed loop is garbage once the test
                # is over (stats()['transports'] counts per loop, in every
                # build: a reference the loop leaked shows here; CPython's
                # own TestCases keep exceptions, and with them transports,
                # on self beyond this teardown)
                gc.collect()
                assert loop.stats()["transports"] == 0, \
                    f"transports of a closed loop not collected: {loop.stats()}"
    loop = None
    if before is not None and request.node.module.__name__ != "test_cpython_asyncio":
        # the debug build: nothing the test made outlives it.  (CPython's own
        # TestCases keep loops, handlers and exception contexts on self
        # beyond this teardown, so their leftovers say nothing about ours.)
        del made
        # pytest holds the test's fixture values until after this teardown
        # (and a unittest TestCase keeps its self.loop)
        values = list(getattr(request.node, "funcargs", {}).values())
        values += list(vars(getattr(request.node, "instance", None) or object).values()) \
            if getattr(request.node, "instance", None) is not None else []
        held = [v for v in values if isinstance(v, uringloop.Loop)]
        del values
        after = _owned_by_no_open_loop()
        after["loops"] -= sum(1 for loop in held if loop.is_closed())
        kept = request.node.get_closest_marker("kept_by_kernel")
        if kept is not None:
            # (a loop closed from a thread that cannot cancel its requests
            # keeps what the kernel holds: by design, not a leak)
            after["operations"] -= kept.kwargs["operations"]
        leaked = {kind: after[kind] - before[kind] for kind in after
                  if after[kind] != before[kind]}
        assert not leaked, f"still alive after the test: {leaked}"


def _owned_by_no_open_loop():
    """The debug build's live-object counts, less what loops that are still
    open own (pytest-asyncio keeps a loop per scope): one loop, its two
    file descriptors and its requests in flight each.  None in the normal
    build."""
    if _debug_counters() is None:
        return None
    gc.collect()
    counts = _debug_counters()
    for obj in gc.get_objects():
        if isinstance(obj, uringloop.Loop) and not obj.is_closed():
            counts["loops"] -= 1
            counts["loop_fds"] -= 2
            counts["operations"] -= obj.stats()["ops_in_flight"]
    return counts


# pytest-asyncio: how a project runs its async tests on uringloop.  From
# pytest-asyncio 1.x the pytest_asyncio_loop_factories hook names the loop
# factory; older versions take an event_loop_policy fixture returning
# uringloop.EventLoopPolicy() instead.
try:
    from pytest_asyncio.plugin import PytestAsyncioSpecs as _specs
except ImportError:
    _specs = None

if _specs is not None and hasattr(_specs, "pytest_asyncio_loop_factories"):
    def pytest_asyncio_loop_factories(config, item):
        return {"uringloop": uringloop.new_event_loop}
else:
    @pytest.fixture
    def event_loop_policy():
        return uringloop.EventLoopPolicy()


@pytest.fixture
def udp_sink_namespaces():
    """Two network namespaces joined by veth (MTU 65535); the sink drops UDP
    in its nftables input hook, before any socket: the one path on this
    machine where the kernel really sends without copying."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not installed (iproute2 / nftables)")
    src, sink = f"ulzc_src_{os.getpid()}", f"ulzc_sink_{os.getpid()}"
    try:
        netns.make_udp_sink(src, sink, "ulzc")
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"cannot build the namespaces: {exc.stderr!r}")
    yield src
    netns.drop_namespaces(src, sink)


# Child test runs on debug builds of the tree (URINGLOOP_DEBUG=1: -O0, the
# live-object counters): test_debug_build.py's on this Python (those files
# under the leak checks), test_other_pythons.py's on 3.12 and 3.13 (the core
# files plus that version's own test_asyncio mixins).  Each copies the tree,
# builds it and runs a child pytest, a few minutes of one core; one after
# another, in their tests, they were 8 of the suite's 15 minutes.  So the
# runs a session has selected (their tests' debug_run marks) start with the
# session, one at a time beside it on the other core, and their tests only
# wait for them to end.
DEBUG_RUN_FILES = {
    "this-python": ["tests/test_zerocopy.py",
                    "tests/test_registered_buffers.py", "tests/test_stress.py",
                    "tests/test_zcrx.py", "tests/test_life_cycle_checks.py",
                    # pauses, closes and raising callbacks in every read mode:
                    # the transports' state tables are checked on each move there
                    "tests/test_flow_control_and_pause.py", "tests/test_streams.py",
                    "tests/test_servers.py", "tests/test_pipes.py", "tests/test_datagrams.py",
                    # the kept data_received against the lookup (method_cache.h)
                    "tests/test_method_lookup.py",
                    # the loop's spare bytes objects (read_bytes.h): none alive after
                    "tests/test_read_bytes.py",
                    # readers switched by set_protocol() mid-stream; chained
                    # zero-copy links cancelled (a completion for an op no
                    # longer in flight stops the debug build)
                    "tests/test_protocol_switch.py", "tests/test_datagram_send.py"],
    "3.12": ["tests/test_loop.py", "tests/test_sock_ops.py", "tests/test_streams.py",
             "tests/test_zerocopy.py", "tests/test_registered_buffers.py",
             "tests/test_stress.py", "tests/test_cpython_asyncio.py", "tests/test_files.py",
             # 3.12 reads an object's attribute values its own way, 3.13 not at all
             "tests/test_method_lookup.py",
             # bytes objects given on by reference count (read_bytes.h)
             "tests/test_read_bytes.py"],
}
# (3.13: the Unix server's clean-up of its socket file)
DEBUG_RUN_FILES["3.13"] = DEBUG_RUN_FILES["3.12"] + ["tests/test_unix_server.py"]


def find_python(version):
    """A pyenv build first (the pyenv shim on PATH may refuse to run a
    version that is not selected), then python3.X on PATH."""
    candidates = sorted(glob.glob(f"/root/.pyenv/versions/{version}.*/bin/python{version}"))
    if candidates:
        return candidates[-1]
    return shutil.which(f"python{version}")


class DebugRun:
    """One debug run: the interpreter, the tree copy it builds in, and when
    done the build's and the child pytest's (returncode, stdout, stderr)."""

    def __init__(self, name, tree):
        self.name, self.tree = name, tree
        self.python = sys.executable if name == "this-python" else find_python(name)
        self.skip = None
        self.env = dict(os.environ, URINGLOOP_DEBUG="1", PYTHONPATH=str(tree / "src"))
        self.build = self.tests = None
        need = "import Cython" if name == "this-python" else \
            "import Cython, pytest, hypothesis, pytest_asyncio, pytest_timeout"
        if self.python is None:
            self.skip = f"no python{name} on this machine"
        elif subprocess.run([self.python, "-c", need], capture_output=True).returncode:
            self.skip = f"{self.python} lacks what the debug run needs ({need})"

    def check(self):
        """Fail with the child's findings unless it built and passed."""
        code, out, err = self.build
        assert code == 0, err[-3000:]
        code, out, err = self.tests
        findings = [line for line in out.splitlines()
                    if "still alive" in line or line.startswith(("FAILED", "ERROR tests"))]
        assert code == 0, "\n".join(findings) + "\n" + out[-3000:] + err[-2000:]
        assert " passed" in out
        return out


class DebugRuns:
    """The session's debug runs, one at a time in a worker thread; the
    children are killed if the session ends first."""

    def __init__(self, names, tmp_path_factory):
        self.procs, self.stopping = set(), False
        self.lock = threading.Lock()
        self.runs = {name: DebugRun(name, tmp_path_factory.mktemp(f"debug-{name}"))
                     for name in names}
        self.pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="debug-run")
        self.done = {name: self.pool.submit(self.work, run)
                     for name, run in self.runs.items() if run.skip is None}

    def call(self, run, args, timeout):
        with self.lock:
            if self.stopping:
                raise RuntimeError("the session ended first")
            proc = subprocess.Popen(args, cwd=run.tree, env=run.env, text=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            self.procs.add(proc)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            err += f"\n{args[1:3]} took more than {timeout} s"
        finally:
            with self.lock:
                self.procs.discard(proc)
        return proc.returncode, out, err

    def work(self, run):
        root = os.path.join(os.path.dirname(__file__), os.pardir)
        for part in ("src", "tests", "examples", "docs"):
            shutil.copytree(os.path.join(root, part), run.tree / part,
                            ignore=shutil.ignore_patterns("*.so", "core.c", "__pycache__"))
        for part in ("setup.py", "pyproject.toml", "README.md", "LICENSE-MIT", "LICENSE-APACHE"):
            shutil.copy(os.path.join(root, part), run.tree / part)
        run.build = self.call(run, [run.python, "setup.py", "build_ext", "--inplace"], 600)
        if run.build[0] == 0:
            run.tests = self.call(run, [run.python, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                        "-W", "error::pytest.PytestUnraisableExceptionWarning"]
                                  + DEBUG_RUN_FILES[run.name], 900)
        return run

    def finished(self, name):
        """The run `name` once done (skips with its reason where it cannot
        run here)."""
        run = self.runs[name]
        if run.skip is not None:
            pytest.skip(run.skip)
        return self.done[name].result()

    def stop(self):
        with self.lock:
            self.stopping = True
            for proc in self.procs:
                proc.kill()
        self.pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(scope="session", autouse=True)
def debug_runs(request, tmp_path_factory):
    """The DebugRuns of the tests selected with a debug_run(name) mark,
    started with the session (autouse)."""
    names = []
    for item in request.session.items:
        mark = item.get_closest_marker("debug_run")
        if mark is not None and mark.args[0] not in names:
            names.append(mark.args[0])
    if not names:
        yield None
        return
    runs = DebugRuns(names, tmp_path_factory)
    yield runs
    runs.stop()


def cycle_garbage(loop, make_coro):
    """The type names of the cycle garbage one run of make_coro() on loop
    leaves (after a first run that makes any lazy state).  The selector
    loop frees its transports and watches by reference count; tornado's
    circlerefs tests fail on cycle garbage."""
    loop.run_until_complete(make_coro())
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        loop.run_until_complete(make_coro())
        gc.collect()
        return [type(o).__name__ for o in gc.garbage]
    finally:
        gc.garbage.clear()
        gc.set_debug(0)
        gc.enable()


def on_both_loops(scenario, *args):
    """(ours, reference): scenario(loop, *args) on a new uringloop loop,
    then on asyncio.SelectorEventLoop, each loop closed after its run."""
    results = []
    for make in (uringloop.new_event_loop, asyncio.SelectorEventLoop):
        loop = make()
        try:
            results.append(scenario(loop, *args))
        finally:
            loop.close()
    return tuple(results)


async def recv_until_eof(loop, sock, size, timeout=None):
    """Everything sock receives until the peer's end of stream, with
    loop.sock_recv(sock, size) (each receive bounded by timeout, if given)."""
    got = b""
    while True:
        receive = loop.sock_recv(sock, size)
        # (no wait_for without a timeout: it would run each receive in a task)
        data = await (receive if timeout is None else asyncio.wait_for(receive, timeout))
        if not data:
            return got
        got += data


def bytes_held_for(transport, delivered=0):
    """Bytes that reached this end of a stream and were not handed to the
    protocol (which got `delivered`): waiting in the socket (FIONREAD), and
    on uringloop those its transport took from the socket and keeps."""
    import fcntl
    import struct
    import termios
    sock = transport.get_extra_info("socket")
    waiting = struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0" * 4))[0]
    reading = transport.get_extra_info("reading")      # (uringloop's)
    return waiting + (reading["received_bytes"] - delivered if reading else 0)


async def until(predicate, what, timeout=10):
    """Wait until predicate() is true: an event the scenario expects (a
    callback recorded, a connection made), where a sleep of fixed length
    may end on a loaded machine before it came.  Fails, naming `what`,
    after `timeout` seconds.  Returns what predicate() gave."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not (got := predicate()):
        assert loop.time() < deadline, f"{what} never came"
        await asyncio.sleep(0.001)
    return got


async def turns(n=3):
    """Let the loop run n iterations: where a scenario needs the loop to
    have submitted what it was asked (a receive armed, a cancel sent) and
    no event shows it, or looks for an absence (no callback after
    remove_reader()), which no event can show.  Counted in iterations,
    not seconds: a loaded machine runs them all the same."""
    for _ in range(n):
        await asyncio.sleep(0)


async def until_closed(*transports, timeout=10):
    """Wait until each transport's connection_lost() has run: its socket
    or pipe is closed then, on both loops."""
    def shut(transport):
        sock = transport.get_extra_info("socket")
        if sock is not None:
            return sock.fileno() == -1
        return transport.get_extra_info("pipe").closed
    for transport in transports:
        await until(lambda: shut(transport), f"{transport!r} closed", timeout)


def readable(sock):
    """Whether sock has something to read (or its end of stream), now."""
    import select
    return bool(select.select([sock], [], [], 0)[0])


async def until_held(transport, n, delivered=0, timeout=10):
    """Wait until at least n bytes reached the transport and were not
    delivered: an event, where a sleep of fixed length may end on a loaded
    machine before they came; then let the loop run a few iterations, its
    chances to deliver them wrongly."""
    await until(lambda: bytes_held_for(transport, delivered) >= n,
                f"{n} bytes at the transport", timeout)
    await turns()


TINY_MEMLOCK_PREAMBLE = """
import asyncio, os, resource, uringloop
resource.setrlimit(resource.RLIMIT_MEMLOCK, (1 << 20, 1 << 20))
async def sink_connection():
    # (loop, transport in ZC_ALWAYS mode, bytes received, closed future)
    loop = asyncio.get_running_loop()
    done = loop.create_future(); got = bytearray()
    class Sink(asyncio.Protocol):
        def data_received(self, d): got.extend(d)
        def connection_lost(self, exc): done.set_result(exc)
    srv = await loop.create_server(Sink, '127.0.0.1', 0)
    tr, _ = await loop.create_connection(asyncio.Protocol, *srv.sockets[0].getsockname())
    tr.get_extra_info('socket').setsockopt(uringloop.SOL_URINGLOOP, uringloop.ZC_MODE, uringloop.ZC_ALWAYS)
    return loop, tr, got, done
"""


def without_ipc_lock():
    """The command prefix that runs a child without CAP_IPC_LOCK, so that
    RLIMIT_MEMLOCK binds it: root has that capability, which makes the
    kernel skip the limit, so a root child drops it with setpriv (skips
    when setpriv is missing).  Others run as they are."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) needed to drop CAP_IPC_LOCK")
    return [setpriv, "--bounding-set=-ipc_lock", "--inh-caps=-ipc_lock"]


@pytest.fixture(scope="session")
def self_signed_cert(tmp_path_factory):
    """(cert path, key path) of a self-signed certificate for localhost,
    made with openssl(1); skips without it."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl command not found to make a certificate")
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                    "-keyout", str(key), "-out", str(cert), "-days", "1",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"],
                   check=True, capture_output=True)
    return str(cert), str(key)


@pytest.fixture(scope="session")
def deny_io_uring(tmp_path_factory):
    """tests/helpers/deny_io_uring.c built: a command prefix that runs a
    child under a seccomp filter refusing io_uring, as Docker's default
    profile does."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler to build the seccomp helper")
    exe = tmp_path_factory.mktemp("seccomp") / "deny_io_uring"
    src = os.path.join(os.path.dirname(__file__), "helpers", "deny_io_uring.c")
    subprocess.run([cc, "-O2", "-o", str(exe), src], check=True)
    return str(exe)


IO_URING_DISABLED = "/proc/sys/kernel/io_uring_disabled"


@contextlib.contextmanager
def io_uring_disabled(value="2"):
    """kernel.io_uring_disabled set to `value` machine-wide for the block,
    then restored.  Every process on the machine is refused meanwhile, so
    this runs only when asked for: URINGLOOP_TEST_SYSCTL=1 (docs/testing.md);
    otherwise, and on a kernel without the sysctl or without root, the test
    skips.  The refusal itself is tested without it, under a seccomp filter
    on the child (deny_io_uring)."""
    if os.environ.get("URINGLOOP_TEST_SYSCTL") != "1":
        pytest.skip("sets kernel.io_uring_disabled machine-wide: "
                    "run with URINGLOOP_TEST_SYSCTL=1 on a machine of your own")
    if not os.path.exists(IO_URING_DISABLED):
        pytest.skip("kernel has no kernel.io_uring_disabled (older than 6.6)")
    if os.geteuid() != 0 or not os.access(IO_URING_DISABLED, os.W_OK):
        pytest.skip("changing kernel.io_uring_disabled needs root")
    with open(IO_URING_DISABLED) as f:
        old = f.read().strip()
    try:
        with open(IO_URING_DISABLED, "w") as f:
            f.write(value)
        yield
    finally:
        with open(IO_URING_DISABLED, "w") as f:
            f.write(old)


def run_with_tiny_memlock(body):
    """Run `body` (an async main() that may use sink_connection()) in a child
    whose RLIMIT_MEMLOCK is 1 MiB, without CAP_IPC_LOCK."""
    prefix = without_ipc_lock()
    code = TINY_MEMLOCK_PREAMBLE + body + "\nuringloop.run(main())\n"
    out = subprocess.run(prefix + [sys.executable, "-c", code],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout

