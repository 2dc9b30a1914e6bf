"""Build of the uringloop extension: Cython core + the C ring layer.

`URINGLOOP_DEBUG=1 pip install -e .` builds with -DURINGLOOP_DEBUG and
Cython line tracing off, asserts on.
"""
import os

from Cython.Build import cythonize
from setuptools import Extension, setup

debug = os.environ.get("URINGLOOP_DEBUG") == "1"

extension = Extension(
    "uringloop.core",
    sources=["uringloop/core.pyx", "uringloop/ring/ring.c"],
    include_dirs=["uringloop"],
    depends=[
        "uringloop/ring/abi.h", "uringloop/ring/ring.h",
        "uringloop/ring/sockaddr.h", "uringloop/includes/ring.pxd",
        "uringloop/core.pxd", "uringloop/operation.pyx",
        "uringloop/sockops.pyx", "uringloop/fdwatch.pyx",
        "uringloop/ring/buf_ring.h", "uringloop/transports/base.pyx",
        "uringloop/transports/base.pxd", "uringloop/transports/stream.pyx",
        "uringloop/transports/stream.pxd", "uringloop/transports/server.pyx",
        "uringloop/transports/datagram.pyx", "uringloop/transports/datagram.pxd",
        "uringloop/transports/pipes.pyx", "uringloop/transports/pipes.pxd",
        "uringloop/transports/zerocopy.pyx", "uringloop/transports/zerocopy.pxd",
        "uringloop/buffer_pool.pyx", "uringloop/buffer_pool.pxd", "uringloop/debug.h",
    ],
    extra_compile_args=["-O2", "-Wno-unused-function"]
    + (["-DURINGLOOP_DEBUG", "-UNDEBUG", "-O0", "-g"] if debug else []),
)

setup(
    ext_modules=cythonize(
        [extension],
        compiler_directives={"language_level": "3", "embedsignature": True},
        compile_time_env={"DEBUG": debug},
    ),
)
