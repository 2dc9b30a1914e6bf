"""CPython's own loop-generic asyncio tests, run against uringloop.

The mixins of test.test_asyncio (installed with CPython) are combined here
with uringloop.Loop, the way CPython combines them with its selector loop.
Tests that need parts of uringloop not built yet, or that look inside the
selector loop's private attributes, are listed in KNOWN_GAPS with the reason;
everything else must pass.
"""
import pytest

import uringloop

test_events = pytest.importorskip("test.test_asyncio.test_events")
test_sock_lowlevel = pytest.importorskip("test.test_asyncio.test_sock_lowlevel")
from test.test_asyncio import utils as test_utils  # noqa: E402

TRANSPORTS = "needs the transport layer (issue #3)"
SELECTOR_PRIVATE = "reads a private attribute of the selector loops"

KNOWN_GAPS = {
    # test_events.EventLoopTestsMixin
    "test_bidirectional_pty": TRANSPORTS,
    "test_connect_accepted_socket": TRANSPORTS,
    "test_create_connection": TRANSPORTS,
    "test_create_connection_local_addr": TRANSPORTS,
    "test_create_datagram_endpoint": TRANSPORTS,
    "test_create_datagram_endpoint_ipv6": TRANSPORTS,
    "test_create_datagram_endpoint_sock": TRANSPORTS,
    "test_create_server": TRANSPORTS,
    "test_create_server_addr_in_use": TRANSPORTS,
    "test_create_server_dual_stack": TRANSPORTS,
    "test_create_server_reuse_port": TRANSPORTS,
    "test_create_server_sock": TRANSPORTS,
    "test_create_server_ssl": TRANSPORTS,
    "test_create_server_ssl_match_failed": TRANSPORTS,
    "test_create_server_ssl_verified": TRANSPORTS,
    "test_create_server_ssl_verify_failed": TRANSPORTS,
    "test_create_ssl_connection": TRANSPORTS,
    "test_create_ssl_unix_connection": TRANSPORTS,
    "test_create_unix_connection": TRANSPORTS,
    "test_create_unix_server": TRANSPORTS,
    "test_create_unix_server_path_socket_error": TRANSPORTS,
    "test_create_unix_server_ssl": TRANSPORTS,
    "test_create_unix_server_ssl_verified": TRANSPORTS,
    "test_create_unix_server_ssl_verify_failed": TRANSPORTS,
    "test_read_pipe": TRANSPORTS,
    "test_read_pty_output": TRANSPORTS,
    "test_server_close": TRANSPORTS,
    "test_ssl_connect_accepted_socket": TRANSPORTS,
    "test_unclosed_pipe_transport": TRANSPORTS,
    "test_write_pipe": TRANSPORTS,
    "test_write_pipe_disconnect_on_close": TRANSPORTS,
    "test_write_pty": TRANSPORTS,
    "test_timeout_rounding": SELECTOR_PRIVATE + " (_selector, in its message)",
    # test_sock_lowlevel.BaseSockTestsMixin
    "test_create_connection_sock": TRANSPORTS,
    "test_sendto_blocking": ("mocks sock.sendto(); a completion loop never "
                             "calls it (CPython skips it for Proactor too)"),
}


class KnownGaps:
    def setUp(self):
        reason = KNOWN_GAPS.get(self._testMethodName)
        if reason:
            self.skipTest(reason)
        super().setUp()


class UringEventLoopTests(KnownGaps, test_events.UnixEventLoopTestsMixin,
                          test_utils.TestCase):
    def create_event_loop(self):
        return uringloop.new_event_loop()


class UringSockTests(KnownGaps, test_sock_lowlevel.BaseSockTestsMixin,
                     test_utils.TestCase):
    def create_event_loop(self):
        return uringloop.new_event_loop()
