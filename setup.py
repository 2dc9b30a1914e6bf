"""Build of the uringloop extension: Cython core + the C ring layer.

`URINGLOOP_DEBUG=1 pip install -e .` builds with -DURINGLOOP_DEBUG (the
live-object counters of src/uringloop/debug.h), -O0 -g and asserts on;
`URINGLOOP_SANITIZE=address` adds AddressSanitizer; `URINGLOOP_OPT=0`
compiles without optimisation, in a fraction of the time (the packaging
test: what it checks does not depend on the compiler's work).
"""
import glob
import os

from Cython.Build import cythonize
from setuptools import Extension, setup

debug = os.environ.get("URINGLOOP_DEBUG") == "1"
# URINGLOOP_SANITIZE=address: an AddressSanitizer build; run the suite with
# libasan preloaded (docs/testing.md, "AddressSanitizer over the whole suite").
sanitize = os.environ.get("URINGLOOP_SANITIZE")
sanitize_flags = [f"-fsanitize={sanitize}", "-fno-omit-frame-pointer", "-g"] if sanitize else []
unoptimised = os.environ.get("URINGLOOP_OPT") == "0"

extension = Extension(
    "uringloop.core",
    sources=["src/uringloop/core.pyx", "src/uringloop/ring/ring.c"],
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

setup(
    ext_modules=cythonize(
        [extension],
        compiler_directives={"language_level": "3", "embedsignature": True},
        compile_time_env={"DEBUG": debug},
    ),
)
