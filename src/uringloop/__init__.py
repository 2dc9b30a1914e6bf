"""uringloop: an asyncio event loop for Linux built on io_uring.

    import uringloop
    uringloop.run(main())
    asyncio.Runner(loop_factory=uringloop.new_event_loop)
    uringloop.install()          # deprecated on Python 3.12+, as uvloop's

When the kernel or a sandbox refuses io_uring, Loop() and new_event_loop()
raise RingUnavailableError; run(), install() and loop_factory() fall back to
the stdlib loop with one warning, unless strict (the `strict=True` argument or the
environment variable URINGLOOP_STRICT=1).
"""
import asyncio as _asyncio
import os as _os
import sys as _sys
import warnings as _warnings
from collections.abc import Callable as _Callable, Coroutine as _Coroutine
from types import FrameType as _FrameType
from typing import Any as _Any, TypeVar as _TypeVar

from .core import Loop, RegisteredBuffer, RingUnavailableError, ZeroCopyReceive, features
from .core import shortcuts
from .core import (SOL_URINGLOOP, SO_ZEROCOPY, ZC_ALWAYS, ZC_AUTO, ZC_MODE,
                   RefillQueue, ZeroCopyPiece, zcrx_offset, zcrx_split,
                   ZC_NEVER, ZC_THRESHOLD, ZeroCopyFuture, ZeroCopyResult, set_zerocopy)
# The classes uringloop's transports report (isinstance() holds), typed
# with the zero-copy methods they add (see core.pyi).
from .core import AsyncioStreamTransport as StreamTransport
from .core import AsyncioDatagramTransport as DatagramTransport
# Files on the ring (files.py); open and stat stay out of __all__ so that
# `from uringloop import *` does not hide the builtin open().
from .files import open as open, stat as stat, AsyncFile, AsyncTextFile

__all__ = ("run", "new_event_loop", "loop_factory", "install", "EventLoopPolicy", "Loop",
           "RingUnavailableError", "features", "SOL_URINGLOOP", "SO_ZEROCOPY",
           "ZC_MODE", "ZC_THRESHOLD", "ZC_AUTO", "ZC_ALWAYS", "ZC_NEVER",
           "ZeroCopyResult", "ZeroCopyFuture", "set_zerocopy", "RegisteredBuffer", "ZeroCopyReceive",
           "ZeroCopyPiece", "RefillQueue", "zcrx_offset", "zcrx_split",
           "StreamTransport", "DatagramTransport", "AsyncFile", "AsyncTextFile", "shortcuts")
__version__ = "0.1.0.dev0"

_fallback_warned = False
_T = _TypeVar("_T")


def new_event_loop() -> Loop:
    """A new uringloop Loop. Raises RingUnavailableError if io_uring cannot
    be used."""
    return Loop()


def _strict(strict: bool | None) -> bool:
    if strict is None:
        return _os.environ.get("URINGLOOP_STRICT", "") not in ("", "0")
    return strict


_PACKAGE_DIR = _os.path.dirname(_os.path.abspath(__file__))
_ASYNCIO_DIR = _os.path.dirname(_os.path.abspath(_asyncio.__file__))


def _caller_stacklevel() -> int:
    """The stacklevel for warnings.warn() called here that names the first
    frame outside uringloop and asyncio: the user's line that called run(),
    install() or asyncio.Runner, not runners.py."""
    level = 2
    frame: _FrameType | None = _sys._getframe(2)
    while frame is not None:
        path = _os.path.abspath(frame.f_code.co_filename)
        if not path.startswith((_PACKAGE_DIR + _os.sep, _ASYNCIO_DIR + _os.sep)):
            break
        frame = frame.f_back
        level += 1
    return level


def _warn_fallback(exc: BaseException) -> None:
    global _fallback_warned
    if not _fallback_warned:
        _fallback_warned = True
        _warnings.warn(f"uringloop: io_uring unavailable, using the stdlib "
                       f"asyncio loop instead ({exc})", RuntimeWarning,
                       stacklevel=_caller_stacklevel())


def _loop_factory(strict: bool) -> _Callable[[], _asyncio.AbstractEventLoop]:
    """A loop factory for asyncio.Runner: a uringloop Loop, or -- when the
    ring cannot be made (a seccomp profile, io_uring_disabled, an old kernel,
    no locked memory left even for the smallest ring) and not strict -- the
    stdlib loop after one warning.  Decided by making the real Loop, not by
    features()' probe."""
    def factory() -> _asyncio.AbstractEventLoop:
        try:
            return Loop()
        except RingUnavailableError as exc:
            if strict:
                raise
            _warn_fallback(exc)
            return _asyncio.new_event_loop()
    return factory


def loop_factory() -> _asyncio.AbstractEventLoop:
    """A new event loop: a uringloop Loop, or -- when io_uring is refused
    and not strict (URINGLOOP_STRICT=1) -- the stdlib's loop, after one
    RuntimeWarning, as run() and install() fall back.  For anything that
    takes a loop factory: asyncio.Runner(loop_factory=uringloop.loop_factory),
    uvicorn's `--loop uringloop:loop_factory` (uvicorn 0.36 and later).
    new_event_loop() raises RingUnavailableError instead."""
    return _loop_factory(_strict(None))()


def run(main: _Coroutine[_Any, _Any, _T], *, debug: bool | None = None,
        strict: bool | None = None) -> _T:
    """Run coroutine `main` on a new uringloop and return its result, like
    asyncio.run().  Falls back to the stdlib loop (one RuntimeWarning) when
    io_uring is refused; with strict=True (or URINGLOOP_STRICT=1) raises
    RingUnavailableError instead."""
    factory = _loop_factory(_strict(strict))
    with _asyncio.Runner(debug=debug, loop_factory=factory) as runner:
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
    """Make uringloop the loop of asyncio's default policy.  When io_uring
    is refused, leaves the stdlib policy in place with one RuntimeWarning
    (or, strict, raises RingUnavailableError).

    Deprecated on Python 3.12+ (DeprecationWarning), as uvloop.install() is:
    asyncio.run() and asyncio.Runner take a loop_factory there, and the
    policy system is deprecated in 3.14.  Use uringloop.run(main()) or
    asyncio.Runner(loop_factory=uringloop.new_event_loop)."""
    if _sys.version_info >= (3, 12):
        _warnings.warn("uringloop.install() is deprecated on Python 3.12+: use "
                       "uringloop.run(main()) or asyncio.Runner(loop_factory="
                       "uringloop.new_event_loop)", DeprecationWarning, stacklevel=2)
    strict = _strict(strict)
    try:
        Loop().close()          # the real ring, as the policy's loops get it
    except RingUnavailableError as exc:
        if strict:
            raise
        _warn_fallback(exc)
        return
    with _warnings.catch_warnings():
        # asyncio's own warning for set_event_loop_policy on 3.14 would
        # point here; ours above already said it
        _warnings.simplefilter("ignore", DeprecationWarning)
        _asyncio.set_event_loop_policy(EventLoopPolicy())
