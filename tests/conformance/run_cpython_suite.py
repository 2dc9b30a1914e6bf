"""Run CPython's installed test_asyncio modules with uringloop as asyncio's
default loop, and report pass/fail counts per module.

    python3 tests/conformance/run_cpython_suite.py [module ...] [--json FILE]
    python3 tests/conformance/run_cpython_suite.py --compare RING.json EPOLL.json

Every loop these modules make through asyncio.new_event_loop(), asyncio.run()
or the default policy is a uringloop.Loop (the default policy class is
replaced, so the tests' own policy resets keep uringloop).  Modules that
test one specific stdlib loop class (selector/proactor/unix internals) are
not in the default list.

--compare reads two --json reports (.ci/run: one on the kernel's ring, one
under a seccomp filter that refuses io_uring, so on the epoll driver) and
exits 1, naming them, when a test fails in one and not the other or a
module ran a different number of tests.
"""
import asyncio
import importlib
import json
import sys
import time
import unittest

import uringloop

DEFAULT_MODULES = [
    "test_tasks", "test_futures", "test_futures2", "test_locks", "test_queues",
    "test_timeouts", "test_taskgroups", "test_waitfor", "test_runners",
    "test_context", "test_pep492", "test_threads", "test_buffered_proto",
    "test_protocols", "test_transports", "test_base_events",
    # transport-level, covered by issue #3
    "test_streams", "test_server", "test_sendfile", "test_sslproto",
    "test_subprocess",
]


def use_uringloop_everywhere():
    asyncio.DefaultEventLoopPolicy = uringloop.EventLoopPolicy
    asyncio.events.DefaultEventLoopPolicy = uringloop.EventLoopPolicy
    asyncio.set_event_loop_policy(uringloop.EventLoopPolicy())


class Counts(unittest.TextTestResult):
    pass


def run_module(name, verbosity=0):
    module = importlib.import_module(f"test.test_asyncio.{name}")
    suite = unittest.defaultTestLoader.loadTestsFromModule(module)
    runner = unittest.TextTestRunner(stream=open("/dev/null", "w"),
                                     verbosity=verbosity, resultclass=Counts)
    t0 = time.monotonic()
    result = runner.run(suite)
    return {
        "run": result.testsRun,
        "failures": [str(t) for t, _ in result.failures],
        "errors": [str(t) for t, _ in result.errors],
        "skipped": len(result.skipped),
        "seconds": round(time.monotonic() - t0, 1),
    }


def compare(first, second):
    """The differences between two reports, as lines (none: the same)."""
    with open(first) as f:
        a = json.load(f)
    with open(second) as f:
        b = json.load(f)
    lines = []
    for name in sorted(set(a) | set(b)):
        if name not in a or name not in b:
            lines.append(f"{name}: only in {first if name in a else second}")
            continue
        if a[name]["run"] != b[name]["run"]:
            lines.append(f"{name}: {a[name]['run']} tests run against {b[name]['run']}")
        bad_a = set(a[name]["failures"] + a[name]["errors"])
        bad_b = set(b[name]["failures"] + b[name]["errors"])
        lines += [f"{name}: fails only in {first}: {t}" for t in sorted(bad_a - bad_b)]
        lines += [f"{name}: fails only in {second}: {t}" for t in sorted(bad_b - bad_a)]
    return lines


def main(argv):
    if argv[:1] == ["--compare"]:
        differences = compare(argv[1], argv[2])
        print("\n".join(differences) or "the same results")
        sys.exit(1 if differences else 0)
    out = None
    if "--json" in argv:
        i = argv.index("--json")
        out = argv[i + 1]
        del argv[i:i + 2]
    modules = argv or DEFAULT_MODULES
    use_uringloop_everywhere()
    report = {}
    total = {"run": 0, "failed": 0, "skipped": 0}
    for name in modules:
        r = run_module(name)
        report[name] = r
        failed = len(r["failures"]) + len(r["errors"])
        total["run"] += r["run"]
        total["failed"] += failed
        total["skipped"] += r["skipped"]
        print(f"{name:24s} run {r['run']:4d}  failed {failed:3d}  "
              f"skipped {r['skipped']:3d}  ({r['seconds']}s)", flush=True)
    passed = total["run"] - total["failed"] - total["skipped"]
    print(f"total: {passed} passed, {total['failed']} failed, "
          f"{total['skipped']} skipped of {total['run']}")
    if out:
        with open(out, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
