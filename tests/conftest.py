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


@pytest.fixture(autouse=True)
def every_closed_loop_is_drained(monkeypatch):
    """After each test, every uringloop Loop the test made and closed has
    no io_uring request left in flight: close() got every buffer back from
    the kernel (otherwise it keeps them, and says so)."""
    import weakref

    made = []
    original_init = uringloop.Loop.__init__

    def tracking_init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        made.append(weakref.ref(self))

    monkeypatch.setattr(uringloop.Loop, "__init__", tracking_init)
    yield
    for ref in made:
        loop = ref()
        if loop is not None and loop.is_closed():
            assert loop.stats()["ops_in_flight"] == 0, (loop, loop.stats())


# pytest-asyncio: how a project runs its async tests on uringloop.  From
# pytest-asyncio 1.x the pytest_asyncio_loop_factories hook names the loop
# factory; older versions take an event_loop_policy fixture returning
# uringloop.EventLoopPolicy() instead.
try:
    from pytest_asyncio.plugin import PytestAsyncioSpecs as _specs
except ImportError:
    _specs = None

if _specs is not None and hasattr(_specs, "pytest_asyncio_loop_factories"):
    def pytest_asyncio_loop_factories(config, item):
        return {"uringloop": uringloop.new_event_loop}
else:
    @pytest.fixture
    def event_loop_policy():
        return uringloop.EventLoopPolicy()
