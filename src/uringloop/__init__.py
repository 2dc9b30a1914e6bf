"""uringloop: an asyncio event loop for Linux built on io_uring.

    import uringloop
    uringloop.run(main())
    asyncio.Runner(loop_factory=uringloop.new_event_loop)
    uringloop.install()          # deprecated on Python 3.12+, as uvloop's

Where the kernel or a sandbox refuses io_uring (Docker's default seccomp
profile, kernel.io_uring_disabled, a kernel before 6.1), the loop runs the
same operations on its epoll driver, with one INFO log line saying why.
URINGLOOP_DRIVER=ring or =epoll forces a driver; a forced ring that is
refused raises RingUnavailableError, as strict=True (or URINGLOOP_STRICT=1)
does.
"""
import asyncio as _asyncio
import importlib as _importlib
import os as _os
import sys as _sys
import warnings as _warnings
from collections.abc import Coroutine as _Coroutine
from typing import TYPE_CHECKING as _TYPE_CHECKING, Any as _Any, TypeVar as _TypeVar

try:
    _core = _importlib.import_module(".core", __name__)
except ModuleNotFoundError as _exc:
    if _exc.name != __name__ + ".core":
        raise                   # (a broken build is an error, not a missing one)
    _core = None
# False where uringloop was installed without its extension (not Linux, or
# URINGLOOP_BUILD_EXTENSION=0): the functions below then give asyncio's own
# loop, and what only the native loop has (zero-copy, registered buffers,
# zcrx) is not there (_pure.py).
NATIVE = _core is not None

if _TYPE_CHECKING or NATIVE:
    from .core import Loop, RegisteredBuffer, RingUnavailableError, ZeroCopyReceive, features
    from .core import shortcuts, ring_refusal as _ring_refusal
    from .core import (SOL_URINGLOOP, SO_ZEROCOPY, ZC_ALWAYS, ZC_AUTO, ZC_MODE,
                       RefillQueue, ZeroCopyPiece, zcrx_offset, zcrx_split,
                       ZC_NEVER, ZC_THRESHOLD, ZeroCopyFuture, ZeroCopyResult, set_zerocopy)
    # The classes uringloop's transports report (isinstance() holds), typed
    # with the zero-copy methods they add (see core.pyi).
    from .core import AsyncioStreamTransport as StreamTransport
    from .core import AsyncioDatagramTransport as DatagramTransport
else:
    from ._pure import Loop, RingUnavailableError, features, shortcuts
    from ._pure import ring_refusal as _ring_refusal
# Files on the ring (files.py); open and stat stay out of __all__ so that
# `from uringloop import *` does not hide the builtin open().
from .files import open as open, stat as stat, AsyncFile, AsyncTextFile

_NATIVE_ONLY = ("SOL_URINGLOOP", "SO_ZEROCOPY",
                "ZC_MODE", "ZC_THRESHOLD", "ZC_AUTO", "ZC_ALWAYS", "ZC_NEVER",
                "ZeroCopyResult", "ZeroCopyFuture", "set_zerocopy", "RegisteredBuffer",
                "ZeroCopyReceive", "ZeroCopyPiece", "RefillQueue", "zcrx_offset", "zcrx_split",
                "StreamTransport", "DatagramTransport")
__all__ = ("run", "new_event_loop", "loop_factory", "install", "EventLoopPolicy", "Loop",
           "RingUnavailableError", "features", "SOL_URINGLOOP", "SO_ZEROCOPY",
           "ZC_MODE", "ZC_THRESHOLD", "ZC_AUTO", "ZC_ALWAYS", "ZC_NEVER",
           "ZeroCopyResult", "ZeroCopyFuture", "set_zerocopy", "RegisteredBuffer", "ZeroCopyReceive",
           "ZeroCopyPiece", "RefillQueue", "zcrx_offset", "zcrx_split",
           "StreamTransport", "DatagramTransport", "AsyncFile", "AsyncTextFile", "shortcuts",
           "NATIVE")
if not _TYPE_CHECKING and not NATIVE:
    __all__ = tuple(name for name in __all__ if name not in _NATIVE_ONLY)


def __getattr__(name: str) -> _Any:
    if name in _NATIVE_ONLY:
        raise AttributeError(f"uringloop.{name} needs the native extension, which this "
                             f"install has not ({features()['error']})")
    raise AttributeError(f"module 'uringloop' has no attribute {name!r}")
__version__ = "0.1.0.dev0"

_T = _TypeVar("_T")


def new_event_loop() -> Loop:
    """A new uringloop Loop: on the kernel's io_uring, or on the epoll
    driver where io_uring is refused.  Raises RingUnavailableError only
    when URINGLOOP_DRIVER=ring or URINGLOOP_STRICT=1 asks for the ring and
    it is refused."""
    return _new_loop(_strict(None))


def _strict(strict: bool | None) -> bool:
    if strict is None:
        return _os.environ.get("URINGLOOP_STRICT", "") not in ("", "0")
    return strict


def _new_loop(strict: bool) -> Loop:
    """A new Loop; strict, one on the kernel's io_uring or the error that
    refused it."""
    loop = Loop()
    if strict:
        refusal = _ring_refusal(loop)
        if refusal is not None:
            loop.close()
            raise refusal
    return loop


def loop_factory() -> _asyncio.AbstractEventLoop:
    """A new uringloop Loop (URINGLOOP_STRICT=1: only on io_uring itself),
    for anything that takes a loop factory:
    asyncio.Runner(loop_factory=uringloop.loop_factory), uvicorn's
    `--loop uringloop:loop_factory` (uvicorn 0.36 and later)."""
    return _new_loop(_strict(None))


def run(main: _Coroutine[_Any, _Any, _T], *, debug: bool | None = None,
        strict: bool | None = None) -> _T:
    """Run coroutine `main` on a new uringloop and return its result, like
    asyncio.run().  Where io_uring is refused the loop runs on its epoll
    driver; with strict=True (or URINGLOOP_STRICT=1) run() raises
    RingUnavailableError instead."""
    try:
        loop = _new_loop(_strict(strict))
    except BaseException:
        if isinstance(main, _Coroutine):
            main.close()        # (never awaited: no warning about it)
        raise
    with _asyncio.Runner(debug=debug, loop_factory=lambda: loop) as runner:
        return runner.run(main)


# The class behind asyncio.DefaultEventLoopPolicy on 3.11-3.13; reading that
# public name warns on 3.14, where asyncio deprecates its policy system.
_DefaultPolicy = _asyncio.unix_events._UnixDefaultEventLoopPolicy


class EventLoopPolicy(_DefaultPolicy):
    """A policy whose new loops are uringloop Loops.  asyncio deprecates
    policies in Python 3.14 (removal planned for 3.16): prefer run() or
    asyncio.Runner(loop_factory=uringloop.new_event_loop).  Making one on
    3.14+ warns with DeprecationWarning."""

    def __init__(self) -> None:
        if _sys.version_info >= (3, 14):
            _warnings.warn("uringloop.EventLoopPolicy is deprecated as asyncio's "
                           "policy system is (Python 3.14): use uringloop.run() or "
                           "asyncio.Runner(loop_factory=uringloop.new_event_loop)",
                           DeprecationWarning, stacklevel=2)
        super().__init__()

    def _loop_factory(self) -> Loop:
        return new_event_loop()


def install(*, strict: bool | None = None) -> None:
    """Make uringloop the loop of asyncio's default policy (strict: only
    where io_uring itself is allowed, else RingUnavailableError).

    Deprecated on Python 3.12+ (DeprecationWarning), as uvloop.install() is:
    asyncio.run() and asyncio.Runner take a loop_factory there, and the
    policy system is deprecated in 3.14.  Use uringloop.run(main()) or
    asyncio.Runner(loop_factory=uringloop.new_event_loop)."""
    if _sys.version_info >= (3, 12):
        _warnings.warn("uringloop.install() is deprecated on Python 3.12+: use "
                       "uringloop.run(main()) or asyncio.Runner(loop_factory="
                       "uringloop.new_event_loop)", DeprecationWarning, stacklevel=2)
    _new_loop(_strict(strict)).close()      # a setting that cannot work fails here
    with _warnings.catch_warnings():
        # asyncio's own warning for set_event_loop_policy on 3.14 would
        # point here; ours above already said it
        _warnings.simplefilter("ignore", DeprecationWarning)
        _asyncio.set_event_loop_policy(EventLoopPolicy())
