"""The debug build (`URINGLOOP_DEBUG=1 pip install -e .`) over the transport,
zero-copy, registered-buffer and stress tests.

In that build the loop counts every object that owns something the kernel
may touch or that must be given back (loops and their file descriptors,
operations, transports, held buffer views, registered-buffer regions and
buffers), and conftest.py fails any test after which one is left alive.
This test builds it into a copy of the tree and runs those test files there
in a child pytest, so CI runs them under the leak checks on every push.

To run the whole suite on the debug build by hand:

    URINGLOOP_DEBUG=1 python3 -m pip install -e . && python3 -m pytest -q tests
"""
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(__file__), os.pardir)
CHECKED = ["test_transports.py", "test_zerocopy.py", "test_registered_buffers.py",
           "test_stress.py"]


def test_transports_and_zero_copy_leak_nothing_in_the_debug_build(tmp_path):
    pytest.importorskip("Cython", reason="the debug build compiles the Cython core")
    for part in ("uringloop", "tests", "examples"):
        shutil.copytree(os.path.join(ROOT, part), tmp_path / part,
                        ignore=shutil.ignore_patterns("*.so", "core.c", "__pycache__"))
    for part in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(os.path.join(ROOT, part), tmp_path / part)
    env = dict(os.environ, URINGLOOP_DEBUG="1", PYTHONPATH=str(tmp_path))
    build = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"],
                           cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=600)
    assert build.returncode == 0, build.stderr[-3000:]
    probe = subprocess.run(
        [sys.executable, "-c", "import uringloop, uringloop.core as c; "
         "print(uringloop.__file__); print(c.debug_counters())"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert probe.stdout.startswith(str(tmp_path)), probe.stdout + probe.stderr
    assert "'operations': 0" in probe.stdout          # a debug build indeed
    files = [f"tests/{name}" for name in CHECKED if (tmp_path / "tests" / name).exists()]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "-W", "error::pytest.PytestUnraisableExceptionWarning"] + files,
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    findings = [line for line in run.stdout.splitlines()
                if "still alive" in line or line.startswith(("FAILED", "ERROR tests"))]
    assert run.returncode == 0, "\n".join(findings) + "\n" + run.stdout[-3000:]
    assert " passed" in run.stdout
