"""Protocols and scenarios the behaviour files share (tests/test_flow_control_and_pause.py,
test_streams.py, test_datagrams.py and others): recorders of what a
protocol is called with while paused, raising or interrupted.

    from recorders import PauseRecorder, STREAM_MODES      # (helpers/ is on sys.path)
"""
import asyncio
import socket


def handler_calls(loop):
    calls = []
    loop.set_exception_handler(lambda loop, ctx: calls.append(ctx))
    return calls


# ---- readiness watches and odd file objects ---------------------------------


class Events(asyncio.DatagramProtocol, asyncio.Protocol):
    """Records what the transport tells its protocol, in order."""

    def __init__(self):
        self.events = []

    def error_received(self, exc):
        self.events.append(("error_received", type(exc)))

    def connection_lost(self, exc):
        self.events.append(("connection_lost", type(exc)))


class PauseRecorder:
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


class StreamRecorder(PauseRecorder, asyncio.Protocol):
    def data_received(self, data):
        self.saw(len(data))


class BufferedRecorder(PauseRecorder, asyncio.BufferedProtocol):
    def __init__(self):
        super().__init__()
        self.buf = bytearray(64 * 1024)

    def get_buffer(self, sizehint):
        return self.buf

    def buffer_updated(self, nbytes):
        self.saw(nbytes)


class DatagramRecorder(PauseRecorder, asyncio.DatagramProtocol):
    def datagram_received(self, data, addr):
        self.saw(len(data))


# chunk sizes that keep a uringloop stream in its ring mode (small reads) and
# move it to direct reads (8 KiB and more); BufferedProtocol: buffered mode
STREAM_MODES = {"ring": (StreamRecorder, 1000), "direct": (StreamRecorder, 32 * 1024),
                "buffered": (BufferedRecorder, 32 * 1024)}


def datagram_pair(loop, factory):
    async def make():
        tr, proto = await loop.create_datagram_endpoint(factory, local_addr=("127.0.0.1", 0))
        peer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        peer.bind(("127.0.0.1", 0))
        return tr, proto, peer, tr.get_extra_info("sockname")
    return make()


def run_through_interrupts(loop, fut):
    """run_until_complete(fut), run again after each KeyboardInterrupt a
    callback raised (as a REPL or a supervisor would); (result, count)."""
    interrupts = 0
    while True:
        try:
            return loop.run_until_complete(fut), interrupts
        except KeyboardInterrupt:
            interrupts += 1
            assert interrupts < 10
