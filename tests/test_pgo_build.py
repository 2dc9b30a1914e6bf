"""The profile-guided build (setup.py with URINGLOOP_PGO=1, as the release
builds make it): the instrumented build, tools/pgo_training.py on it, the second
compile with its counts; and where the training cannot run (io_uring
refused, as in Docker's default seccomp profile), a build without a
profile that says so.  Each builds a copy of the tree, unoptimised (the
steps are the same; the compiler's work is not what is tested), and the
result then runs an echo on its own ring."""
import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ECHO = """
import asyncio, os, sys, uringloop
assert os.path.dirname(uringloop.core.__file__).startswith(sys.argv[1]), uringloop.core.__file__

class Echo(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport
    def data_received(self, data):
        self.transport.write(data)

async def main():
    loop = asyncio.get_running_loop()
    assert type(loop) is uringloop.Loop
    server = await loop.create_server(Echo, "127.0.0.1", 0)
    reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname())
    writer.write(b"pgo" * 1000)
    assert await reader.readexactly(3000) == b"pgo" * 1000
    writer.close()
    server.close()
    print("echoed")

uringloop.run(main(), strict=True)
"""


def gcc_major():
    gcc = shutil.which("gcc")
    if gcc is None:
        return 0
    out = subprocess.run([gcc, "-dumpversion"], capture_output=True, text=True).stdout
    m = re.match(r"(\d+)", out.strip())
    return int(m.group(1)) if m else 0


def copy_tree(dest):
    """What setup.py builds from (the generated core.c too, when there,
    with its time: Cython then does not translate again)."""
    shutil.copytree(os.path.join(ROOT, "src"), dest / "src",
                    ignore=shutil.ignore_patterns("*.so", "__pycache__", "*.html"))
    (dest / "tools").mkdir()
    for part in ("setup.py", "pyproject.toml", "tools/pgo_training.py", "README.md",
                 "LICENSE-MIT", "LICENSE-APACHE"):
        shutil.copy2(os.path.join(ROOT, part), dest / part)


def build(tree, prefix=()):
    """The in-place build, its objects under an absolute path, as pip's
    editable and isolated builds have them (GCC then keeps the path as
    directories under the profile directory, instead of one flat name)."""
    env = dict(os.environ, URINGLOOP_PGO="1", URINGLOOP_OPT="0")
    return subprocess.run(list(prefix) + [sys.executable, "setup.py", "build_ext", "--inplace",
                                          "--build-temp", str(tree / "objects")],
                          cwd=tree, env=env, capture_output=True, text=True, timeout=900)


def echo(tree):
    out = subprocess.run([sys.executable, "-c", ECHO, str(tree / "src")], capture_output=True,
                         text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(tree / "src")))
    assert out.returncode == 0 and "echoed" in out.stdout, out.stderr[-3000:]


@pytest.fixture
def tree(tmp_path):
    if gcc_major() < 10:
        pytest.skip("a profile-guided build needs GCC 10 or later")
    copy_tree(tmp_path)
    return tmp_path


@pytest.mark.timeout(1200)      # two compiles and the training, not the loop
def test_a_profile_guided_build_trains_then_compiles_with_the_counts(tree):
    out = build(tree)
    assert out.returncode == 0, out.stderr[-5000:]
    m = re.search(r"uringloop: profile-guided build: the training left (\d+) profile files",
                  out.stderr)
    assert m and int(m.group(1)) >= 1, out.stderr[-5000:]
    assert "-fprofile-use" in out.stdout + out.stderr     # the second compile's command
    assert "without a profile" not in out.stderr
    echo(tree)


@pytest.mark.timeout(1200)
def test_a_profile_guided_build_where_io_uring_is_refused_goes_on_without_a_profile(
        tree, deny_io_uring):
    out = build(tree, prefix=[deny_io_uring])
    assert out.returncode == 0, out.stderr[-5000:]
    assert "the profile training did not run (exit status 2)" in out.stderr, out.stderr[-5000:]
    assert "building without a profile" in out.stderr
    assert "-fprofile-use" not in out.stdout + out.stderr
    assert "profile-guided build: the training left" not in out.stderr
    # the build works here, where the ring does
    echo(tree)
