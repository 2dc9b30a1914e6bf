"""CPython's own loop-generic asyncio tests, run against uringloop.

The mixins of test.test_asyncio (installed with CPython) are combined here
with uringloop.Loop, the way CPython combines them with its selector loop.
Tests that need parts of uringloop not built yet, or that look inside the
selector loop's private attributes, are listed in KNOWN_GAPS with the reason;
everything else must pass.
"""
import os
import unittest

import pytest

import uringloop

test_events = pytest.importorskip("test.test_asyncio.test_events")
test_sock_lowlevel = pytest.importorskip("test.test_asyncio.test_sock_lowlevel")
from test.test_asyncio import utils as test_utils  # noqa: E402

SELECTOR_PRIVATE = "reads a private attribute of the selector loops"

KNOWN_GAPS = {
    # test_events.EventLoopTestsMixin
    "test_timeout_rounding": SELECTOR_PRIVATE + " (_selector, in its message)",
    # test_ssl.TestSSL (3.14+): it swaps the socket of the selector
    # transport under the TLS one (_read_ready_cb, _sock) and patches its
    # write(); where it cannot, the client gives up and the test's server
    # thread spins on EOF forever
    "test_remote_shutdown_receives_trailing_data_on_slow_socket":
        SELECTOR_PRIVATE + " (_read_ready_cb and _sock of its socket transport)",
}


class KnownGaps:
    def setUp(self):
        reason = None if os.environ.get("URINGLOOP_NO_GAPS") else KNOWN_GAPS.get(self._testMethodName)
        if reason:
            self.skipTest(reason)
        super().setUp()


class LoopReplaced:
    """For a suite whose setUp makes a stdlib loop: it is closed and
    uringloop's takes its place."""
    def setUp(self):
        super().setUp()
        self.loop.close()
        self.loop = uringloop.new_event_loop()
        self.set_event_loop(self.loop)


# 3.11-3.13 wrap the mixin for Unix loops (it sets a child watcher up);
# 3.14 removed child watchers and the wrapper with them
EventLoopMixin = getattr(test_events, "UnixEventLoopTestsMixin", test_events.EventLoopTestsMixin)


class UringEventLoopTests(KnownGaps, EventLoopMixin,
                          test_events.SubprocessTestsMixin, test_utils.TestCase):
    def create_event_loop(self):
        return uringloop.new_event_loop()


class UringSockTests(KnownGaps, test_sock_lowlevel.BaseSockTestsMixin,
                     test_utils.TestCase):
    def create_event_loop(self):
        return uringloop.new_event_loop()


test_sendfile = pytest.importorskip("test.test_asyncio.test_sendfile")
test_server = pytest.importorskip("test.test_asyncio.test_server")
test_sslproto = pytest.importorskip("test.test_asyncio.test_sslproto")
test_ssl = pytest.importorskip("test.test_asyncio.test_ssl")
test_subprocess = pytest.importorskip("test.test_asyncio.test_subprocess")
test_streams = pytest.importorskip("test.test_asyncio.test_streams")


class UringSendfileTests(KnownGaps, test_sendfile.SendfileTestsBase,
                         test_utils.TestCase):
    def create_event_loop(self):
        return uringloop.new_event_loop()


class UringStartServerTests(KnownGaps, test_server.BaseStartServer,
                            unittest.TestCase):
    def new_loop(self):
        return uringloop.new_event_loop()


class UringStartTLSTests(KnownGaps, test_sslproto.BaseStartTLS,
                         unittest.TestCase):
    def new_loop(self):
        return uringloop.new_event_loop()


class UringSSLTests(KnownGaps, LoopReplaced, test_ssl.TestSSL):
    # (transports/tls.pyx: the compiled data path of the SSL protocol)
    pass


class UringSubprocessTests(KnownGaps, test_subprocess.SubprocessMixin,
                           test_utils.TestCase):
    # uringloop learns of child exits from a pidfd on its ring: no child
    # watcher is involved, so the mixin runs without one.
    def setUp(self):
        super().setUp()
        self.loop = uringloop.new_event_loop()
        self.set_event_loop(self.loop)


class UringStreamTests(KnownGaps, LoopReplaced, test_streams.StreamTests):
    pass
