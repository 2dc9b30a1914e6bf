"""The API is typed: core.pyi matches the compiled module (stubtest), and a
program using every public name passes mypy --strict (tests/typing/).
That the wheel carries core.pyi and py.typed: tests/test_packaging.py."""
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TYPING = Path(__file__).resolve().parent / "typing"

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mypy") is None,
                                reason="mypy is not installed")


def mypy(*args, cwd, mypypath=True):
    # MYPYPATH: the package from this tree, so uringloop's own .py files are
    # checked however it was installed (test_the_editable_install_... checks
    # the README's install without it)
    env = {k: v for k, v in os.environ.items() if k not in ("MYPYPATH", "PYTHONPATH")}
    if mypypath:
        env["MYPYPATH"] = str(ROOT / "src")
    return subprocess.run([sys.executable, "-m", *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=300)


def editable_install_of_this_tree():
    """True when uringloop is installed editable (pip install -e) from this
    checkout: PEP 610's direct_url.json says so."""
    try:
        dist = importlib.metadata.distribution("uringloop-asyncio")
        info = json.loads(dist.read_text("direct_url.json") or "{}")
    except importlib.metadata.PackageNotFoundError:
        return False
    url = info.get("url", "")
    return (info.get("dir_info", {}).get("editable", False)
            and url.startswith("file://") and Path(url[7:]).resolve() == ROOT)


def test_the_editable_install_is_visible_to_mypy(tmp_path):
    """After the README's `pip install -e .`, mypy outside the checkout finds
    the package with no MYPYPATH: the src layout makes setuptools install it
    as a plain path entry (a .pth naming src/), not an import hook that
    type checkers cannot follow (issue #35)."""
    if not editable_install_of_this_tree():
        pytest.skip("uringloop-asyncio is not installed editable from this checkout")
    program = tmp_path / "uses_uringloop.py"
    program.write_text("import uringloop\n"
                       "loop: uringloop.Loop = uringloop.new_event_loop()\n"
                       "loop.close()\n")
    r = mypy("mypy", "--strict", "--cache-dir", str(tmp_path / "cache"), str(program),
             cwd=tmp_path, mypypath=False)
    assert r.returncode == 0, r.stdout + r.stderr


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
             "--allowlist", str(TYPING / "stubtest_allowlist.txt"),
             # (some entries hold on some versions only: Cython gives 3.14's types
             # __buffer__ of their own)
             "--ignore-unused-allowlist", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
