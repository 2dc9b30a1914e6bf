"""The loop on the other CPython versions this machine has (3.12, 3.13):
build it with that interpreter (debug mode, so the leak checks apply too)
and run the core tests plus that version's own test_asyncio mixins.

Skips with the reason when the interpreter, or Cython/pytest/hypothesis/
pytest-asyncio for it, is missing; .ci/run installs them where it finds a
pyenv interpreter."""
import glob
import shutil
import subprocess

import pytest

from conftest import run_tests_in

FILES = ["tests/test_loop.py", "tests/test_sock_ops.py", "tests/test_transports.py",
         "tests/test_zerocopy.py", "tests/test_registered_buffers.py",
         "tests/test_stress.py", "tests/test_cpython_asyncio.py", "tests/test_files.py"]


def find_python(version):
    """A pyenv build first (the pyenv shim on PATH may refuse to run a
    version that is not selected), then python3.X on PATH."""
    candidates = sorted(glob.glob(f"/root/.pyenv/versions/{version}.*/bin/python{version}"))
    if candidates:
        return candidates[-1]
    return shutil.which(f"python{version}")


@pytest.mark.timeout(1500)     # a build and a test run of its own (subprocess limits below)
@pytest.mark.parametrize("version", ["3.12", "3.13"])
def test_the_loop_on_another_python(tmp_path, debug_build, version):
    python = find_python(version)
    if python is None:
        pytest.skip(f"no python{version} on this machine")
    need = "import Cython, pytest, hypothesis, pytest_asyncio, pytest_timeout"
    if subprocess.run([python, "-c", need], capture_output=True).returncode:
        pytest.skip(f"python{version} lacks Cython/pytest/hypothesis/pytest-asyncio")
    env = debug_build(python)
    run_tests_in(tmp_path, python, env, FILES)
