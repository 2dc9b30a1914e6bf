"""The distribution builds as an sdist and a wheel, and the wheel installs
into a fresh virtual environment and runs there (no runtime dependency)."""
import os
import subprocess
import sys
import venv
import zipfile

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir))

PROGRAM = """
import asyncio, socket, uringloop
async def main():
    loop = asyncio.get_running_loop()
    a, b = socket.socketpair()
    a.setblocking(False); b.setblocking(False)
    await loop.sock_sendall(a, b"wheel")
    return type(loop).__name__, await loop.sock_recv(b, 10)
print(*uringloop.run(main(), strict=True))
"""


@pytest.mark.timeout(1300)     # builds (subprocess limits below), not the loop
def test_sdist_and_wheel_build_and_the_wheel_runs_in_a_fresh_venv(tmp_path):
    pytest.importorskip("build")
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "build", "--sdist", "--wheel",
                    "--outdir", str(dist), ROOT],
                   check=True, capture_output=True, timeout=900)
    names = sorted(os.listdir(dist))
    assert any(n.endswith(".tar.gz") for n in names), names
    wheel = next(dist / n for n in names if n.endswith(".whl"))
    assert wheel.name.startswith("uringloop_asyncio-")
    with zipfile.ZipFile(wheel) as zf:
        files = set(zf.namelist())
    # the types: the compiled module's stub and PEP 561's marker
    assert {"uringloop/core.pyi", "uringloop/py.typed"} <= files, sorted(files)
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = str(env_dir / "bin" / "python")
    subprocess.run([sys.executable, "-m", "pip", "--python", python, "install",
                    "--no-deps", "--no-index", str(wheel)],
                   check=True, capture_output=True, timeout=300)
    out = subprocess.run([python, "-c", PROGRAM], capture_output=True, text=True,
                         timeout=60, cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["Loop", "b'wheel'"]
