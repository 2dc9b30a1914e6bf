"""Gunicorn worker for aiohttp applications on uringloop, as aiohttp's
GunicornUVLoopWebWorker is for uvloop:

    gunicorn app:make_app -k uringloop.gunicorn.UringWebWorker -w 2

Each worker process makes its own ring after the fork.  Where io_uring is
refused the worker runs on the stdlib loop, with one warning (see
uringloop.install).  Needs aiohttp and gunicorn.
"""
import asyncio

from aiohttp.worker import GunicornWebWorker

import uringloop


class UringWebWorker(GunicornWebWorker):
    def init_process(self) -> None:
        # A loop inherited from the master must not be used after fork().
        try:
            asyncio.get_event_loop().close()
        except RuntimeError:
            pass
        uringloop.install()
        super().init_process()
