"""Run a real framework's own test suite on uringloop, the stdlib loop and
uvloop side by side, and print the counts of each.

    python3 tests/conformance/run_framework_suite.py anyio [--workdir DIR]
    python3 tests/conformance/run_framework_suite.py uvicorn
    python3 tests/conformance/run_framework_suite.py aiohttp
    python3 tests/conformance/run_framework_suite.py uvloop
    python3 tests/conformance/run_framework_suite.py aiosmtplib
    python3 tests/conformance/run_framework_suite.py asyncssh
    python3 tests/conformance/run_framework_suite.py hypercorn
    python3 tests/conformance/run_framework_suite.py tornado
    python3 tests/conformance/run_framework_suite.py pyzmq

What it does, for anyio (pinned below):
  - makes a virtual environment in the work directory (default
    /tmp/uringloop-conformance) that sees this Python's packages, so the
    uringloop you installed (pip install -e .) is the one tested, and puts
    the suite's test dependencies in it;
  - fetches the framework's sdist with pip (the sdist carries the tests),
    unpacks it and installs it into that environment;
  - adds uringloop to the suite's own loop parametrisation (anyio: one more
    `anyio_backend`, ("asyncio", {"loop_factory": uringloop.new_event_loop}),
    beside its "asyncio" and "asyncio+uvloop" ones), so every test runs once
    per loop in the same pytest run;
  - runs pytest on the asyncio backends and counts passed / failed / errors /
    skipped per loop from the per-test report lines.

For uvicorn (pinned below) the suite runs twice, its anyio_backend fixture
returning the stdlib loop, then ("asyncio", {"loop_factory":
uringloop.new_event_loop}), and the summary lines are compared.

For aiohttp (pinned below; the aiohttp installed beside uringloop must be
the same version, since its pytest plugin and C parsers are the ones the
suite runs on) the suite's conftest loads a small plugin written by this
script in place of aiohttp.pytest_plugin: it re-exports that plugin and
parametrises the `loop_factory` fixture with pyloop, uvloop and uringloop,
so each loop-driven test runs once per loop in one run (pytest-xdist, -n 2).

For uvloop (pinned below) its own test suite, whose scenarios run once on
uvloop and once on asyncio (Test_UV_* and Test_AIO_* classes): the asyncio
variants run twice, on the stdlib loop and then with uvloop's test base
making uringloop loops, and the failures are compared.

aiosmtplib and asyncssh (pinned below) have a loop switch of their own
(an --event-loop option, a USE_UVLOOP variable); the runner teaches it
uringloop and runs the suite once per loop.  hypercorn's pytest-asyncio
tests are parametrised over both loops by pytest-asyncio's own
pytest_asyncio_loop_factories hook (a plugin this script writes), the way
to run any suite built on pytest-asyncio 1.5 or later.  tornado's tests
ship inside its wheel and run under its own unittest runner, once per loop
(chosen by the event loop policy).

Not part of CI (see docs/testing.md for how long a run takes).
"""
import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tarfile

ANYIO_VERSION = "4.16.0"
ANYIO_TEST_DEPS = ["pytest>=9", "blockbuster", "hypothesis", "psutil", "pytest-mock",
                   "pytest-timeout", "trustme", "truststore", "uvloop",
                   "typing_extensions>=4.16"]   # (anyio 4.16 imports its sentinel)
ANYIO_PARAM = '''import uringloop as _uringloop
asyncio_params.append(pytest.param(
    ("asyncio", {"debug": True, "loop_factory": _uringloop.new_event_loop}),
    id="asyncio+uringloop"))
'''


def sh(*cmd, **kw):
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, check=True, **kw)


def venv(workdir):
    path = os.path.join(workdir, "venv")
    python = os.path.join(path, "bin", "python")
    if not os.path.exists(python):
        sh(sys.executable, "-m", "venv", "--system-site-packages", path)
    return python


def fetch_sdist(python, workdir, name, version):
    tree = os.path.join(workdir, f"{name}-{version}")
    if os.path.isdir(tree):
        return tree
    sh(python, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
       "-d", workdir, f"{name}=={version}")
    with tarfile.open(os.path.join(workdir, f"{name}-{version}.tar.gz")) as tar:
        tar.extractall(workdir)
    return tree


def prepare_sdist(workdir, name, version, deps, install=True):
    """A virtual environment in workdir with deps, and name's sdist unpacked
    there (and installed without its dependencies): (python, tree)."""
    os.makedirs(workdir, exist_ok=True)
    python = venv(workdir)
    sh(python, "-m", "pip", "install", "-q", *deps)
    tree = fetch_sdist(python, workdir, name, version)
    if install:
        sh(python, "-m", "pip", "install", "-q", "--no-deps", tree)
    return python, tree


def run_pytest(python, cwd, report, options, args, env=None):
    """pytest on cwd's tests/, quiet, with report (-rA or -rfE), no cache and
    none of the suite's own addopts, then options and the user's arguments."""
    return subprocess.run(
        [python, "-m", "pytest", "tests", "-q", report, "-p", "no:cacheprovider",
         "-o", "addopts=", *options, *args.pytest_args],
        cwd=cwd, capture_output=True, text=True, env=env)


def prepare_anyio(workdir):
    python, tree = prepare_sdist(workdir, "anyio", ANYIO_VERSION, ANYIO_TEST_DEPS)
    conftest = os.path.join(tree, "tests", "conftest.py")
    with open(conftest) as f:
        text = f.read()
    if "asyncio+uringloop" not in text:
        anchor = "backend_params = asyncio_params.copy()"
        if anchor not in text:
            raise SystemExit(f"anyio's conftest changed: {anchor!r} not found")
        with open(conftest, "w") as f:
            f.write(text.replace(anchor, ANYIO_PARAM + anchor, 1))
    return python, tree


UVICORN_VERSION = "0.54.0"
UVICORN_TEST_DEPS = ["pytest>=9.1.1", "pytest-mock", "pytest-timeout", "trustme",
                     "cryptography", "httpx2", "a2wsgi", "wsproto", "h11", "httptools",
                     "websockets", "python-dotenv", "pyyaml", "watchfiles", "anyio>=4", "uvloop"]
UVICORN_BACKEND = '''@pytest.fixture
def anyio_backend():
    import os
    if os.environ.get("URINGLOOP_SUITE_LOOP") == "uringloop":
        import uringloop
        return ("asyncio", {"loop_factory": uringloop.new_event_loop})
    if os.environ.get("URINGLOOP_SUITE_LOOP") == "uvloop":
        import uvloop
        return ("asyncio", {"loop_factory": uvloop.new_event_loop})
    return "asyncio"'''


def prepare_uvicorn(workdir):
    python = venv(os.path.join(workdir, "uvicorn"))
    sh(python, "-m", "pip", "install", "-q", *UVICORN_TEST_DEPS)
    tree = fetch_sdist(python, workdir, "uvicorn", UVICORN_VERSION)
    sh(python, "-m", "pip", "install", "-q", tree)
    conftest = os.path.join(tree, "tests", "conftest.py")
    with open(conftest) as f:
        text = f.read()
    if "URINGLOOP_SUITE_LOOP" not in text:
        old = '''@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"'''
        if old not in text:
            raise SystemExit("uvicorn's conftest changed: its anyio_backend fixture not found")
        with open(conftest, "w") as f:
            f.write(text.replace(old, UVICORN_BACKEND, 1))
    elif '"uvloop"' not in text:
        # a tree patched by an older version of this script
        start = text.index("@pytest.fixture\ndef anyio_backend():")
        end = text.index('return "asyncio"', start) + len('return "asyncio"')
        with open(conftest, "w") as f:
            f.write(text[:start] + UVICORN_BACKEND + text[end:])
    return python, tree


def run_uvicorn(args):
    python, tree = prepare_uvicorn(args.workdir)
    loops = ("stdlib", "uvloop", "uringloop") if args.uvloop else ("stdlib", "uringloop")
    runs = {}
    for loop in loops:
        # (-p no:asyncio: a pytest-asyncio seen through the system packages
        # would take over uvicorn's anyio-marked tests)
        runs[loop] = run_pytest(python, tree, "-rfE", ["-p", "no:asyncio", "--timeout", "60"],
                                args, env=dict(os.environ, URINGLOOP_SUITE_LOOP=loop))
    compare_runs("uvicorn", UVICORN_VERSION, args.workdir, runs)


AIOHTTP_VERSION = "3.14.5"
AIOHTTP_TEST_DEPS = ["pytest>=8.4", "pytest-mock", "pytest-timeout", "pytest-xdist",
                     "pytest-codspeed", "blockbuster", "freezegun", "proxy.py>=2.4.4rc5",
                     "trustme", "isal", "zlib_ng", "pkgconfig", "gunicorn", "uvloop",
                     "re-assert", "coverage", "pytest-benchmark", f"aiohttp=={AIOHTTP_VERSION}"]
# Written into the work directory and loaded by the suite's conftest instead
# of aiohttp.pytest_plugin; everything but the loop parametrisation is
# aiohttp's own plugin.
AIOHTTP_PLUGIN = '''"""aiohttp's pytest plugin with uringloop as one more loop_factory."""
import asyncio
import os

import aiohttp.pytest_plugin as _aiohttp_plugin

globals().update({name: value for name, value in vars(_aiohttp_plugin).items()
                  if not name.startswith("__")})


def pytest_generate_tests(metafunc):
    if "loop_factory" not in metafunc.fixturenames:
        return
    import uringloop
    factories = {"pyloop": asyncio.new_event_loop, "uringloop": uringloop.new_event_loop}
    try:
        import uvloop
        factories["uvloop"] = uvloop.new_event_loop
    except ImportError:
        pass
    names = [n for n in os.environ.get("URINGLOOP_SUITE_LOOPS", "pyloop,uvloop,uringloop")
             .split(",") if n in factories]
    metafunc.parametrize("loop_factory", [factories[n] for n in names], ids=names)
'''


def prepare_aiohttp(workdir):
    python = venv(os.path.join(workdir, "aiohttp"))
    sh(python, "-m", "pip", "install", "-q", *AIOHTTP_TEST_DEPS)
    tree = fetch_sdist(python, workdir, "aiohttp", AIOHTTP_VERSION)
    with open(os.path.join(tree, "tests", "uringloop_aiohttp_plugin.py"), "w") as f:
        f.write(AIOHTTP_PLUGIN)
    conftest = os.path.join(tree, "tests", "conftest.py")
    with open(conftest) as f:
        text = f.read()
    old = 'pytest_plugins = ["aiohttp.pytest_plugin", "pytester"]'
    if old in text:
        text = text.replace(old, 'pytest_plugins = ["uringloop_aiohttp_plugin", "pytester"]', 1)
        with open(conftest, "w") as f:
            f.write(text)
    elif "uringloop_aiohttp_plugin" not in text:
        raise SystemExit(f"aiohttp's conftest changed: {old!r} not found")
    return python, tree


def run_aiohttp(args):
    python, tree = prepare_aiohttp(args.workdir)
    loops = "pyloop,uvloop,uringloop" if args.uvloop else "pyloop,uringloop"
    out = subprocess.run(
        # (-P: the sdist's uncompiled aiohttp/ must not come first on sys.path)
        [python, "-P", "-m", "pytest", "tests", "-q", "-rA",
         "-p", "no:cacheprovider", "-p", "no:asyncio", "-o", "addopts=",
         # (its codspeed benchmarks run once each, on pytest-benchmark's fixture)
         "--benchmark-disable",
         "-m", "not dev_mode and not autobahn and not internal",
         "-n", "2", "--timeout", "120", *args.pytest_args],
        cwd=tree, capture_output=True, text=True,
        env=dict(os.environ, URINGLOOP_SUITE_LOOPS=loops,
                 PYTHONPATH=os.path.join(tree, "tests")))
    report("aiohttp", AIOHTTP_VERSION, args.workdir, out)


LOOP_IDS = {"uringloop": "uringloop", "pyloop": "stdlib", "uvloop": "uvloop",
            "asyncio+uringloop": "uringloop", "asyncio+uvloop": "uvloop",
            "asyncio": "stdlib", "stdlib": "stdlib"}
OUTCOME = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\s+(\S+)")


def loop_of(nodeid):
    params = re.search(r"\[(.*)\]$", nodeid)
    if not params:
        return None
    for part in params.group(1).split("-"):
        if part in LOOP_IDS:
            return LOOP_IDS[part]
    return None


def without_loop(nodeid):
    return re.sub(r"asyncio\+\w+|asyncio|pyloop|uvloop|uringloop|stdlib", "", nodeid)


def count(report_lines):
    counts = collections.defaultdict(collections.Counter)
    failures = collections.defaultdict(list)
    for line in report_lines:
        m = OUTCOME.match(line)
        if not m:
            continue
        outcome, nodeid = m.groups()
        loop = loop_of(nodeid)
        if loop is None:
            continue
        counts[loop][outcome] += 1
        if outcome in ("FAILED", "ERROR"):
            failures[loop].append(nodeid)
    return counts, failures


UVLOOP_VERSION = "0.23.0"
UVLOOP_TEST_DEPS = ["psutil", "pyOpenSSL", "aiohttp", "pytest-timeout", f"uvloop=={UVLOOP_VERSION}"]
# Written beside a copy of uvloop's tests: the suite's asyncio variants
# (Test*AIO*: the same scenarios uvloop's own variants run, with the
# stdlib's expectations) run on the loop URINGLOOP_SUITE_LOOP names.
UVLOOP_CONFTEST = '''import os
from uvloop import _testbase as tb

if os.environ.get("URINGLOOP_SUITE_LOOP") == "uringloop":
    import uringloop
    tb.AIOTestCase.new_loop = lambda self: uringloop.new_event_loop()
    tb.AIOTestCase.new_policy = lambda self: uringloop.EventLoopPolicy()
    # where the suite expects asyncio and uvloop to differ, uringloop
    # means to behave as asyncio
    tb.BaseTestCase.is_asyncio_loop = lambda self: True
'''


def run_uvloop(args):
    """uvloop's own tests, asyncio variants, on the stdlib loop and on
    uringloop: what uvloop's authors check a loop for, beside asyncio."""
    import shutil
    workdir = os.path.join(args.workdir, "uvloop")
    python, tree = prepare_sdist(workdir, "uvloop", UVLOOP_VERSION, UVLOOP_TEST_DEPS,
                                 install=False)
    # (outside the sdist: its uvloop/ is not built and must not be imported)
    suite = os.path.join(workdir, "suite")
    if not os.path.isdir(suite):
        shutil.copytree(os.path.join(tree, "tests"), os.path.join(suite, "tests"))
    with open(os.path.join(suite, "conftest.py"), "w") as f:
        f.write(UVLOOP_CONFTEST)
    runs = {}
    for loop in ("stdlib", "uringloop"):
        runs[loop] = run_pytest(python, suite, "-rfE", ["--timeout", "60", "-k", "AIO or Aio"],
                                args, env=dict(os.environ, URINGLOOP_SUITE_LOOP=loop))
    compare_runs("uvloop", UVLOOP_VERSION, args.workdir, runs)


def compare_runs(name, version, workdir, runs):
    """runs: loop -> CompletedProcess of a pytest -rfE run.  Prints each
    loop's summary and the failures on uringloop only; exits non-zero if
    there are any, or if a loop passed nothing."""
    summaries, failures = {}, {}
    for loop, out in runs.items():
        lines = out.stdout.strip().splitlines()
        summaries[loop] = lines[-1] if lines else "(no output)"
        failures[loop] = {l.split(" - ")[0] for l in lines if l.startswith(("FAILED", "ERROR"))}
    compare(name, version, workdir, runs, summaries, failures,
            lambda summary: " passed" in summary)


def compare(name, version, workdir, runs, summaries, failures, passed_some):
    """Writes each loop's log, prints its summary and the failures on
    uringloop only; exits non-zero if there are any, or if a loop's
    summary shows that nothing passed."""
    for loop, out in runs.items():
        with open(os.path.join(workdir, f"{name}-{loop}.log"), "w") as f:
            f.write(out.stdout + out.stderr)
    print(f"\n{name} {version} (logs: {workdir}/{name}-*.log)")
    for loop in summaries:
        print(f"  {loop:10} {summaries[loop]}")
    ours = sorted(failures["uringloop"] - failures["stdlib"])
    print(f"\nfailing on uringloop only ({len(ours)}):")
    for line in ours:
        print("  ", line)
    unrun = [loop for loop in summaries if not passed_some(summaries[loop])]
    if unrun:
        raise SystemExit(f"no test passed on {', '.join(unrun)}")
    if ours:
        raise SystemExit(1)


def patch_file(path, old, new, done_marker):
    with open(path) as f:
        text = f.read()
    if done_marker in text:
        return
    if old not in text:
        raise SystemExit(f"{path} changed: {old[:60]!r} not found")
    with open(path, "w") as f:
        f.write(text.replace(old, new, 1))


AIOSMTPLIB_VERSION = "5.1.3"
AIOSMTPLIB_TEST_DEPS = ["pytest>=8.4", "pytest-asyncio>=1.4", "hypothesis>=6.56",
                        "aiosmtpd>=1.4.2", "trustme>=0.9.0", "pytest-timeout"]
AIOSMTPLIB_FACTORY = """    if config.getoption("event_loop_type") == "uringloop":
        import uringloop
        return {"uringloop": uringloop.new_event_loop}
    return {"asyncio": asyncio.new_event_loop}"""


def run_aiosmtplib(args):
    """aiosmtplib's suite (an SMTP client against aiosmtpd servers in the
    same loop: STARTTLS, timeouts, lost connections) with its own
    --event-loop option, taught one more choice."""
    python, tree = prepare_sdist(os.path.join(args.workdir, "aiosmtplib"), "aiosmtplib",
                                 AIOSMTPLIB_VERSION, AIOSMTPLIB_TEST_DEPS)
    conftest = os.path.join(tree, "tests", "conftest.py")
    patch_file(conftest, 'choices=["asyncio", "uvloop"],',
               'choices=["asyncio", "uvloop", "uringloop"],', '"uringloop"]')
    patch_file(conftest, '    return {"asyncio": asyncio.new_event_loop}',
               AIOSMTPLIB_FACTORY, "import uringloop")
    runs = {}
    for loop, option in (("stdlib", "asyncio"), ("uringloop", "uringloop")):
        runs[loop] = run_pytest(python, tree, "-rfE",
                                ["--timeout", "60", "--event-loop", option], args)
    compare_runs("aiosmtplib", AIOSMTPLIB_VERSION, args.workdir, runs)


ASYNCSSH_VERSION = "2.24.1"
ASYNCSSH_TEST_DEPS = ["cryptography", "bcrypt", "pyOpenSSL", "typing_extensions",
                      "pytest", "pytest-timeout"]
ASYNCSSH_LOOP = """        if os.environ.get('USE_URINGLOOP'):
            import uringloop
            cls.loop = uringloop.new_event_loop()
        elif uvloop_available and os.environ.get('USE_UVLOOP'):"""


def run_asyncssh(args):
    """asyncssh's suite (SSH clients and servers in one loop: channels,
    port and socket forwarding, SFTP, agents, subprocesses), its test base
    taught to make uringloop loops when USE_URINGLOOP is set, as it makes
    uvloop's for USE_UVLOOP."""
    python, tree = prepare_sdist(os.path.join(args.workdir, "asyncssh"), "asyncssh",
                                 ASYNCSSH_VERSION, ASYNCSSH_TEST_DEPS)
    patch_file(os.path.join(tree, "tests", "util.py"),
               "        if uvloop_available and os.environ.get('USE_UVLOOP'):",
               ASYNCSSH_LOOP, "USE_URINGLOOP")
    runs = {}
    for loop in ("stdlib", "uringloop"):
        env = dict(os.environ)
        env.pop("USE_URINGLOOP", None)
        if loop == "uringloop":
            env["USE_URINGLOOP"] = "1"
        runs[loop] = run_pytest(python, tree, "-rfE", ["--timeout", "120"], args, env=env)
    compare_runs("asyncssh", ASYNCSSH_VERSION, args.workdir, runs)


HYPERCORN_VERSION = "0.18.0"
HYPERCORN_TEST_DEPS = ["h11", "h2", "wsproto", "priority", "pytest-asyncio>=1.5",
                       "pytest-timeout", "hypothesis", "httpx"]
# Loaded with -p: pytest-asyncio (1.5 and later) runs every test it drives
# once per loop this hook names, in one run.
LOOP_FACTORIES_PLUGIN = '''"""Every pytest-asyncio test once on the stdlib loop, once on uringloop."""
import asyncio


def pytest_asyncio_loop_factories(config, item):
    import uringloop
    return {"stdlib": asyncio.new_event_loop, "uringloop": uringloop.new_event_loop}
'''


def run_hypercorn(args):
    """hypercorn's suite (its asyncio half: HTTP/1, HTTP/2 and WebSocket
    servers, keep-alive, lifespan), every pytest-asyncio test parametrised
    over the stdlib loop and uringloop by pytest-asyncio's own
    pytest_asyncio_loop_factories hook.  (Its trio half is left out: it
    does not import with the trio pip gives here.)"""
    workdir = os.path.join(args.workdir, "hypercorn")
    python, tree = prepare_sdist(workdir, "hypercorn", HYPERCORN_VERSION, HYPERCORN_TEST_DEPS)
    out = run_pytest_per_loop(python, tree, workdir,
                              ["--timeout", "60", "--ignore", "tests/trio"], args)
    report("hypercorn", HYPERCORN_VERSION, args.workdir, out)


def run_pytest_per_loop(python, cwd, workdir, options, args, path=()):
    """run_pytest (-rA) with every pytest-asyncio test once per loop: the
    loop-factories plugin is written into workdir and loaded from there
    (path: more directories the suite imports from)."""
    with open(os.path.join(workdir, "uringloop_factories.py"), "w") as f:
        f.write(LOOP_FACTORIES_PLUGIN)
    return run_pytest(python, cwd, "-rA", ["-p", "uringloop_factories", *options], args,
                      env=dict(os.environ, PYTHONPATH=os.pathsep.join([workdir, *path])))


PYZMQ_VERSION = "27.2.0"
PYZMQ_TEST_DEPS = [f"pyzmq=={PYZMQ_VERSION}", "tornado", "pytest>=8", "pytest-asyncio>=1.5",
                   "pytest-timeout"]


def run_pyzmq(args):
    """pyzmq's suite: zmq.asyncio sockets (add_reader on the edge-triggered
    ZMQ_FD), futures, the tornado ZMQStream, authenticators, and the
    synchronous rest; every pytest-asyncio test once per loop through the
    same loop-factories plugin as hypercorn's.  The sdist's tests run
    against the wheel of the same version (building libzmq is not needed)."""
    workdir = os.path.join(args.workdir, "pyzmq")
    python, tree = prepare_sdist(workdir, "pyzmq", PYZMQ_VERSION, PYZMQ_TEST_DEPS,
                                 install=False)
    # (run from a copy of the tests alone: the sdist's zmq/ would shadow
    # the installed, compiled package)
    suite = os.path.join(workdir, "suite")
    if not os.path.isdir(suite):
        shutil.copytree(os.path.join(tree, "tests"), os.path.join(suite, "tests"))
    out = run_pytest_per_loop(
        python, suite, workdir,
        ["--import-mode=importlib", "--timeout", "120", "-o", "asyncio_mode=auto"], args,
        path=[os.path.join(suite, "tests")])
    report("pyzmq", PYZMQ_VERSION, args.workdir, out)


TORNADO_VERSION = "6.6.1"
# tornado's tests ship inside the package (tornado.test) and run with its
# own runner, which fails a run that logs a warning or writes to stderr.
TORNADO_DRIVER = """import asyncio, sys
if sys.argv.pop(1) == "uringloop":
    import uringloop
    asyncio.set_event_loop_policy(uringloop.EventLoopPolicy())
from tornado.test.runtests import main, all
main()
"""


def run_tornado(args):
    """tornado's suite (IOLoop on asyncio: add_reader/add_writer streams,
    HTTP/1 client and server, websockets, TCP client and server, threads
    running loops, reference cycles), run by its own runner once per loop,
    the loop chosen by the event loop policy."""
    workdir = os.path.join(args.workdir, "tornado")
    os.makedirs(workdir, exist_ok=True)
    python = venv(workdir)
    sh(python, "-m", "pip", "install", "-q", f"tornado=={TORNADO_VERSION}")
    driver = os.path.join(workdir, "run_on.py")
    with open(driver, "w") as f:
        f.write(TORNADO_DRIVER)
    runs, summaries, failures = {}, {}, {}
    for loop in ("stdlib", "uringloop"):
        out = subprocess.run([python, driver, loop, *args.pytest_args], cwd=workdir,
                             capture_output=True, text=True, timeout=1800)
        runs[loop] = out
        lines = out.stderr.splitlines()
        ran = [l for l in lines if l.startswith("Ran ")]
        verdict = [l for l in lines if l.startswith(("OK", "FAILED"))]
        logged = [l.split("runtests:", 1)[-1].split("] ", 1)[-1] for l in lines if "logged " in l]
        summaries[loop] = " ".join(ran[-1:] + verdict[-1:] + logged[-1:]) or "(no summary)"
        failures[loop] = {l for l in lines if l.startswith(("FAIL: ", "ERROR: "))}
        if logged:
            # the runner's own check: warnings or stderr output fail the run
            failures[loop].add("runner: " + logged[-1])
    compare("tornado", TORNADO_VERSION, args.workdir, runs, summaries, failures,
            lambda summary: summary.startswith("Ran ") and not summary.startswith("Ran 0 "))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("suite", choices=["anyio", "uvicorn", "aiohttp", "uvloop",
                                          "aiosmtplib", "asyncssh", "hypercorn",
                                          "tornado", "pyzmq"])
    parser.add_argument("--workdir", default="/tmp/uringloop-conformance")
    parser.add_argument("--uvloop", action="store_true",
                        help="also run the suite's asyncio+uvloop cases (with uvloop "
                             "0.23 one of anyio's tests hung in epoll_wait for good here)")
    parser.add_argument("pytest_args", nargs="*")
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    if args.suite == "uvicorn":
        return run_uvicorn(args)
    if args.suite == "aiohttp":
        return run_aiohttp(args)
    if args.suite == "uvloop":
        return run_uvloop(args)
    if args.suite == "aiosmtplib":
        return run_aiosmtplib(args)
    if args.suite == "asyncssh":
        return run_asyncssh(args)
    if args.suite == "hypercorn":
        return run_hypercorn(args)
    if args.suite == "tornado":
        return run_tornado(args)
    if args.suite == "pyzmq":
        return run_pyzmq(args)
    python, tree = prepare_anyio(args.workdir)
    # (cases that also drive trio, such as [asyncio-trio] portals, are left
    # out: one hung for good on the stdlib loop here)
    out = run_pytest(python, tree, "-rA", [
        "--timeout", "60",
        "-k", "asyncio and not trio" if args.uvloop else "asyncio and not uvloop and not trio"],
        args)
    report("anyio", ANYIO_VERSION, args.workdir, out)


def report(suite, version, workdir, out):
    log = os.path.join(workdir, f"{suite}.log")
    with open(log, "w") as f:
        f.write(out.stdout + out.stderr)
    counts, failures = count(out.stdout.splitlines())
    print(f"\n{suite} {version}: per loop (full log: {log})")
    print("| loop | passed | failed | errors | skipped |")
    print("|---|---|---|---|---|")
    for loop in ("stdlib", "uvloop", "uringloop"):
        c = counts.get(loop, collections.Counter())
        print(f"| {loop} | {c['PASSED']} | {c['FAILED']} | {c['ERROR']} | {c['SKIPPED']} |")
    stdlib_bad = {without_loop(n) for n in failures.get("stdlib", [])}
    only_ours = [n for n in failures.get("uringloop", []) if without_loop(n) not in stdlib_bad]
    print(f"\nfailing on uringloop only ({len(only_ours)}):")
    for nodeid in only_ours:
        print("  ", nodeid)
    unrun = [loop for loop in ("stdlib", "uringloop") if not counts.get(loop, {}).get("PASSED")]
    if unrun:
        # a suite that did not collect (a missing test dependency) passes
        # nothing on any loop: that is a failed run, not a clean one
        tail = "\n".join(out.stdout.strip().splitlines()[-5:])
        raise SystemExit(f"no test passed on {', '.join(unrun)}; the end of the log:\n{tail}")
    if only_ours:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
