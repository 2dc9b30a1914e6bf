"""The debug build (`URINGLOOP_DEBUG=1 pip install -e .`) over the transport,
zero-copy, registered-buffer and stress tests, and its own checks of the
life of a request and of the transports' states (test_life_cycle_checks.py).

In that build the loop counts every object that owns something the kernel
may touch or that must be given back (loops and their file descriptors,
operations, transports, held buffer views, registered-buffer regions and
buffers), and conftest.py fails any test after which one is left alive.
This test builds it into a copy of the tree and runs those test files there
in a child pytest, so CI runs them under the leak checks on every push.

To run the whole suite on the debug build by hand:

    URINGLOOP_DEBUG=1 python3 -m pip install -e . && python3 -m pytest -q tests
"""
import subprocess
import sys

import pytest


@pytest.mark.timeout(1500)     # waits for its run (conftest's DebugRuns, with limits)
@pytest.mark.debug_run("this-python")
def test_transports_and_zero_copy_leak_nothing_in_the_debug_build(debug_runs):
    """The files are conftest's DEBUG_RUN_FILES["this-python"]."""
    run = debug_runs.finished("this-python")
    run.check()
    probe = subprocess.run(
        [sys.executable, "-c", "import uringloop, uringloop.core as c; "
         "print(uringloop.__file__); print(c.debug_counters())"],
        cwd=run.tree, env=run.env, capture_output=True, text=True, timeout=60)
    assert probe.stdout.startswith(str(run.tree)), probe.stdout + probe.stderr
    assert "'operations': 0" in probe.stdout          # a debug build indeed
