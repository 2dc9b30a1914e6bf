"""Flow control and pause: pause_reading()/resume_reading() on streams
and datagrams (by a timer, in the protocol's own callback, under a
flood, with set_protocol()), what was kept while paused, the write
buffer's limits, pause_writing()/resume_writing() around close().

A test that takes `any_loop` runs its scenario on uringloop and on
asyncio.SelectorEventLoop and expects the same outcome; the others look
at what uringloop itself does (its requests, its own protocols)."""
import asyncio
import os
import socket
import struct
import threading
import time

import pytest

from conftest import recv_until_eof, turns, until, until_held
from protocols import Collect, collected_connection
from recorders import (BufferedRecorder,
                       datagram_pair,
                       DatagramRecorder,
                       Events,
                       STREAM_MODES,
                       StreamRecorder)


def test_datagram_pause_and_resume_reading(any_loop):
    loop = any_loop

    async def main():
        got = []

        class P(asyncio.DatagramProtocol):
            def datagram_received(self, data, addr):
                got.append(data)
        tr, _ = await loop.create_datagram_endpoint(P, local_addr=("127.0.0.1", 0))
        addr = tr.get_extra_info("sockname")
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.sendto(b"before", addr)
        await until(lambda: b"before" in got, "the first datagram")
        tr.pause_reading()
        paused = tr.is_reading()
        for i in range(5):
            s.sendto(b"%d" % i, addr)
        # an absence: nothing may come while paused, however long the loop
        # runs; the datagrams are in the socket once sendto() returns
        await asyncio.sleep(0.05)
        during = list(got)
        tr.resume_reading()
        await until(lambda: len(got) >= 6, "the datagrams sent while paused")
        tr.pause_reading()
        tr.resume_reading()          # at once: the cancel still in flight
        s.sendto(b"after", addr)
        await until(lambda: b"after" in got, "the datagram after the toggle")
        s.close()
        tr.close()
        return paused, during, got
    paused, during, got = loop.run_until_complete(main())
    assert paused is False
    assert during == [b"before"]
    assert got == [b"before", b"0", b"1", b"2", b"3", b"4", b"after"]


def test_a_reset_while_reading_is_paused_is_reported_on_resume(any_loop):
    """The selector loop reads nothing while a transport's reading is
    paused, so a peer's reset then reaches connection_lost() only after
    resume_reading(), and a send in between is what meets it (sendfile
    pauses reading and must raise ConnectionError itself, the transport
    still open).  uringloop's receive stays armed while paused; the error
    it gets must wait for the resume as its data does."""
    loop = any_loop

    async def main():
        lsock = socket.create_server(("127.0.0.1", 0))
        proto = Events()
        tr, _ = await loop.create_connection(lambda: proto, *lsock.getsockname())
        peer, _ = lsock.accept()
        lsock.close()
        await turns()
        tr.pause_reading()
        await asyncio.sleep(0)
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        peer.close()
        for _ in range(5):
            await asyncio.sleep(0.01)
        paused = (list(proto.events), tr.is_closing())
        tr.resume_reading()
        for _ in range(5):
            await asyncio.sleep(0.01)
        return paused, proto.events
    assert loop.run_until_complete(main()) == (
        ([], False), [("connection_lost", ConnectionResetError)])


@pytest.mark.parametrize("high, low, limits", [
    (2 ** 63, None, (2 ** 61, 2 ** 63)),        # the stdlib keeps 2**63 as is
    (float("inf"), 0, (0, float("inf"))),
    (1000.0, 10.5, (10.5, 1000.0)),
])
def test_write_buffer_limits_take_huge_and_float_values(any_loop, high, low, limits):
    """Any number the stdlib takes is taken; a high limit beyond what can
    be queued never pauses writing, a small one does."""
    loop = any_loop

    async def main():
        paused = []

        class P(asyncio.Protocol):
            def pause_writing(self):
                paused.append(True)

        a, b = socket.socketpair()
        tr, _ = await loop.create_connection(P, sock=a)
        tr.set_write_buffer_limits(high, low)
        got = tr.get_write_buffer_limits()
        tr.write(b"x" * (4 << 20))      # more than the socket takes at once
        tr.abort()
        b.close()
        await asyncio.sleep(0)
        return got, paused
    got, paused = loop.run_until_complete(main())
    assert paused == ([True] if high < 4 << 20 else [])
    # uringloop stores what fits a Py_ssize_t: 2**63 - 1 for 2**63 and inf
    assert got == limits or got == tuple(
        2 ** 63 - 1 if v >= 2 ** 63 else int(v) for v in limits)


def test_what_resume_writing_writes_after_close_is_sent(any_loop):
    """close() with writes queued, and the protocol's resume_writing()
    writes again as the queue drains: the stdlib sends that too before it
    closes ("may append to buffer").  asyncio's SSLProtocol does this: the
    records it held while paused, close_notify last, are written after
    close(); uringloop had reported connection_lost() with them still
    queued (uvloop's test_remote_shutdown_receives_trailing_data)."""
    loop = any_loop

    async def main():
        a, b = socket.socketpair()
        b.setblocking(False)
        lost = loop.create_future()

        class P(asyncio.Protocol):
            def connection_made(self, tr):
                self.tr = tr

            def resume_writing(self):
                if not hasattr(self, "resumed"):
                    self.resumed = True
                    self.tr.write(b"tail" * 100_000)

            def connection_lost(self, exc):
                lost.set_result(exc)

        tr, _ = await loop.create_connection(P, sock=a)
        tr.set_write_buffer_limits(high=64 * 1024)
        tr.write(b"x" * (4 << 20))       # more than the socket takes: paused
        tr.close()
        got = await recv_until_eof(loop, b, 1 << 20, timeout=5)
        b.close()
        return got, await lost
    got, exc = loop.run_until_complete(main())
    assert exc is None
    assert got == b"x" * (4 << 20) + b"tail" * 100_000


def _pausing_in_first_call(recorder):
    """A subclass of the recorder class that pauses reading from inside its
    first data callback."""
    class Pausing(recorder):
        def saw(self, n):
            super().saw(n)
            if self.calls == 1:
                self.tr.pause_reading()
    return Pausing


@pytest.mark.parametrize("mode", sorted(STREAM_MODES))
def test_a_stream_paused_by_a_timer_gets_no_data_until_resumed(any_loop, mode):
    """A peer streams while a timer pauses and resumes reading 40 times:
    not one data callback between a pause_reading() and its
    resume_reading(), and every byte arrives (a RECV that completed in the
    enter before the pause went to buffer_updated(): 19 of 40 pauses)."""
    loop = any_loop
    factory, chunk = STREAM_MODES[mode]
    total = 40 * 16 * chunk if chunk < 8192 else 6 << 20

    async def main():
        a, b = socket.socketpair()
        tr, proto = await loop.create_connection(factory, sock=a)
        # a thread sends, so that data arrives at any moment of an iteration
        sender = threading.Thread(target=lambda: [
            b.sendall(bytes(min(chunk, total - i))) for i in range(0, total, chunk)])
        sender.start()
        for _ in range(40):
            await asyncio.sleep(0.002)
            tr.pause_reading()
            await asyncio.sleep(0.002)
            tr.resume_reading()
        while proto.nbytes < total:
            await asyncio.sleep(0.01)
        sender.join()
        tr.close()
        b.close()
        return proto.while_paused, proto.nbytes
    assert loop.run_until_complete(asyncio.wait_for(main(), 60)) == (0, total)


async def _toggle_then_resume(tr, proto, all_came):
    """With reading paused by the protocol's first callback: let data come,
    call resume_reading() and pause_reading() at once, let data come, then
    resume for good until all_came().  Returns the calls seen at the first
    two points and the calls made while paused.  (The two waits look for
    an absence -- no callback while paused -- which no event can show: 50
    ms of the loop running is their bound.)"""
    await asyncio.sleep(0.05)
    seen_paused = proto.calls
    tr.resume_reading()
    tr.pause_reading()
    await asyncio.sleep(0.05)
    seen_toggled = proto.calls
    tr.resume_reading()
    while not all_came():
        await asyncio.sleep(0.01)
    return seen_paused, seen_toggled, proto.while_paused


@pytest.mark.parametrize("mode", sorted(STREAM_MODES))
def test_a_stream_paused_in_its_own_callback_gets_nothing_more(any_loop, mode):
    """The protocol pauses from inside its data callback, and later a
    callback calls resume_reading() and pause_reading() at once: nothing is
    delivered until the final resume_reading(), then everything."""
    loop = any_loop
    factory, chunk = STREAM_MODES[mode]

    Pausing = _pausing_in_first_call(factory)

    async def main():
        a, b = socket.socketpair()
        tr, proto = await loop.create_connection(Pausing, sock=a)
        b.sendall(bytes(chunk))
        await until(lambda: proto.calls, "the first data callback")
        b.sendall(bytes(chunk))
        seen = await _toggle_then_resume(tr, proto, lambda: proto.nbytes >= 2 * chunk)
        tr.close()
        b.close()
        return seen
    assert loop.run_until_complete(asyncio.wait_for(main(), 30)) == (1, 1, 0)


def test_set_protocol_during_a_pause_delivers_to_the_new_one_on_resume(any_loop):
    loop = any_loop

    async def main():
        a, b = socket.socketpair()
        tr, old = await loop.create_connection(StreamRecorder, sock=a)
        tr.pause_reading()
        new = BufferedRecorder()
        new.tr = tr
        tr.set_protocol(new)
        b.sendall(b"while paused")
        await until_held(tr, len(b"while paused"))
        before = (old.calls, new.calls)
        tr.resume_reading()
        while new.nbytes < len(b"while paused"):
            await asyncio.sleep(0.01)
        tr.close()
        b.close()
        return before, bytes(new.buf[:new.nbytes]), old.calls
    assert loop.run_until_complete(asyncio.wait_for(main(), 30)) == \
        ((0, 0), b"while paused", 0)


def test_a_datagram_endpoint_paused_in_its_callback_gets_nothing_more(any_loop):
    """Pause on the first datagram; a later callback calls resume_reading();
    pause_reading(): no datagram_received() until the final resume (32
    came while paused: the kept datagrams' hand-over ignored the pause)."""
    loop = any_loop

    Pausing = _pausing_in_first_call(DatagramRecorder)

    async def main():
        tr, proto, peer, address = await datagram_pair(loop, Pausing)
        for i in range(40):
            peer.sendto(b"%03d" % i, address)
        seen = await _toggle_then_resume(tr, proto, lambda: proto.calls >= 40)
        tr.close()
        peer.close()
        return seen
    assert loop.run_until_complete(asyncio.wait_for(main(), 30)) == (1, 1, 0)


def test_a_raising_datagram_received_while_paused_and_resumed(any_loop):
    """As above, with a datagram_received() that raises ValueError on every
    call: each call's exception goes to the exception handler (as the
    selector loop's handle reports it) and the endpoint reads on, through
    the pause, the toggle, and the hand-over of what uringloop kept while
    paused (32 datagrams here, checked with the list made readable in a
    scratch build): 40 datagrams, 40 reports, still open."""
    loop = any_loop
    reports = []
    loop.set_exception_handler(lambda loop, ctx: reports.append(type(ctx.get("exception"))))

    class Raising(_pausing_in_first_call(DatagramRecorder)):
        def saw(self, n):
            super().saw(n)
            raise ValueError("raised by datagram_received")

    async def main():
        tr, proto, peer, address = await datagram_pair(loop, Raising)
        for i in range(40):
            peer.sendto(b"%03d" % i, address)
        seen = await _toggle_then_resume(tr, proto, lambda: proto.calls >= 40)
        closing = tr.is_closing()
        tr.close()
        peer.close()
        return seen, proto.calls, closing
    assert loop.run_until_complete(asyncio.wait_for(main(), 30)) == ((1, 1, 0), 40, False)
    assert reports == [ValueError] * 40


def test_a_datagram_endpoint_paused_by_a_timer_under_a_flood(any_loop):
    """Pause and resume toggle, some resumes paused again by the very next
    callback, while a thread pours datagrams in: none is delivered while
    paused (1,734 of 3,000 were)."""
    loop = any_loop

    async def main():
        tr, proto, peer, address = await datagram_pair(loop, DatagramRecorder)

        def flood():
            for i in range(3000):
                peer.sendto(b"x" * 100, address)
                if i % 20 == 0:
                    time.sleep(0.0002)
        sender = threading.Thread(target=flood)
        sender.start()
        while sender.is_alive():
            tr.pause_reading()
            await asyncio.sleep(0.001)
            loop.call_soon(tr.resume_reading)   # resumed, and paused again
            loop.call_soon(tr.pause_reading)    # by the next callback
            await asyncio.sleep(0.001)
            tr.resume_reading()
            await asyncio.sleep(0.001)
        sender.join()
        await turns()
        tr.close()
        peer.close()
        return proto.while_paused, proto.calls > 0
    assert loop.run_until_complete(asyncio.wait_for(main(), 30)) == (0, True)


def test_a_keyboard_interrupt_on_the_last_kept_piece_leaves_reading_on(any_loop):
    """More than the ring keeps arrives while paused (its RECV is then
    cancelled, the rest waits in the socket); after resume_reading() every
    data_received() raises KeyboardInterrupt, the last kept piece's too,
    and the loop is run again each time: everything still arrives, so the
    read is armed again after the hand-over that was interrupted."""
    loop = any_loop
    total = 400 * 1024

    class Raising(StreamRecorder):
        def saw(self, n):
            super().saw(n)
            raise KeyboardInterrupt

    async def setup():
        a, b = socket.socketpair()
        tr, proto = await loop.create_connection(Raising, sock=a)
        tr.pause_reading()
        # (from a thread: the paused reader leaves most of it in the socket)
        threading.Thread(target=b.sendall, args=(bytes(total),), daemon=True).start()
        await until_held(tr, 128 * 1024)
        return tr, proto, b

    tr, proto, b = loop.run_until_complete(setup())

    async def all_came():
        tr.resume_reading()
        while proto.nbytes < total:
            await asyncio.sleep(0.001)
        return proto.nbytes

    fut = asyncio.ensure_future(asyncio.wait_for(all_came(), 20), loop=loop)
    interrupts = 0
    while True:
        try:
            got = loop.run_until_complete(fut)
            break
        except KeyboardInterrupt:
            interrupts += 1
            assert interrupts < 5000
    tr.close()
    b.close()
    loop.run_until_complete(asyncio.sleep(0))
    assert got == total and interrupts == proto.calls


def test_close_resumes_a_paused_protocol_before_the_connection_is_lost(any_loop):
    """A protocol paused by its writes, then close(): when the queue drains,
    resume_writing() comes before connection_lost(), and what it writes then
    still goes out -- as SSLProtocol does with the records it held while
    paused, close_notify last.  (The selector loop sends inside write() and
    never pauses here; this loop queues a small write until its next enter,
    pauses, and close() sends the queue at once.)"""
    loop = any_loop

    class Writer(asyncio.Protocol):
        def __init__(self):
            self.events = []

        def connection_made(self, tr):
            self.tr = tr
            tr.set_write_buffer_limits(high=4096, low=1024)
            tr.write(b"a" * 6000)           # (< 8 KiB: queued on uringloop)
            tr.close()

        def pause_writing(self):
            self.events.append("pause")

        def resume_writing(self):
            self.events.append("resume")
            self.tr.write(b"tail")

        def connection_lost(self, exc):
            self.events.append(("lost", exc))

    async def main():
        proto = Writer()
        a, b = socket.socketpair()
        b.setblocking(False)
        await loop.create_connection(lambda: proto, sock=a)
        got = await recv_until_eof(loop, b, 65536, timeout=10)
        b.close()
        for _ in range(5):
            await asyncio.sleep(0)
        return proto.events, got
    events, got = loop.run_until_complete(main())
    assert events[-1] == ("lost", None), events
    assert events.count("pause") == events.count("resume"), events
    assert got == b"a" * 6000 + b"tail" * events.count("resume")


@pytest.mark.parametrize("where", ["same transport", "another transport", "a timer"])
def test_a_write_from_resume_writing_leaves_without_another_wakeup(any_loop, where):
    """resume_writing() runs inside the completion of the send that drained
    the buffer, and writes: on the same transport, or the last byte on
    another one that was idle, or from a timer it sets.  The data must leave although nothing else
    will wake the loop: the peer answers only once all of it has come.
    With a high-water mark of 0 every write that is not sent inside
    write() pauses the protocol (the stdlib loop sends these 1000 bytes
    inside write() and never pauses: the next write is then called
    soon).  The loop once went to sleep right after dispatching such a
    completion -- it came in the enter that submitted the send, before
    the loop's wait -- with the new write still owed, and only a timer
    woke it.  Here a guard would, after 60 s; the answer comes first."""
    loop = any_loop
    rounds, size = 200, 1000

    class Writer(asyncio.Protocol):
        def connection_made(self, transport):
            self.transport = transport
            self.rounds = 0
            self.paused = False
            transport.set_write_buffer_limits(high=0)

        def pause_writing(self):
            self.paused = True

        def resume_writing(self):
            self.paused = False
            self.write_more()

        def write_more(self):
            if self.rounds == rounds:
                return
            self.rounds += 1
            if self.rounds == rounds:
                # the last byte, where the test says
                if where == "a timer":
                    loop.call_later(0.001, self.transport.write, b"!")
                else:
                    (other or self.transport).write(b"!")
                return
            self.transport.write(bytes(size))
            if not self.paused:
                loop.call_soon(self.write_more)

        def data_received(self, data):
            if data == b"done" and not done.done():
                done.set_result("answered")

    class Answered(asyncio.Protocol):
        def data_received(self, data):
            if data == b"done" and not done.done():
                done.set_result("answered")

    def peer(sock, want):
        # reads what it is owed, then answers
        got = 0
        with sock:
            while got < want:
                data = sock.recv(1 << 16)
                if not data:
                    return
                got += len(data)
            sock.sendall(b"done")
            sock.recv(1)        # until the loop closes its end

    done = other = None

    async def main():
        nonlocal done, other
        done = loop.create_future()
        a, b = socket.socketpair()
        if where == "another transport":
            c, d = socket.socketpair()
            threading.Thread(target=peer, args=(d, 1), daemon=True).start()
            other, _ = await loop.create_connection(Answered, sock=c)
            threading.Thread(target=peer, args=(b, (rounds - 1) * size + 10**9),
                             daemon=True).start()
        else:
            threading.Thread(target=peer, args=(b, (rounds - 1) * size + 1),
                             daemon=True).start()
        tr, proto = await loop.create_connection(Writer, sock=a)
        def wake():
            if not done.done():
                done.set_result(f"woken by the guard: round {proto.rounds}, "
                                f"{tr.get_write_buffer_size()} bytes queued")
        guard = loop.call_later(60, wake)
        proto.write_more()
        result = await done
        guard.cancel()
        tr.close()
        if other is not None:
            other.close()
        return result

    assert loop.run_until_complete(main()) == "answered"


def test_pause_and_resume_reading_lose_nothing(any_loop):
    total = 4 * 1024 * 1024

    async def main():
        loop = asyncio.get_running_loop()
        async with collected_connection(loop) as (tr, cli, received):
            await until(lambda: hasattr(received, "transport"), "the connection")
            received.transport.pause_reading()
            assert not received.transport.is_reading()
            payload = os.urandom(total)
            tr.write(payload)
            await until_held(received.transport, 64 * 1024, len(received.data))
            paused_len = len(received.data)
            # an absence, which no event shows: 50 ms of the loop running
            await asyncio.sleep(0.05)
            assert len(received.data) == paused_len    # nothing while paused
            received.transport.resume_reading()
            tr.close()
            await received.done
            assert bytes(received.data) == payload

    any_loop.run_until_complete(asyncio.wait_for(main(), 60))


def test_flow_control_pauses_and_resumes_writing(any_loop):
    """The peer does not read: what the socket buffers cannot hold is
    queued, pause_writing() comes at once, resume_writing() when the queue
    falls below the low mark after the peer reads again."""
    async def main():
        loop = asyncio.get_running_loop()
        events = []

        class Writer(Collect):
            def pause_writing(self):
                events.append("pause")

            def resume_writing(self):
                events.append("resume")

        class Stalled(Collect):
            def connection_made(self, transport):
                super().connection_made(transport)
                transport.pause_reading()

        received = Stalled()
        server = await loop.create_server(lambda: received, "127.0.0.1", 0)
        async with server:
            tr, cli = await loop.create_connection(Writer, *server.sockets[0].getsockname())
            tr.set_write_buffer_limits(high=1024, low=256)
            assert tr.get_write_buffer_limits() == (256, 1024)
            with pytest.raises(ValueError):
                tr.set_write_buffer_limits(high=10, low=20)
            size = 64 * 1024 * 1024     # more than loopback's socket buffers hold
            tr.write(b"z" * size)
            assert events == ["pause"]
            assert 0 < tr.get_write_buffer_size() <= size
            received.transport.resume_reading()
            for _ in range(20000):      # bounded
                if not tr.get_write_buffer_size():
                    break
                await asyncio.sleep(0.001)
            assert events == ["pause", "resume"]
            tr.close()
            await received.done
            assert len(received.data) == size

    any_loop.run_until_complete(asyncio.wait_for(main(), 60))


class Recorder(asyncio.Protocol):
    def __init__(self):
        self.events = []

    def connection_made(self, transport):
        self.transport = transport

    def pause_writing(self):
        self.events.append("pause")

    def resume_writing(self):
        self.events.append("resume")


async def connected(loop):
    with socket.create_server(("127.0.0.1", 0)) as listener:
        peer = socket.create_connection(listener.getsockname())
        ours, _ = listener.accept()
    tr, proto = await loop.create_connection(Recorder, sock=ours)
    await asyncio.sleep(0)
    return tr, proto, peer


async def read_exactly(loop, sock, n):
    sock.setblocking(False)
    got = bytearray()
    while len(got) < n:
        got += await loop.sock_recv(sock, n - len(got))
    return bytes(got)


@pytest.mark.parametrize("size", [1, 100, 5000, 8191, 8192, 60000])
@pytest.mark.parametrize("high", [None, 64], ids=["default-limits", "high-64"])
def test_a_write_the_socket_takes_is_not_buffered(any_loop, size, high):
    """write() on an idle connection: nothing is buffered right after it,
    and the protocol is neither paused nor resumed, with the default
    limits or a high-water mark below the write."""
    loop = any_loop

    async def main():
        tr, proto, peer = await connected(loop)
        if high is not None:
            tr.set_write_buffer_limits(high=high)
        sizes = []
        for i in range(3):
            tr.write(bytes([65 + i]) * size)
            sizes.append(tr.get_write_buffer_size())
            assert await read_exactly(loop, peer, size) == bytes([65 + i]) * size
            sizes.append(tr.get_write_buffer_size())
        tr.close()
        peer.close()
        return sizes, proto.events
    sizes, events = loop.run_until_complete(asyncio.wait_for(main(), 30))
    assert sizes == [0] * 6
    assert events == []


def test_small_writes_to_a_peer_that_does_not_read_pause_the_protocol(any_loop):
    """1000-byte writes while not paused, to a peer that reads nothing: the
    socket fills and the protocol is paused (on the selector loop within
    write(); here by the time the loop has run), with the bytes buffered
    above the high-water mark; once the peer reads it all, resumed."""
    loop = any_loop

    async def main():
        tr, proto, peer = await connected(loop)
        written = 0
        for _ in range(200):                   # iterations
            while "pause" not in proto.events and written < (256 << 20):
                tr.write(b"z" * 1000)
                written += 1000
                if written % (64 << 10) == 0:
                    break                      # let the loop run now and then
            if "pause" in proto.events:
                break
            await asyncio.sleep(0)
        assert proto.events == ["pause"], (written, tr.get_write_buffer_size())
        assert tr.get_write_buffer_size() > tr.get_write_buffer_limits()[1]
        assert await read_exactly(loop, peer, written) == b"z" * written
        for _ in range(100):
            if tr.get_write_buffer_size() == 0:
                break
            await asyncio.sleep(0)
        tr.close()
        peer.close()
        return proto.events, tr.get_write_buffer_size()
    events, left = loop.run_until_complete(asyncio.wait_for(main(), 60))
    assert events == ["pause", "resume"] and left == 0
