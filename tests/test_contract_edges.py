"""asyncio's contract at the edges (issue #33): a burst of connects, a
pause, a callback that raises, a write after close, a cancelled receive,
the error a failed call carries, what a closed loop still holds.  Each
test runs one scenario on uringloop and on asyncio.SelectorEventLoop
(`any_loop`) and expects the stdlib's outcome on both."""
import asyncio
import gc
import os
import sys
import socket
import threading
import time

import pytest

import uringloop
from conftest import on_both_loops, recv_until_eof, until_held


# ---- a burst of connects bigger than the backlog ---------------------------

def burst_of_connects(loop, messages):
    """300 clients connect at once to a server with the default backlog of
    100 and echo `messages` messages of up to 100 KB, each written in two
    halves: what became of each client."""
    handlers = []

    async def echo(reader, writer):
        handlers.append(asyncio.current_task())
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        writer.close()

    async def client(port, i):
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            for _ in range(messages):
                message = bytes([i % 256]) * (100_000 * (i % 7 + 1) // 7)
                writer.write(message[:len(message) // 2])
                writer.write(message[len(message) // 2:])
                await writer.drain()
                assert await reader.readexactly(len(message)) == message
            writer.close()
            await writer.wait_closed()
        except ConnectionError as exc:
            return type(exc).__name__
        return "served"

    async def main():
        server = await asyncio.start_server(echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        outcomes = await asyncio.wait_for(
            asyncio.gather(*(client(port, i) for i in range(300))), 120)
        server.close()
        await server.wait_closed()
        await asyncio.wait_for(asyncio.gather(*handlers), 30)   # (each saw its EOF)
        return outcomes

    return loop.run_until_complete(main())


def test_a_burst_of_connects_three_times_the_backlog_is_served_whole(any_loop):
    """The accept queue overflows and the kernel answers with SYN cookies;
    a loop that takes only a few connections per wake-up lets the cookies'
    ACKs meet a full queue, and those connections are reset (4 accepts per
    wake-up: 4-62 of 300).  The selector loop takes up to the backlog per
    wake-up and serves all 300."""
    outcomes = burst_of_connects(any_loop, 30)
    assert outcomes.count("served") == 300, sorted(set(outcomes))


@pytest.mark.parametrize("entries", ["2,2", "3,4", "16,16", "32,128"])
def test_a_burst_of_connects_on_a_small_ring_is_served_whole(entries, monkeypatch):
    """The same burst on a ring whose queues hold a few entries (as
    URINGLOOP_RING_ENTRIES, or a low RLIMIT_MEMLOCK, makes it: 32,128 is
    the smallest the loop shrinks to): a full queue slows the loop down and
    never costs a connection.  The listener's readiness used to wait in the
    kernel's overflow list behind hundreds of echoes while the clients
    wrote, and the kernel reset the connections it had answered with SYN
    cookies (up to 96 of 300); the selector loop serves all."""
    monkeypatch.setenv("URINGLOOP_RING_ENTRIES", entries)
    loop = uringloop.new_event_loop()
    assert loop.stats()["cq_entries"] == int(entries.split(",")[1])
    loop.close()
    ours, theirs = on_both_loops(burst_of_connects, 10)
    assert sorted(set(ours)) == sorted(set(theirs)) == ["served"], (
        ours.count("served"), theirs.count("served"))


@pytest.mark.loop_errors_expected       # (the selector loop: "Task exception was never retrieved")
@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_a_factory_interrupted_in_a_burst_leaves_the_rest_served(any_loop):
    """Ten connections wait in the accept queue; the protocol factory raises
    KeyboardInterrupt for the third.  The interrupt leaves the loop, and
    when it runs again the other nine are served, in order: the selector
    loop accepts them all at the wake-up and serves each in a task of its
    own; uringloop serves each as it accepts it, and the ones after the
    interrupted one wait in the accept queue for its poll, armed again
    whatever was raised.  (The third's socket is dropped
    with the interrupted call: closed when it is collected, which on the
    selector loop waits for the failed task's traceback to go.)"""
    loop = any_loop
    made = []

    class Echo(asyncio.Protocol):
        def connection_made(self, transport):
            self.transport = transport

        def data_received(self, data):
            self.transport.write(data)

    def factory():
        made.append(len(made))
        if len(made) == 3:
            raise KeyboardInterrupt
        return Echo()

    async def listen():
        return await loop.create_server(factory, "127.0.0.1", 0)

    server = loop.run_until_complete(listen())
    port = server.sockets[0].getsockname()[1]
    clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(10)]
    with pytest.raises(KeyboardInterrupt):
        loop.run_until_complete(asyncio.sleep(0.5))

    async def talk():
        answers = []
        for i, c in enumerate(clients):
            if i == 2:
                continue
            c.setblocking(False)
            await loop.sock_sendall(c, bytes([i]))
            answers.append(await asyncio.wait_for(loop.sock_recv(c, 10), 5))
        return answers

    answers = loop.run_until_complete(talk())
    assert len(made) == 10
    assert answers == [bytes([i]) for i in range(10) if i != 2]
    for c in clients:
        c.close()
    server.close()
    loop.run_until_complete(server.wait_closed())


# ---- a cancelled receive consumes nothing ---------------------------------

def test_receives_that_timed_out_leave_the_bytes_for_plain_calls(any_loop):
    """wait_for(sock_recv()) with timeouts that meet the data as it comes
    (some before, some after, some in the same step), then the socket is
    read with the socket module's own recv(), as a library that mixes
    sock_recv with blocking calls, ssl.wrap_socket() or a thread given a
    dup() does: every one of 200 streams is whole on the stdlib loop, and
    must be here (a RECV in the ring kept what it took: 0 of 200)."""
    if not isinstance(any_loop, uringloop.Loop) and sys.version_info >= (3, 14):
        pytest.skip("the selector loop itself loses bytes here on 3.14 and 3.15 "
                    "(streams come out short); 3.11's run is the reference")
    loop = any_loop
    payloads = [b"stream-%03d;" % i * 20 for i in range(200)]

    async def one(i, a, b):
        if i % 5 == 0:
            b.send(payloads[i])     # there before the call: the first try takes it
        else:
            loop.call_later(0.001 * (i % 5), b.send, payloads[i])
        try:
            return await asyncio.wait_for(loop.sock_recv(a, 1 << 16), 0.002)
        except asyncio.TimeoutError:
            return b""

    async def main():
        pairs = [socket.socketpair() for _ in payloads]
        for a, _ in pairs:
            a.setblocking(False)
        firsts = await asyncio.gather(*(one(i, a, b) for i, (a, b) in enumerate(pairs)))
        await asyncio.sleep(0.02)
        return pairs, firsts

    pairs, firsts = loop.run_until_complete(main())
    intact = 0
    for (a, b), got, payload in zip(pairs, firsts, payloads):
        a.settimeout(5)
        with a, b:
            while len(got) < len(payload):
                got += a.recv(1 << 16)
        intact += got == payload
    assert intact == len(payloads)
    # both outcomes happened: a fifth of the streams had their bytes before
    # the call; those sent 4 ms later meet a 2 ms timeout whatever the
    # machine's speed
    assert any(firsts) and not all(firsts)


# ---- errors carry the stdlib's messages -----------------------------------

def _error_scenarios(loop, tmp_path):
    """What each failing call raises, as (type name, args)."""
    outcomes = {}

    async def outcome(name, make):
        try:
            result = make()
            if asyncio.iscoroutine(result):
                await result
        except Exception as exc:
            outcomes[name] = (type(exc).__name__, exc.args)
        else:
            outcomes[name] = "no error"

    async def main():
        missing = str(tmp_path / "missing.sock")
        not_listening = str(tmp_path / "bound.sock")
        bound = socket.socket(socket.AF_UNIX)
        bound.bind(not_listening)
        closed_port = socket.socket()
        closed_port.bind(("127.0.0.1", 0))
        port = closed_port.getsockname()[1]
        for name, family, address in [
                ("connect to a missing path", socket.AF_UNIX, missing),
                ("connect to a path nobody listens on", socket.AF_UNIX, not_listening),
                ("connect to a closed port", socket.AF_INET, ("127.0.0.1", port))]:
            s = socket.socket(family)
            s.setblocking(False)
            with s:
                await outcome(name, lambda: loop.sock_connect(s, address))
        await outcome("open_unix_connection to a missing path",
                      lambda: asyncio.open_unix_connection(missing))
        await outcome("sock_recv of an int", lambda: loop.sock_recv(5, 10))
        with open(__file__, "rb") as f:
            await outcome("sock_recv of a file", lambda: loop.sock_recv(f, 10))
            await outcome("sock_accept of a file", lambda: loop.sock_accept(f))
        a, b = socket.socketpair()
        tr, _ = await loop.create_connection(asyncio.Protocol, sock=a)
        await outcome("writelines of a str", lambda: tr.writelines(["a"]))
        await outcome("writelines of an int after bytes", lambda: tr.writelines([b"x", 7]))
        await outcome("write of a str", lambda: tr.write("a"))
        tr.abort()
        b.close()
        bound.close()
        closed_port.close()
        return port

    port = loop.run_until_complete(main())
    return {name: str(outcome).replace(str(tmp_path), "TMP").replace(str(port), "PORT")
            for name, outcome in outcomes.items()}


def test_failed_calls_raise_what_the_stdlib_raises(uloop, tmp_path):
    """The same exception type and arguments (the message included) as on
    the selector loop: a connect that fails at once carries the system's
    message (redis-py builds its own text from it); a non-socket gets the
    AttributeError of the missing method; writelines() the TypeError of
    the stdlib's own check."""
    stdlib = asyncio.SelectorEventLoop()
    try:
        (tmp_path / "stdlib").mkdir()
        expected = _error_scenarios(stdlib, tmp_path / "stdlib")
    finally:
        stdlib.close()
    (tmp_path / "uring").mkdir()
    got = _error_scenarios(uloop, tmp_path / "uring")
    assert got == expected
    assert expected["connect to a missing path"] == \
        "('FileNotFoundError', (2, 'No such file or directory'))"


# ---- no data callback while reading is paused ------------------------------

class _PauseRecorder:
    """Counts data callbacks, and those that came while reading was paused
    (the transport's is_reading() is the stdlib's own record of a pause)."""

    def __init__(self):
        self.calls = self.while_paused = self.nbytes = 0
        self.tr = None

    def connection_made(self, tr):
        self.tr = tr

    def saw(self, n):
        self.calls += 1
        self.nbytes += n
        if not self.tr.is_reading():
            self.while_paused += 1


class _StreamRecorder(_PauseRecorder, asyncio.Protocol):
    def data_received(self, data):
        self.saw(len(data))


class _BufferedRecorder(_PauseRecorder, asyncio.BufferedProtocol):
    def __init__(self):
        super().__init__()
        self.buf = bytearray(64 * 1024)

    def get_buffer(self, sizehint):
        return self.buf

    def buffer_updated(self, nbytes):
        self.saw(nbytes)


class _DatagramRecorder(_PauseRecorder, asyncio.DatagramProtocol):
    def datagram_received(self, data, addr):
        self.saw(len(data))


def _pausing_in_first_call(recorder):
    """A subclass of the recorder class that pauses reading from inside its
    first data callback."""
    class Pausing(recorder):
        def saw(self, n):
            super().saw(n)
            if self.calls == 1:
                self.tr.pause_reading()
    return Pausing


# chunk sizes that keep a uringloop stream in its ring mode (small reads) and
# move it to direct reads (8 KiB and more); BufferedProtocol: buffered mode
STREAM_MODES = {"ring": (_StreamRecorder, 1000), "direct": (_StreamRecorder, 32 * 1024),
                "buffered": (_BufferedRecorder, 32 * 1024)}


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
    two points and the calls made while paused."""
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
        await asyncio.sleep(0.05)
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
        tr, old = await loop.create_connection(_StreamRecorder, sock=a)
        tr.pause_reading()
        new = _BufferedRecorder()
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


def _datagram_pair(loop, factory):
    async def make():
        tr, proto = await loop.create_datagram_endpoint(factory, local_addr=("127.0.0.1", 0))
        peer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        peer.bind(("127.0.0.1", 0))
        return tr, proto, peer, tr.get_extra_info("sockname")
    return make()


def test_a_datagram_endpoint_paused_in_its_callback_gets_nothing_more(any_loop):
    """Pause on the first datagram; a later callback calls resume_reading();
    pause_reading(): no datagram_received() until the final resume (32
    came while paused: the kept datagrams' hand-over ignored the pause)."""
    loop = any_loop

    Pausing = _pausing_in_first_call(_DatagramRecorder)

    async def main():
        tr, proto, peer, address = await _datagram_pair(loop, Pausing)
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

    class Raising(_pausing_in_first_call(_DatagramRecorder)):
        def saw(self, n):
            super().saw(n)
            raise ValueError("raised by datagram_received")

    async def main():
        tr, proto, peer, address = await _datagram_pair(loop, Raising)
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
        tr, proto, peer, address = await _datagram_pair(loop, _DatagramRecorder)

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
        await asyncio.sleep(0.05)
        tr.close()
        peer.close()
        return proto.while_paused, proto.calls > 0
    assert loop.run_until_complete(asyncio.wait_for(main(), 30)) == (0, True)


# ---- a BaseException from a protocol callback does not stop reading --------

def _run_through_interrupts(loop, fut):
    """run_until_complete(fut), run again after each KeyboardInterrupt a
    callback raised (as a REPL or a supervisor would); (result, count)."""
    interrupts = 0
    while True:
        try:
            return loop.run_until_complete(fut), interrupts
        except KeyboardInterrupt:
            interrupts += 1
            assert interrupts < 10


@pytest.mark.parametrize("mode", sorted(STREAM_MODES))
def test_a_keyboard_interrupt_in_a_data_callback_leaves_reading_on(any_loop, mode):
    """data_received()/buffer_updated() raises KeyboardInterrupt on its 1st
    and 3rd call; it leaves run_until_complete(), and running the loop again
    gets the rest of the stream: 150,000 of 150,000 bytes on the stdlib
    loop (direct and buffered reads were never armed again: 100,000)."""
    loop = any_loop
    factory, chunk = STREAM_MODES[mode]
    total = 150_000

    class Raising(factory):
        def saw(self, n):
            super().saw(n)
            if self.nbytes >= total and not done.done():
                done.set_result(self.nbytes)
            if self.calls in (1, 3):
                raise KeyboardInterrupt

    done = loop.create_future()
    a, b = socket.socketpair()

    async def start():
        tr, _ = await loop.create_connection(Raising, sock=a)
        return tr
    tr = loop.run_until_complete(start())
    proto = tr.get_protocol()

    def send():
        # each chunk once the one before was seen: at least one data
        # callback per chunk, however late the loop reads (on a busy
        # machine a read of all that had come made the 3rd call never come)
        for i in range(0, total, chunk):
            deadline = time.monotonic() + 10
            while proto.nbytes < i and time.monotonic() < deadline:
                time.sleep(0.001)
            b.sendall(bytes(min(chunk, total - i)))
    sending = threading.Thread(target=send)
    sending.start()
    timeout = loop.call_later(20, lambda: done.done() or done.set_result("timed out"))
    got, interrupts = _run_through_interrupts(loop, done)
    timeout.cancel()
    sending.join()
    tr.close()
    b.close()
    loop.run_until_complete(asyncio.sleep(0))
    assert (got, interrupts) == (total, 2)


@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit])
def test_a_base_exception_from_get_buffer_leaves_reading_on(any_loop, exc):
    """get_buffer() raises KeyboardInterrupt or SystemExit on its first
    call: it leaves the loop, and run again the loop asks get_buffer()
    again, delivers every byte and calls connection_lost() when the peer
    closes (issue #58, item 4: uringloop never read that transport again)."""
    loop = any_loop
    total = 100_000
    events = []

    class Raising(asyncio.BufferedProtocol):
        calls = 0
        nbytes = 0

        def connection_made(self, tr):
            self.buf = bytearray(8192)

        def get_buffer(self, sizehint):
            self.calls += 1
            if self.calls == 1:
                raise exc
            return self.buf

        def buffer_updated(self, n):
            self.nbytes += n

        def eof_received(self):
            events.append("eof")

        def connection_lost(self, e):
            events.append(("lost", e))
            done.set_result(self.nbytes)

    done = loop.create_future()
    a, b = socket.socketpair()

    async def start():
        tr, _ = await loop.create_connection(Raising, sock=a)
        b.sendall(bytes(total))
        b.shutdown(socket.SHUT_WR)
        return tr
    raised = 0
    try:
        loop.run_until_complete(start())
    except exc:
        raised += 1     # (get_buffer() may be asked as reading starts)
    timeout = loop.call_later(20, lambda: done.done() or done.set_result("timed out"))
    while True:
        try:
            got = loop.run_until_complete(done)
            break
        except exc:
            raised += 1
            assert raised < 5
    timeout.cancel()
    b.close()
    assert (got, raised, events) == (total, 1, ["eof", ("lost", None)])


@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit])
def test_a_base_exception_from_eof_received_closes_when_run_again(any_loop, exc):
    """eof_received() raises KeyboardInterrupt or SystemExit the first time:
    it leaves the loop; run again, the loop asks eof_received() again and,
    as it returns None, closes: the peer reads its end, the protocol gets
    connection_lost(None) (issue #58, item 4: the connection stayed
    half-open)."""
    loop = any_loop
    events = []

    class Raising(asyncio.Protocol):
        def eof_received(self):
            events.append("eof")
            if len(events) == 1:
                raise exc

        def connection_lost(self, e):
            events.append(("lost", e))
            done.set_result(None)

    done = loop.create_future()
    a, b = socket.socketpair()

    async def start():
        tr, _ = await loop.create_connection(Raising, sock=a)
        b.shutdown(socket.SHUT_WR)
        return tr
    raised = 0
    try:
        loop.run_until_complete(start())
    except exc:
        raised += 1     # (the end may be read before start() resumes)
    timeout = loop.call_later(20, lambda: done.done() or done.set_result("timed out"))
    while True:
        try:
            loop.run_until_complete(done)
            break
        except exc:
            raised += 1
            assert raised < 5
    timeout.cancel()
    b.settimeout(5)
    assert b.recv(10) == b""        # the loop's end closed: a FIN
    b.close()
    assert raised == 1 and events == ["eof", "eof", ("lost", None)]


def test_a_keyboard_interrupt_on_the_last_kept_piece_leaves_reading_on(any_loop):
    """More than the ring keeps arrives while paused (its RECV is then
    cancelled, the rest waits in the socket); after resume_reading() every
    data_received() raises KeyboardInterrupt, the last kept piece's too,
    and the loop is run again each time: everything still arrives, so the
    read is armed again after the hand-over that was interrupted."""
    loop = any_loop
    total = 400 * 1024

    class Raising(_StreamRecorder):
        def saw(self, n):
            super().saw(n)
            raise KeyboardInterrupt

    async def setup():
        a, b = socket.socketpair()
        tr, proto = await loop.create_connection(Raising, sock=a)
        tr.pause_reading()
        # (from a thread: the paused reader leaves most of it in the socket)
        threading.Thread(target=b.sendall, args=(bytes(total),), daemon=True).start()
        await asyncio.sleep(0.05)
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


def test_a_keyboard_interrupt_in_datagram_received_leaves_reading_on(any_loop):
    loop = any_loop
    done = loop.create_future()

    class Raising(_DatagramRecorder):
        def saw(self, n):
            super().saw(n)
            if self.calls == 20 and not done.done():
                done.set_result(self.calls)
            if self.calls in (1, 3):
                raise KeyboardInterrupt

    tr, proto, peer, address = loop.run_until_complete(_datagram_pair(loop, Raising))
    for i in range(20):
        peer.sendto(b"%03d" % i, address)
    timeout = loop.call_later(20, lambda: done.done() or done.set_result("timed out"))
    got, interrupts = _run_through_interrupts(loop, done)
    timeout.cancel()
    tr.close()
    peer.close()
    loop.run_until_complete(asyncio.sleep(0))
    assert (got, interrupts) == (20, 2)


# ---- nothing written after close() goes out -------------------------------

@pytest.mark.parametrize("queued", [False, True])
def test_what_is_written_after_close_goes_out_as_on_the_stdlib(any_loop, queued):
    """write(); close(); write(): the stdlib's first write leaves inside
    write(), close() finds nothing queued and the transport is lost, so the
    later write is dropped.  With data still queued at close() (more than
    the socket takes), a later write is queued behind it and sent."""
    loop = any_loop
    first = b"x" * (8 << 20 if queued else 10)

    async def main():
        a, b = socket.socketpair()
        b.setblocking(False)
        tr, _ = await loop.create_connection(asyncio.Protocol, sock=a)
        tr.write(first)
        tr.close()
        tr.write(b"AFTER-CLOSE")
        got = await recv_until_eof(loop, b, 1 << 20, timeout=10)
        b.close()
        return got
    got = loop.run_until_complete(main())
    assert got == first + (b"AFTER-CLOSE" if queued else b"")


@pytest.mark.parametrize("mode", sorted(STREAM_MODES))
def test_nothing_is_delivered_after_close_while_writes_drain(any_loop, mode):
    """close() with 8 MiB still queued (the peer does not read yet): what
    the peer sends afterwards reaches no data callback, as the selector
    loop stops reading at close(); the queued data still goes out whole,
    and connection_lost() comes once it has."""
    loop = any_loop
    factory, chunk = STREAM_MODES[mode]
    payload = b"q" * (8 << 20)

    async def main():
        a, b = socket.socketpair()
        b.setblocking(False)
        tr, proto = await loop.create_connection(factory, sock=a)
        await loop.sock_sendall(b, bytes(chunk))
        while proto.nbytes < chunk:
            await asyncio.sleep(0.001)
        tr.write(payload)
        tr.close()
        calls_at_close = proto.calls
        await loop.sock_sendall(b, bytes(chunk))      # after close(): not delivered
        await asyncio.sleep(0.05)
        got = 0
        while got < len(payload):
            got += len(await loop.sock_recv(b, 1 << 20))
        await asyncio.sleep(0.05)
        # (the transport's socket then closes with those bytes unread: the
        # peer's next receive is a reset, on both loops)
        b.close()
        return proto.calls - calls_at_close, got
    assert loop.run_until_complete(asyncio.wait_for(main(), 60)) == (0, len(payload))


# ---- a closed loop holds nothing -------------------------------------------

@pytest.mark.loop_errors_expected       # "Task was destroyed but it is pending!"
def test_a_closed_loop_keeps_no_socket_open(any_loop):
    """100 sock_recv() tasks left waiting and 50 transports with sends the
    peer never reads (on uringloop, zero-copy ones too), the loop closed, then the tasks, transports and the
    peers' sockets dropped: once collected, no descriptor is left open,
    whether the closed loop object is still referenced or not (98 of 100
    sockets stayed open while it was)."""
    loop = any_loop

    def open_fds():
        return len(os.listdir("/proc/self/fd"))

    async def main():
        pairs = [socket.socketpair() for _ in range(100)]
        for a, _ in pairs:
            a.setblocking(False)
        tasks = [loop.create_task(loop.sock_recv(a, 100)) for a, _ in pairs]
        transports = []
        for i in range(50):
            mine, peer = socket.socketpair()
            tr, _ = await loop.create_connection(asyncio.Protocol, sock=mine)
            tr.write(bytes(1 << 20))        # more than the socket takes
            if i % 2 and isinstance(loop, uringloop.Loop):
                for _ in range(4):
                    tr.write_zerocopy(bytearray(256 * 1024))
            transports.append((tr, peer))
        await asyncio.sleep(0.01)
        return pairs, tasks, transports

    before = open_fds()
    made = loop.run_until_complete(main())
    loop.close()
    for _, peer in made[0] + made[2]:
        peer.close()
    del made
    gc.collect()
    assert open_fds() - before <= 0


# ---- close() resumes a protocol that the sends it makes unpause ------------

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
