"""add_reader/add_writer (level-triggered, as the selector loops) and
add_signal_handler."""
import asyncio
import os
import signal
import socket

import pytest

from conftest import cycle_garbage, turns
from recorders import handler_calls


def test_reader_is_level_triggered(any_loop):
    """A reader that consumes one byte per call is called again while data
    remains, with no new data arriving."""
    r, w = socket.socketpair()
    r.setblocking(False)
    got = []

    def on_readable():
        got.append(r.recv(1))
        if len(got) == 5:
            any_loop.stop()

    any_loop.add_reader(r, on_readable)
    w.send(b"abcde")
    any_loop.call_later(10, any_loop.stop)
    any_loop.run_forever()
    assert b"".join(got) == b"abcde"
    assert any_loop.remove_reader(r) is True
    assert any_loop.remove_reader(r) is False
    r.close()
    w.close()


def test_removed_watches_leave_no_cycle_garbage(any_loop):
    """A reader or writer removed is freed by its reference count, as the
    selector loop's are: tornado's circlerefs tests fail on cycle garbage
    (a watch and the handle that fires it held each other)."""
    r, w = socket.socketpair()

    async def watch_once():
        readable, writable = asyncio.Event(), asyncio.Event()
        any_loop.add_reader(r, readable.set)
        any_loop.add_writer(w, writable.set)
        w.send(b"x")
        await readable.wait()
        await writable.wait()
        any_loop.remove_reader(r)
        any_loop.remove_writer(w)
        await asyncio.sleep(0)

    garbage = cycle_garbage(any_loop, watch_once)
    r.close()
    w.close()
    assert garbage == []


def test_writer_and_replacing_a_callback(any_loop):
    r, w = socket.socketpair()
    calls = []
    any_loop.add_writer(w.fileno(), calls.append, "first")
    any_loop.add_writer(w.fileno(), lambda: (calls.append("second"), any_loop.stop()))
    any_loop.call_later(10, any_loop.stop)
    any_loop.run_forever()
    assert calls and set(calls) == {"second"}
    assert any_loop.remove_writer(w) is True
    r.close()
    w.close()


def test_removed_reader_is_not_called(any_loop):
    r, w = socket.socketpair()
    calls = []
    any_loop.add_reader(r, calls.append, 1)
    assert any_loop.remove_reader(r)
    w.send(b"x")
    any_loop.call_later(0.05, any_loop.stop)
    any_loop.run_forever()
    assert calls == []
    r.close()
    w.close()


def test_reader_on_pipe_and_bad_fds(any_loop):
    rfd, wfd = os.pipe()
    got = any_loop.create_future()
    any_loop.add_reader(rfd, lambda: got.done() or got.set_result(os.read(rfd, 100)))
    os.write(wfd, b"through a pipe")
    assert any_loop.run_until_complete(asyncio.wait_for(got, 10)) == b"through a pipe"
    any_loop.remove_reader(rfd)
    os.close(rfd)
    os.close(wfd)
    with pytest.raises(ValueError):
        any_loop.add_reader(-1, print)
    with pytest.raises(ValueError):
        any_loop.add_reader(object(), print)


def test_remove_after_close_returns_false(any_loop):
    r, w = socket.socketpair()
    any_loop.add_reader(r, print)
    any_loop.add_writer(w, print)
    any_loop.close()
    assert any_loop.remove_reader(r) is False
    assert any_loop.remove_writer(w) is False
    with pytest.raises(RuntimeError):
        any_loop.add_reader(r, print)
    r.close()
    w.close()


def test_signal_handler_runs_in_the_loop(any_loop):
    got = []

    def handler(tag):
        got.append(tag)
        any_loop.stop()

    any_loop.add_signal_handler(signal.SIGUSR1, handler, "usr1")
    any_loop.call_soon(os.kill, os.getpid(), signal.SIGUSR1)
    any_loop.call_later(10, any_loop.stop)
    any_loop.run_forever()
    assert got == ["usr1"]
    assert any_loop.remove_signal_handler(signal.SIGUSR1) is True
    assert any_loop.remove_signal_handler(signal.SIGUSR1) is False
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL


def test_signal_wakes_a_sleeping_loop(any_loop):
    got = []
    any_loop.add_signal_handler(signal.SIGUSR2, lambda: (got.append(1), any_loop.stop()))
    pid = os.getpid()
    # A timer on another thread sends the signal while the loop waits in
    # the kernel with nothing else to do.
    import threading
    threading.Timer(0.05, os.kill, (pid, signal.SIGUSR2)).start()
    any_loop.call_later(10, any_loop.stop)
    any_loop.run_forever()
    any_loop.remove_signal_handler(signal.SIGUSR2)
    assert got == [1]


def test_signal_handler_errors(any_loop):
    async def coro():
        pass

    with pytest.raises(TypeError):
        any_loop.add_signal_handler(signal.SIGUSR1, coro)
    with pytest.raises(ValueError):
        any_loop.add_signal_handler(100000, print)
    with pytest.raises(TypeError):
        any_loop.add_signal_handler("SIGUSR1", print)
    with pytest.raises(RuntimeError):
        any_loop.add_signal_handler(signal.SIGKILL, print)


def test_sigint_handler_restores_keyboard_interrupt(any_loop):
    any_loop.add_signal_handler(signal.SIGINT, print)
    any_loop.remove_signal_handler(signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_close_removes_signal_handlers(any_loop):
    any_loop.add_signal_handler(signal.SIGUSR1, print)
    any_loop.close()
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL


@pytest.mark.parametrize("kind", ["reader", "writer"])
def test_remove_watch_of_a_socket_closed_since_finds_it_by_the_object(any_loop, kind):
    """anyio closes a socket, then calls remove_reader(sock)."""
    loop = any_loop
    calls = handler_calls(loop)
    fired = []

    async def main():
        a, b = socket.socketpair()
        add = loop.add_reader if kind == "reader" else loop.add_writer
        remove = loop.remove_reader if kind == "reader" else loop.remove_writer
        add(a, fired.append, 1)
        await turns()               # the watch is armed (a writer's has fired)
        fired.clear()
        a.close()
        removed = remove(a)
        with pytest.raises(ValueError):
            remove(a)               # no longer known by the object either
        b.close()
        await turns()               # (an absence: the callback never comes)
        return removed
    assert loop.run_until_complete(main()) is True
    assert calls == []
    assert fired == []


def test_remove_reader_of_a_closed_socket_never_watched_raises_value_error(any_loop):
    loop = any_loop
    s = socket.socket()
    s.close()
    with pytest.raises(ValueError):
        loop.remove_reader(s)
    with pytest.raises(ValueError):
        loop.remove_writer(s)


def test_add_reader_on_a_descriptor_that_is_not_open_raises_at_once(any_loop):
    loop = any_loop
    fd = os.open(os.devnull, os.O_RDONLY)
    os.close(fd)                      # now surely not open
    with pytest.raises(OSError):
        loop.add_reader(fd, lambda: None)
    with pytest.raises(OSError):
        loop.add_writer(fd, lambda: None)
    assert loop.remove_reader(fd) is False


def test_remove_reader_after_loop_close_returns_false(any_loop):
    loop = any_loop
    a, b = socket.socketpair()
    loop.add_reader(a, lambda: None)
    loop.close()
    a.close()
    assert loop.remove_reader(a) is False
    b.close()


def test_a_python_signal_handler_runs_while_the_loop_waits(any_loop):
    """A signal.signal() handler (not the loop's) runs while the loop is in
    its wait, as the stdlib's select() retries after running it; the
    exception it raises ends run_until_complete()."""
    import signal

    class Alarm(Exception):
        pass

    def on_alarm(signum, frame):
        raise Alarm

    previous = signal.signal(signal.SIGALRM, on_alarm)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        with pytest.raises(Alarm):
            any_loop.run_until_complete(asyncio.sleep(10))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
