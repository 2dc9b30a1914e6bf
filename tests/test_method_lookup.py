"""protocol.data_received (a datagram protocol's datagram_received, a
BufferedProtocol's buffer_updated and get_buffer) is found on each call as
the stdlib's transports find it
(`self._protocol.data_received(data)`), though uringloop keeps the function
between calls (transports/base.pyx, read_method_kept(); the checks in
method_cache.h).  Each scenario changes, between two reads, what that
lookup finds -- the class, a class above it, the object's own attributes,
its __class__ -- and runs on uringloop and on asyncio.SelectorEventLoop
(`any_loop`), over a stream, over datagrams and with a BufferedProtocol:
both loops must call the functions written out in SCENARIOS."""
import asyncio
import socket

import pytest


def records(label):
    """A method that records `label` (and returns the buffer, as a
    BufferedProtocol's get_buffer does)."""
    return lambda self, *args: (self.calls.append(label), BUFFER)[1]


BUFFER = bytearray(64)


def recorder_classes(method):
    """Fresh classes per scenario (scenarios change them), whose `method`
    (data_received, datagram_received or buffer_updated) records which one
    ran."""
    base = {"data_received": asyncio.Protocol, "datagram_received": asyncio.DatagramProtocol,
            "buffer_updated": asyncio.BufferedProtocol}[method]

    class Base(base):
        def connection_made(self, transport):
            self.transport = transport

    class Proto(Base):
        pass

    class Sibling(Base):
        pass

    class Inherits(Base):
        pass

    class Slotted(base):
        __slots__ = ("calls", "transport")

        def connection_made(self, transport):
            self.transport = transport

    class Redirects(Proto):
        def __getattribute__(self, name):
            if name == method:
                return lambda *args: object.__getattribute__(self, "calls").append("getattribute")
            return object.__getattribute__(self, name)

    for cls, label in ((Base, "base"), (Proto, "class"), (Sibling, "sibling"),
                       (Slotted, "class")):
        setattr(cls, method, records(label))
    if method == "buffer_updated":
        for cls in (Base, Slotted):
            cls.get_buffer = lambda self, sizehint: BUFFER
    return dict(Base=Base, Proto=Proto, Sibling=Sibling, Inherits=Inherits,
                Slotted=Slotted, Redirects=Redirects, method=method)


async def send_and_wait(sock, data, seen, count):
    """Send `data` and wait (up to a second) until `seen` has `count` items."""
    sock.send(data)
    for _ in range(500):
        if len(seen) >= count:
            return
        await asyncio.sleep(0.002)


def own(c, proto, label):
    """An attribute of the object's own named as the method."""
    setattr(proto, c["method"], lambda *args: proto.calls.append(label))


def patch(c, cls, value):
    setattr(c[cls], c["method"], value)


class Callable:
    """A class attribute that is no method: called without the protocol."""
    def __init__(self, calls):
        self.calls = calls

    def __call__(self, *args):
        self.calls.append("callable")


def replace_in_call(c, proto):
    """Its method replaces the class's, from inside the call."""
    def first(self, *args):
        self.calls.append("class")
        patch(c, "Proto", records("replaced"))
    patch(c, "Proto", first)


# scenario: (protocol class, what to do before the reads, changes between
# reads (one per read after the first), the calls expected)
SCENARIOS = {
    "as_defined": ("Proto", None, [None, None], ["class"] * 3),
    "own_attribute_from_the_start": ("Proto", lambda c, p: own(c, p, "own"), [None],
                                     ["own"] * 2),
    "own_attribute_set_then_deleted": (
        "Proto", None,
        [lambda c, p: own(c, p, "own"), lambda c, p: delattr(p, c["method"])],
        ["class", "own", "class"]),
    "class_method_replaced": (
        "Proto", None, [lambda c, p: patch(c, "Proto", records("new")), None],
        ["class", "new", "new"]),
    "method_of_the_base_replaced": (
        "Inherits", None, [lambda c, p: patch(c, "Base", records("new base"))],
        ["base", "new base"]),
    "method_defined_on_the_subclass_later": (
        "Inherits", None, [lambda c, p: patch(c, "Inherits", records("sub"))],
        ["base", "sub"]),
    "method_deleted_from_the_class": (
        "Proto", None, [lambda c, p: delattr(c["Proto"], c["method"])],
        ["class", "base"]),
    "class_assigned": (
        "Proto", None, [lambda c, p: setattr(p, "__class__", c["Sibling"]),
                        lambda c, p: setattr(p, "__class__", c["Proto"])],
        ["class", "sibling", "class"]),
    "dict_made_then_own_attribute": (
        "Proto", lambda c, p: vars(p), [None, lambda c, p: own(c, p, "own")],
        ["class", "class", "own"]),
    "dict_written_directly": (
        "Proto", None,
        [lambda c, p: p.__dict__.__setitem__(
            c["method"], lambda *args: p.calls.append("own")),
         lambda c, p: p.__dict__.pop(c["method"])],
        ["class", "own", "class"]),
    # another object of the class has the attribute: the name is one of the
    # class's shared keys, this object's slot for it empty until it is set
    "another_object_has_its_own": (
        "Proto", lambda c, p: own(c, c["Proto"](), "other"),
        [None, lambda c, p: own(c, p, "own")], ["class", "class", "own"]),
    "many_attributes_then_own": (
        "Proto", lambda c, p: [setattr(p, f"a{i}", i) for i in range(40)],
        [lambda c, p: own(c, p, "own")], ["class", "own"]),
    "slots_class_patched": (
        "Slotted", None, [lambda c, p: patch(c, "Slotted", records("new"))],
        ["class", "new"]),
    "getattribute": ("Redirects", None, [None], ["getattribute"] * 2),
    "a_callable_class_attribute": (
        "Proto", None, [lambda c, p: patch(c, "Proto", Callable(p.calls))],
        ["class", "callable"]),
    "a_staticmethod": (
        "Proto", None,
        [lambda c, p: patch(c, "Proto", staticmethod(lambda *args: p.calls.append("static")))],
        ["class", "static"]),
    "replaced_during_the_call": ("Proto", replace_in_call, [None, None],
                                 ["class", "replaced", "replaced"]),
    "set_protocol_of_another_class": (
        "Proto", None, [lambda c, p: swap_protocol(c, p)], ["class", "sibling"]),
}


def swap_protocol(c, proto):
    other = c["Sibling"]()
    other.calls = proto.calls
    other.transport = proto.transport
    proto.transport.set_protocol(other)


def run_scenario(loop, name, method):
    cls, before, changes, _ = SCENARIOS[name]
    classes = recorder_classes(method)
    proto = classes[cls]()
    proto.calls = calls = []
    if before is not None:
        before(classes, proto)

    async def main():
        if method != "datagram_received":
            a, b = socket.socketpair()
            transport, _ = await loop.connect_accepted_socket(lambda: proto, a)
        else:
            a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
            transport, _ = await loop.create_datagram_endpoint(lambda: proto, sock=a)
        try:
            for i, change in enumerate([None] + changes):
                if change is not None:
                    change(classes, proto)
                await send_and_wait(b, b"x", calls, i + 1)
        finally:
            transport.close()
            b.close()
            await asyncio.sleep(0)
        return calls

    return loop.run_until_complete(main())


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_data_received_is_what_the_lookup_finds(any_loop, name):
    assert run_scenario(any_loop, name, "data_received") == SCENARIOS[name][3]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_datagram_received_is_what_the_lookup_finds(any_loop, name):
    assert run_scenario(any_loop, name, "datagram_received") == SCENARIOS[name][3]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_buffer_updated_is_what_the_lookup_finds(any_loop, name):
    assert run_scenario(any_loop, name, "buffer_updated") == SCENARIOS[name][3]


@pytest.mark.parametrize("change", ["class", "own"])
def test_get_buffer_is_what_the_lookup_finds(any_loop, change):
    """get_buffer, changed between reads, is the new one from then on and
    its buffer takes the bytes.  (Not call for call as on the selector
    loop: uringloop asks for the buffer when it arms the read, before the
    data, the selector loop when the data is there.)"""
    loop = any_loop
    old, new = bytearray(8), bytearray(8)
    got = []

    class Proto(asyncio.BufferedProtocol):
        def get_buffer(self, sizehint):
            return old

        def buffer_updated(self, nbytes):
            got.append(nbytes)

    proto = Proto()

    async def main():
        a, b = socket.socketpair()
        transport, _ = await loop.connect_accepted_socket(lambda: proto, a)
        try:
            for i, byte in enumerate(b"abcd"):
                if i == 1:
                    if change == "class":
                        Proto.get_buffer = lambda self, sizehint: new
                    else:
                        proto.get_buffer = lambda sizehint: new
                await send_and_wait(b, bytes([byte]), got, i + 1)
        finally:
            transport.close()
            b.close()
            await asyncio.sleep(0)

    loop.run_until_complete(main())
    assert got == [1, 1, 1, 1]
    # the old buffer took "a" (and on uringloop "b": armed before the change)
    assert old[0] in b"ab"
    assert new[0] == ord("d")       # the last read went to the new buffer
