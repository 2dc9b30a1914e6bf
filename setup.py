"""Build of the uringloop extension: Cython core + the C ring layer.

`URINGLOOP_DEBUG=1 pip install -e .` builds with -DURINGLOOP_DEBUG (the
live-object counters of src/uringloop/debug.h), -O0 -g and asserts on;
`URINGLOOP_SANITIZE=address` adds AddressSanitizer; `URINGLOOP_OPT=0`
compiles without optimisation, in a fraction of the time (the packaging
test: what it checks does not depend on the compiler's work).
Other builds leave the extension without its debug information (a 9 MB
file becomes 1.5 MB; the symbol table stays, so profilers still name the
functions): it goes to a file of its own, `core.<tag>.so.debug`, named in
the extension's .gnu_debuglink -- beside it for an in-place build, else
in $URINGLOOP_DEBUG_SYMBOLS (tests/release.py: the dist folder) or the
build's temporary folder.  `URINGLOOP_STRIP=0` keeps it in the extension.
`URINGLOOP_PGO=1` makes a profile-guided build (GCC 10 or later): the
extension is compiled instrumented, tools/pgo_training.py runs on it, and it is
compiled again with the counts that left (the release builds do this:
docs/releasing.md; why: docs/design.md, "The build").  Where the training
cannot run (no io_uring: a container's seccomp profile, an old kernel) or
the compiler is not GCC, the build says so and goes on without a profile.
Where there is no io_uring to build for (not Linux: a developer's Mac) or
`URINGLOOP_BUILD_EXTENSION=0` asks for it, the package installs without
the extension: pure Python, whose run() and new_event_loop() give asyncio's
own loop (`uringloop.NATIVE` is False).
"""
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile

from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))

debug = os.environ.get("URINGLOOP_DEBUG") == "1"
# URINGLOOP_SANITIZE=address: an AddressSanitizer build; run the suite with
# libasan preloaded (docs/testing.md, "AddressSanitizer over the whole suite").
sanitize = os.environ.get("URINGLOOP_SANITIZE")
sanitize_flags = [f"-fsanitize={sanitize}", "-fno-omit-frame-pointer", "-g"] if sanitize else []
unoptimised = os.environ.get("URINGLOOP_OPT") == "0"
pgo = os.environ.get("URINGLOOP_PGO") == "1"
strip = not (debug or sanitize) and os.environ.get("URINGLOOP_STRIP") != "0"

extension = Extension(
    "uringloop.core",
    sources=["src/uringloop/core.pyx", "src/uringloop/ring/ring.c",
             "src/uringloop/ring/readiness.c", "src/uringloop/ring/threads.c"],
    include_dirs=["src/uringloop"],
    # every included .pyx/.pxd and header: a change to any rebuilds core
    depends=sorted(glob.glob("src/uringloop/**/*.pyx", recursive=True)
                   + glob.glob("src/uringloop/**/*.pxd", recursive=True)
                   + glob.glob("src/uringloop/**/*.h", recursive=True)),
    extra_compile_args=["-O2", "-Wno-unused-function"]
    + (["-DURINGLOOP_DEBUG", "-UNDEBUG", "-O0", "-g"] if debug else [])
    + (["-O0"] if unoptimised else []) + sanitize_flags,
    extra_link_args=sanitize_flags,
)


def say(message):
    print(f"uringloop: {message}", file=sys.stderr, flush=True)


def gcc_major():
    """The major version of the C compiler when it is GCC, else 0."""
    cc = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    try:
        banner = subprocess.run(cc + ["--version"], capture_output=True, text=True).stdout
        version = subprocess.run(cc + ["-dumpversion"], capture_output=True, text=True).stdout
    except OSError:
        return 0
    if "Free Software Foundation" not in banner or "clang" in banner.lower():
        return 0
    m = re.match(r"(\d+)", version.strip())
    return int(m.group(1)) if m else 0


class BuildExt(build_ext):
    """build_ext, profile-guided with URINGLOOP_PGO=1, its debug
    information apart (see the top)."""

    def run(self):
        self.build_profiled()
        if strip:
            for ext in self.extensions:
                self.strip_debug_information(self.get_ext_fullpath(ext.name))

    def strip_debug_information(self, path):
        if not os.path.exists(path):
            return
        with open(path, "rb") as f:
            if b".debug_info" not in f.read():
                return          # (built before and already apart: nothing to move)
        objcopy = shutil.which("objcopy")
        if objcopy is None:
            say("no objcopy (binutils): the extension keeps its debug information")
            return
        if self.inplace:
            where = os.path.dirname(path)
        else:
            where = os.environ.get("URINGLOOP_DEBUG_SYMBOLS") or self.build_temp
        os.makedirs(where, exist_ok=True)
        symbols = os.path.join(os.path.abspath(where), os.path.basename(path) + ".debug")
        subprocess.run([objcopy, "--only-keep-debug", path, symbols], check=True)
        subprocess.run([objcopy, "--strip-debug", "--remove-section=.gnu_debuglink",
                        f"--add-gnu-debuglink={symbols}", path], check=True)
        say(f"debug information of {os.path.basename(path)} in {symbols}")

    def build_profiled(self):
        if not pgo or debug or sanitize:
            return super().run()
        if gcc_major() < 10:
            say("URINGLOOP_PGO=1 needs GCC 10 or later; building without a profile")
            return super().run()
        profile_dir = tempfile.mkdtemp(prefix="uringloop-pgo-")
        ext = self.extensions[0]
        compile_args, link_args = list(ext.extra_compile_args), list(ext.extra_link_args)
        compiler = self.compiler        # (the option: run() replaces it with the object)
        try:
            ext.extra_compile_args = compile_args + ["-fprofile-generate",
                                                     f"-fprofile-dir={profile_dir}"]
            ext.extra_link_args = link_args + ["-fprofile-generate"]
            self.force = True
            super().run()
            counts = self.train(ext, profile_dir)
            ext.extra_link_args = link_args
            if counts:
                say(f"profile-guided build: the training left {counts} profile files; "
                    "compiling with them")
                ext.extra_compile_args = compile_args + [
                    "-fprofile-use", f"-fprofile-dir={profile_dir}",
                    # what the training did not run is compiled as without a
                    # profile, not as code that never runs
                    "-fprofile-partial-training", "-Wno-missing-profile"]
            else:
                ext.extra_compile_args = compile_args
            self.compiler = compiler
            super().run()
        finally:
            ext.extra_compile_args, ext.extra_link_args = compile_args, link_args
            shutil.rmtree(profile_dir, ignore_errors=True)

    def train(self, ext, profile_dir):
        """Run tools/pgo_training.py on the instrumented build, from a copy of the
        package beside it; the number of profile files it left (0: none,
        and the build goes on without)."""
        inplace, self.inplace = self.inplace, False
        built = self.get_ext_fullpath(ext.name)      # (where run() built it)
        self.inplace = inplace
        with tempfile.TemporaryDirectory(prefix="uringloop-pgo-pkg-") as tmp:
            package = os.path.join(tmp, "uringloop")
            shutil.copytree(os.path.join(HERE, "src", "uringloop"), package,
                            ignore=shutil.ignore_patterns("*.so", "*.c", "*.pyx", "*.pxd",
                                                          "*.h", "__pycache__"))
            shutil.copy(built, package)
            # (the kernel's ring, which the release wheels are trained for:
            # where it is refused the training says so, as it did before
            # the epoll driver, rather than train that driver)
            env = dict(os.environ, PYTHONPATH=tmp, PYTHONNOUSERSITE="1",
                       URINGLOOP_DRIVER="ring")
            try:
                out = subprocess.run(
                    [sys.executable, os.path.join(HERE, "tools", "pgo_training.py"), "--expect", package],
                    env=env, capture_output=True, text=True, timeout=300)
            except subprocess.TimeoutExpired:
                say("the profile training did not finish in 300 s; building without a profile")
                return 0
        if out.returncode != 0:
            say("the profile training did not run (exit status "
                f"{out.returncode}): {(out.stderr or out.stdout).strip()[-2000:]}; "
                "building without a profile")
            return 0
        # (GCC names them after the object files: the path flattened with
        # '#' for a relative object path, kept as directories for an
        # absolute one, as pip's editable and isolated builds have)
        counts = len(glob.glob(os.path.join(profile_dir, "**", "*.gcda"), recursive=True))
        if not counts:
            say("the profile training ran but left no profile files; building without a profile")
        return counts


native = (sys.platform.startswith("linux")
          and os.environ.get("URINGLOOP_BUILD_EXTENSION", "1") != "0")
if not native:
    say("building without the extension (not Linux, or URINGLOOP_BUILD_EXTENSION=0): "
        "uringloop.run() and new_event_loop() will give asyncio's loop")

setup(
    cmdclass={"build_ext": BuildExt},
    ext_modules=cythonize(
        [extension],
        compiler_directives={"language_level": "3", "embedsignature": True},
        compile_time_env={"DEBUG": debug},
    ) if native else [],
)
