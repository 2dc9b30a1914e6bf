"""The loop on the other CPython versions this machine has (3.12, 3.13):
build it with that interpreter (debug mode, so the leak checks apply too)
and run the core tests plus that version's own test_asyncio mixins (the
files: conftest's DEBUG_RUN_FILES; the runs overlap, see DebugRuns).

Skips with the reason when the interpreter, or Cython/pytest/hypothesis/
pytest-asyncio for it, is missing; .ci/run installs them where it finds a
pyenv interpreter."""
import pytest


@pytest.mark.timeout(1500)     # waits for its run (conftest's DebugRuns, with limits)
@pytest.mark.parametrize("version", [pytest.param("3.12", marks=pytest.mark.debug_run("3.12")),
                                     pytest.param("3.13", marks=pytest.mark.debug_run("3.13"))])
def test_the_loop_on_another_python(debug_runs, version):
    debug_runs.finished(version).check()
