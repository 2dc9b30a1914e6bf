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

from conftest import run_tests_in

CHECKED = ["tests/test_transports.py", "tests/test_zerocopy.py",
           "tests/test_registered_buffers.py", "tests/test_stress.py",
           "tests/test_zcrx.py", "tests/test_life_cycle_checks.py",
           # pauses, closes and raising callbacks in every read mode: the
           # transports' state tables are checked on each move there
           "tests/test_contract_edges.py"]


@pytest.mark.timeout(1500)     # a build and a test run of its own (subprocess limits)
def test_transports_and_zero_copy_leak_nothing_in_the_debug_build(tmp_path, debug_build):
    pytest.importorskip("Cython", reason="the debug build compiles the Cython core")
    env = debug_build(sys.executable)
    probe = subprocess.run(
        [sys.executable, "-c", "import uringloop, uringloop.core as c; "
         "print(uringloop.__file__); print(c.debug_counters())"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert probe.stdout.startswith(str(tmp_path)), probe.stdout + probe.stderr
    assert "'operations': 0" in probe.stdout          # a debug build indeed
    run_tests_in(tmp_path, sys.executable, env, CHECKED)
