"""The API is typed: core.pyi matches the compiled module (stubtest), and a
program using every public name passes mypy --strict (tests/typing/).
That the wheel carries core.pyi and py.typed: tests/test_packaging.py."""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TYPING = Path(__file__).resolve().parent / "typing"

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mypy") is None,
                                reason="mypy is not installed")


def mypy(*args, cwd):
    # MYPYPATH: the package from this tree (an editable install is an import
    # hook mypy cannot follow), so uringloop's own .py files are checked too
    env = dict(os.environ, MYPYPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=300)


def test_a_program_using_every_public_name_passes_mypy_strict(tmp_path):
    r = mypy("mypy", "--strict", "--python-version", "3.11",
             "--cache-dir", str(tmp_path / "cache"), str(TYPING / "uses_every_name.py"),
             cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr


def test_mypy_catches_a_misuse(tmp_path):
    # the check is not vacuous: a wrong type is reported
    bad = tmp_path / "bad.py"
    bad.write_text("import uringloop\n"
                   "loop = uringloop.new_event_loop()\n"
                   "buf: bytes = loop.zerocopy_buffer('big')\n")
    r = mypy("mypy", "--strict", "--cache-dir", str(tmp_path / "cache"), str(bad),
             cwd=tmp_path)
    assert r.returncode == 1
    assert 'Argument 1 to "zerocopy_buffer"' in r.stdout
    assert "Incompatible types in assignment" in r.stdout


def test_the_stub_matches_the_compiled_module(tmp_path):
    r = mypy("mypy.stubtest", "uringloop.core",
             "--allowlist", str(TYPING / "stubtest_allowlist.txt"), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
