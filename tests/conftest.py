"""Shared fixtures.

`any_loop` runs a test on uringloop and on the stdlib loop: the stdlib is the
reference for behaviour, so a test written against it must pass on both.
`uloop` is a uringloop Loop only.  Both check, after the test, that the loop
has no io_uring request left in flight once closed.
"""
import asyncio
import gc

import pytest

import uringloop


def _close_and_check(loop):
    if not loop.is_closed():
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
    if isinstance(loop, uringloop.Loop):
        assert loop.stats()["ops_in_flight"] == 0, loop.stats()


@pytest.fixture
def uloop():
    loop = uringloop.new_event_loop()
    asyncio.set_event_loop(loop)
    yield loop
    asyncio.set_event_loop(None)
    _close_and_check(loop)
    gc.collect()


@pytest.fixture(params=["uringloop", "asyncio"])
def any_loop(request):
    if request.param == "uringloop":
        loop = uringloop.new_event_loop()
    else:
        loop = asyncio.SelectorEventLoop()
    asyncio.set_event_loop(loop)
    yield loop
    asyncio.set_event_loop(None)
    _close_and_check(loop)
    gc.collect()
