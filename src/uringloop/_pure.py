"""uringloop installed without its extension: where there is no io_uring
to build for (not Linux: a developer's Mac) or the build was asked to leave
it out (URINGLOOP_BUILD_EXTENSION=0).  It stands in for uringloop.core:
the package's loop functions then give asyncio's own selector loop, as
they would give uringloop's, and uringloop.open() runs its files in
threads, as it does on any loop not uringloop's.  uringloop.NATIVE is
False; loop.stats() and features() say why.
"""
import asyncio
import errno
import logging
import os
import sys

REASON = (f"uringloop was installed without its extension "
          f"({'URINGLOOP_BUILD_EXTENSION=0' if sys.platform.startswith('linux') else sys.platform}): "
          f"asyncio's own loop runs instead")


class RingUnavailableError(OSError):
    """io_uring cannot be used in this process (here: the install has no
    extension to use it with)."""


_said = False


class Loop(asyncio.SelectorEventLoop):
    """asyncio's selector loop, handed out where uringloop's cannot be."""

    def __init__(self):
        global _said
        super().__init__()
        if not _said:
            _said = True
            logging.getLogger("uringloop").info("uringloop: %s", REASON)

    def stats(self):
        return {"driver": "asyncio", "driver_reason": REASON}


class RingLoop:
    """(No loop is one here: uringloop.open() takes its thread path.)"""


def ring_refusal(loop):
    return RingUnavailableError(errno.ENOSYS, REASON)


def features():
    return {"available": False, "error": REASON, "kernel": os.uname().release,
            "setup_flags": [], "opcodes": {}, "last_opcode": None, "ring_entries": None}


def shortcuts():
    return {}


class FileRequests:
    """The requests of one file still running (in threads, here)."""

    def __init__(self):
        self.in_flight = 0
        self.orphan_fds = []
        self.idle_waiter = None

    def _started(self):
        self.in_flight += 1

    def _ended(self):
        if self.in_flight <= 0:
            raise RuntimeError("no request of this file is in flight")
        self.in_flight -= 1
        if self.in_flight == 0:
            while self.orphan_fds:
                os.close(self.orphan_fds.pop())
            if self.idle_waiter is not None:
                waiter, self.idle_waiter = self.idle_waiter, None
                if not waiter.done():
                    waiter.set_result(None)

    def wait_idle(self, loop):
        if self.in_flight == 0:
            fut = loop.create_future()
            fut.set_result(None)
            return fut
        if self.idle_waiter is None or self.idle_waiter.done():
            self.idle_waiter = loop.create_future()
        return self.idle_waiter


def close_when_idle(requests, fd):
    if requests.in_flight == 0:
        os.close(fd)
    else:
        requests.orphan_fds.append(fd)
