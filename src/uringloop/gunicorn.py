"""Gunicorn workers on uringloop.

For aiohttp applications, as aiohttp's GunicornUVLoopWebWorker is for uvloop
(make_app an Application, or a factory of one: `def` or `async def`):

    gunicorn app:make_app -k uringloop.gunicorn.UringWebWorker -w 2

For ASGI applications (FastAPI, Starlette, ...), uvicorn's gunicorn worker
with its loop made by uringloop:

    gunicorn app:app -k uringloop.gunicorn.UringUvicornWorker -w 2

Each worker process makes its own ring after the fork.

How connections spread over the workers: by default they share the
arbiter's listening socket, and whichever worker's loop runs first takes
what is queued, up to the backlog, as the stdlib's worker does (a busy or
blocked worker takes none; a burst of 64 went whole to one of two workers
here, bench/run_gunicorn.py).  With gunicorn's `--reuse-port` each worker
listens on a socket of its own and the kernel picks one by the
connection's addresses: bursts split evenly (59/41 here), but a busy
worker still gets its share.  Set net.ipv4.tcp_migrate_req = 1 with it: a
worker that dies (or is killed at --timeout) otherwise resets the
connections still queued on its socket (tests/test_ecosystem.py,
..._reuse_port_...).  Where io_uring is
refused a worker runs on the stdlib loop, with one warning (see
uringloop.run; URINGLOOP_STRICT=1 makes it an error).  The aiohttp worker
needs aiohttp; the ASGI worker needs uvicorn, and takes its base class from
the uvicorn-worker package when installed (uvicorn.workers, deprecated, when
not).  Each class is made when first asked for, so one does not need the
other's framework.
"""
import asyncio
import inspect

import uringloop

__all__ = ("UringWebWorker", "UringUvicornWorker")


def _web_worker() -> type:
    from aiohttp.web import Application
    from aiohttp.worker import GunicornWebWorker

    class UringWebWorker(GunicornWebWorker):
        def init_process(self) -> None:
            # aiohttp's init_process() closes the loop the policy gives and
            # makes one with the policy; this one makes its loop with
            # uringloop.loop_factory() (on the epoll driver where io_uring
            # is refused) and sets it, without asyncio's policy functions,
            # which warn on Python 3.12+, then goes on as gunicorn's does.
            self.loop = uringloop.loop_factory()
            asyncio.set_event_loop(self.loop)
            super(GunicornWebWorker, self).init_process()

        def run(self) -> None:
            # aiohttp's worker takes an Application or an `async def`
            # factory and exits with status 3 on a plain `def make_app()`;
            # this one calls a plain factory too, on the running loop.
            target: object = getattr(self, "wsgi")   # (gunicorn is untyped)
            if (not isinstance(target, Application) and callable(target)
                    and not inspect.iscoroutinefunction(target)):
                async def make_app() -> object:
                    app = target()
                    if asyncio.iscoroutine(app):
                        app = await app
                    return app
                self.wsgi = make_app
            super().run()

    return UringWebWorker


def _uvicorn_worker() -> type:
    try:
        # (no type information in uvicorn-worker)
        from uvicorn_worker import UvicornWorker  # type: ignore[import-untyped, unused-ignore]
    except ImportError:
        import warnings
        with warnings.catch_warnings():
            # uvicorn.workers warns that it moved to uvicorn-worker
            warnings.simplefilter("ignore", DeprecationWarning)
            from uvicorn.workers import UvicornWorker

    class UringUvicornWorker(UvicornWorker):  # type: ignore[misc, unused-ignore]
        # uvicorn sets up no loop of its own ("none"); run() makes ours
        CONFIG_KWARGS = {"loop": "none", "http": "auto"}

        def run(self) -> None:
            with asyncio.Runner(loop_factory=uringloop.loop_factory) as runner:
                runner.run(self._serve())

    return UringUvicornWorker


_MAKERS = {"UringWebWorker": _web_worker, "UringUvicornWorker": _uvicorn_worker}


def __getattr__(name: str) -> type:
    maker = _MAKERS.get(name)
    if maker is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    cls = maker()
    cls.__module__ = __name__
    globals()[name] = cls
    return cls
