"""What the ring layer does, counted: one io_uring_enter per loop iteration
that has I/O to submit or wait for, none when only callbacks run.  The
kernel's ring's own counts: skipped on the epoll driver."""
import asyncio
import socket
import subprocess
import sys

import pytest

import uringloop
from conftest import requires, until_closed

pytestmark = requires("ring")


def test_stats_keys(uloop):
    stats = uloop.stats()
    for key in ("iterations", "enter_calls", "sqes_submitted", "cqes_reaped", "ops_in_flight",
                "sq_entries", "cq_entries", "setup_flags"):
        assert key in stats


@requires("TASKRUN_FLAG", "DEFER_TASKRUN")
def test_callback_only_iterations_make_no_system_call(uloop):
    """With DEFER_TASKRUN|TASKRUN_FLAG and nothing queued, an iteration
    that has callbacks ready skips io_uring_enter."""
    uloop.run_until_complete(asyncio.sleep(0))
    before = uloop.stats()["enter_calls"]

    async def spin():
        for _ in range(1000):
            await asyncio.sleep(0)

    uloop.run_until_complete(spin())
    assert uloop.stats()["enter_calls"] - before <= 5


@pytest.mark.parametrize("data_first", [True, False])
def test_a_receive_makes_no_request_for_waiting_data_and_one_poll_else(uloop, data_first):
    """A ping-pong over a socketpair: the sendall is one send(2) made at
    once (as the stdlib and uvloop make it).  A receive that finds the
    ping waiting is one recv(2) and no request; one that has to wait is
    one POLL_ADD, and one io_uring_enter per round carries it and waits
    for its completion."""
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    rounds = 500

    async def main():
        for i in range(rounds):
            recv = asyncio.ensure_future(uloop.sock_recv(b, 100))
            if not data_first:
                await asyncio.sleep(0)      # the receive runs: nothing there yet
            await uloop.sock_sendall(a, b"ping")
            assert await recv == b"ping"

    uloop.run_until_complete(main())
    before = uloop.stats()
    uloop.run_until_complete(main())
    after = uloop.stats()
    enters = after["enter_calls"] - before["enter_calls"]
    sqes = after["sqes_submitted"] - before["sqes_submitted"]
    assert sqes == (0 if data_first else rounds)
    assert enters <= (10 if data_first else rounds + 10), enters
    a.close()
    b.close()


def test_every_submitted_request_completes(uloop):
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)

    async def main():
        for _ in range(100):
            await uloop.sock_sendall(a, b"x")
            await uloop.sock_recv(b, 1)

    uloop.run_until_complete(main())
    stats = uloop.stats()
    # the eventfd READ is the one request always in flight
    assert stats["ops_in_flight"] == 1
    a.close()
    b.close()


class _Quiet(asyncio.Protocol):
    def connection_lost(self, exc):
        self.lost = exc


def test_writes_made_in_one_callback_leave_in_one_request(uloop):
    """write(), write() and writelines() in one callback on an idle
    transport: one SENDMSG before the next enter, not a SEND for the first
    chunk and, once it completes, a SENDMSG for the rest; the bytes arrive
    in order.  An abort() in the same callback still sends what was
    written before it, as the selector loop sends inside write()
    (test_streams.py, test_writes_then_abort_...)."""
    a, b = socket.socketpair()
    b.setblocking(False)

    async def main():
        tr, _ = await uloop.create_connection(_Quiet, sock=a)
        await asyncio.sleep(0)
        for round_ in range(50):
            before = uloop.stats()["sqes_submitted"]
            parts = [b"head%d:" % round_, b"x" * 100, b"y" * 5000]
            tr.write(parts[0])
            tr.write(parts[1])
            tr.writelines([parts[2], b";"])
            expected = b"".join(parts) + b";"
            await asyncio.sleep(0)
            assert uloop.stats()["sqes_submitted"] - before == 1
            got = bytearray()
            while len(got) < len(expected):
                got += await uloop.sock_recv(b, 1 << 16)
            assert got == expected
            assert tr.get_write_buffer_size() == 0

        tr.write(b"last")
        tr.abort()
        assert tr.get_write_buffer_size() == 0
        await until_closed(tr)
        rest = b""
        while True:
            try:
                chunk = b.recv(100)
            except BlockingIOError:
                chunk = None
            if not chunk:
                break
            rest += chunk
        assert (rest, chunk) == (b"last", b"")    # sent, then closed

    uloop.run_until_complete(main())
    b.close()


def test_requires_skips_on_a_missing_feature_and_rejects_unknown_names(monkeypatch):
    import pytest
    assert requires("RECV", "DEFER_TASKRUN").args == (False,)
    with pytest.raises(ValueError, match="unknown io_uring features"):
        requires("NO_SUCH_OPCODE")
    # a kernel without SEND_ZC, as an older one reports it
    real = uringloop.features()
    older = dict(real, opcodes=dict(real["opcodes"], SEND_ZC=False))
    monkeypatch.setattr(uringloop, "features", lambda: older)
    mark = requires("SEND_ZC", "RECV")
    assert mark.args == (True,)
    assert mark.kwargs["reason"] == "kernel's io_uring lacks SEND_ZC (Linux 6.0)"


@pytest.fixture
def spinning_loop(monkeypatch):
    monkeypatch.setenv("URINGLOOP_SPIN_US", "20")
    loop = uringloop.new_event_loop()
    yield loop
    loop.close()


def test_an_idle_loop_sleeps_without_spinning(spinning_loop):
    """With busy polling on (URINGLOOP_SPIN_US), the loop watches the ring
    before sleeping only after a short wait: waits of milliseconds never
    spin, so an idle server spends nothing on it."""
    async def main():
        for _ in range(5):
            await asyncio.sleep(0.02)
    spinning_loop.run_until_complete(main())
    stats = spinning_loop.stats()
    assert (stats["spins"], stats["spin_hits"]) == (0, 0)


@pytest.mark.parametrize("value", ["x", "-1", "1001", "2.5"])
def test_a_bad_spin_setting_is_a_clear_error(monkeypatch, value):
    monkeypatch.setenv("URINGLOOP_SPIN_US", value)
    with pytest.raises(ValueError, match="URINGLOOP_SPIN_US"):
        uringloop.new_event_loop()
    monkeypatch.delenv("URINGLOOP_SPIN_US")
    uringloop.new_event_loop().close()      # and the next loop is fine


PEER_ECHO = """
import socket, sys
s = socket.socket(fileno=int(sys.argv[1]))
while True:
    data = s.recv(65536)
    if not data:
        break
    s.sendall(data)
"""


@pytest.mark.parametrize("spin", [True, False], ids=["URINGLOOP_SPIN_US=500", "default"])
def test_round_trips_with_a_quick_peer_are_caught_by_spinning(monkeypatch, spin):
    """A peer process that answers at once: with busy polling on, after the
    first short wait the loop watches the ring before sleeping and finds
    the answer there instead of being woken for it (1 KiB echo with 10
    connections: 1.13x req/s).  Counts, not times: some waits spin, and
    some of those find the answer; by default none spins.  (The budget is
    well above a round trip to a Python peer on a slow machine: with 20 us
    a round trip may never be short enough to start spinning.)"""
    if spin:
        monkeypatch.setenv("URINGLOOP_SPIN_US", "500")
    uloop = uringloop.new_event_loop()
    a, b = socket.socketpair()
    peer = subprocess.Popen([sys.executable, "-c", PEER_ECHO, str(b.fileno())],
                            pass_fds=[b.fileno()])
    b.close()

    async def main():
        # (a machine busy elsewhere -- CI runs two suites side by side on
        # two cores -- may leave the peer no CPU within the budget for a
        # whole run: up to twenty runs, until a spin finds it)
        a.setblocking(False)
        for run in range(20):
            for i in range(2000):
                await uloop.sock_sendall(a, b"x")
                assert await uloop.sock_recv(a, 10) == b"x"
            if uloop.stats()["spin_hits"] or not spin:
                break
    try:
        uloop.run_until_complete(main())
    finally:
        a.close()
        peer.wait(timeout=10)
        uloop.close()
    stats = uloop.stats()
    if spin:
        assert stats["spins"] > 0 and stats["spin_hits"] > 0, stats
    else:
        assert (stats["spins"], stats["spin_hits"]) == (0, 0)


@pytest.mark.parametrize("value", ["zerocopy", "SPLICE", "1"])
def test_a_bad_sendfile_setting_is_a_clear_error(monkeypatch, value):
    monkeypatch.setenv("URINGLOOP_SENDFILE", value)
    with pytest.raises(ValueError, match="URINGLOOP_SENDFILE must be 'sendfile' or 'splice'"):
        uringloop.new_event_loop()
    for good, method in (("", "sendfile"), ("sendfile", "sendfile"), ("splice", "splice")):
        monkeypatch.setenv("URINGLOOP_SENDFILE", good)
        loop = uringloop.new_event_loop()
        assert loop.stats()["sendfile_method"] == method
        loop.close()


@requires("DEFER_TASKRUN")
def test_an_echoed_message_is_one_iteration_of_the_loop():
    """A protocol that writes the next message when the peer's echo of the
    last one arrives: its send is submitted, completes inside the
    submission (the socket has room), and is dispatched before the loop
    sleeps for the echo -- one iteration per round trip, two enters (the
    submission, the wait).  When the submission and the wait were one
    enter, it came back at once with the send's completion alone, and the
    loop went round once more before it slept: two iterations.  Counts,
    not times."""
    loop = uringloop.new_event_loop()
    a, b = socket.socketpair()
    peer = subprocess.Popen([sys.executable, "-c", PEER_ECHO, str(b.fileno())],
                            pass_fds=[b.fileno()])
    b.close()
    rounds, size = 300, 1024

    class Pinger(asyncio.Protocol):
        def __init__(self):
            self.sent = self.got = 0
            self.done = loop.create_future()

        def connection_made(self, transport):
            self.transport = transport
            self.ping()

        def ping(self):
            self.sent += 1
            self.transport.write(b"x" * size)

        def data_received(self, data):
            self.got += len(data)
            if self.got == self.sent * size:
                if self.sent == rounds:
                    self.done.set_result(None)
                else:
                    self.ping()

    async def main():
        transport, pinger = await loop.create_connection(Pinger, sock=a)
        before = loop.stats()
        await pinger.done
        after = loop.stats()
        transport.close()
        return {key: (after[key] - before[key]) / rounds
                for key in ("iterations", "enter_calls")}
    try:
        per_round = loop.run_until_complete(main())
    finally:
        loop.close()
        peer.wait(timeout=10)
    assert per_round["iterations"] < 1.2, per_round
    assert per_round["enter_calls"] < 2.2, per_round
