"""Build of the uringloop extension: Cython core + the C ring layer.

`URINGLOOP_DEBUG=1 pip install -e .` builds with -DURINGLOOP_DEBUG (the
live-object counters of uringloop/debug.h), -O0 -g and asserts on;
`URINGLOOP_SANITIZE=address` adds AddressSanitizer.
"""
import os

from Cython.Build import cythonize
from setuptools import Extension, setup

debug = os.environ.get("URINGLOOP_DEBUG") == "1"
# URINGLOOP_SANITIZE=address: an AddressSanitizer build (README, "Checking
# memory safety"); run it with libasan preloaded.
sanitize = os.environ.get("URINGLOOP_SANITIZE")
sanitize_flags = [f"-fsanitize={sanitize}", "-fno-omit-frame-pointer", "-g"] if sanitize else []

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
        "uringloop/sockops.pxd",
        "uringloop/zcrx.pyx", "uringloop/zcrx.pxd", "uringloop/ring/zcrx.h",
    ],
    extra_compile_args=["-O2", "-Wno-unused-function"]
    + (["-DURINGLOOP_DEBUG", "-UNDEBUG", "-O0", "-g"] if debug else []) + sanitize_flags,
    extra_link_args=sanitize_flags,
)

setup(
    ext_modules=cythonize(
        [extension],
        compiler_directives={"language_level": "3", "embedsignature": True},
        compile_time_env={"DEBUG": debug},
    ),
)
