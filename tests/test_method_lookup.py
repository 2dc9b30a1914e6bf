"""protocol.data_received is found on each call as the stdlib's transports
find it (`self._protocol.data_received(data)`), though uringloop keeps the
function between calls (transports/base.pyx, known_data_received(); the
checks in method_cache.h).  Each scenario changes, between two reads, what
that lookup finds -- the class, a class above it, the object's own
attributes, its __class__ -- and runs on uringloop and on
asyncio.SelectorEventLoop (`any_loop`): both must call the same functions,
the ones written out in EXPECTED."""
import asyncio
import socket

import pytest


def recorder_classes():
    """Fresh classes per scenario: scenarios change them."""
    class Base(asyncio.Protocol):
        def connection_made(self, transport):
            self.transport = transport

        def data_received(self, data):
            self.calls.append("base")

    class Proto(Base):
        def data_received(self, data):
            self.calls.append("class")

    class Sibling(Base):
        def data_received(self, data):
            self.calls.append("sibling")

    class Inherits(Base):
        pass

    class Slotted(asyncio.Protocol):
        __slots__ = ("calls", "transport")

        def connection_made(self, transport):
            self.transport = transport

        def data_received(self, data):
            self.calls.append("class")

    class Redirects(Proto):
        def __getattribute__(self, name):
            if name == "data_received":
                return lambda data: object.__getattribute__(self, "calls").append("getattribute")
            return object.__getattribute__(self, name)

    return dict(Base=Base, Proto=Proto, Sibling=Sibling, Inherits=Inherits,
                Slotted=Slotted, Redirects=Redirects)


def own(proto, label):
    """An attribute of the object's own named data_received."""
    proto.data_received = lambda data: proto.calls.append(label)


class Callable:
    """A class attribute that is no method: called without the protocol."""
    def __init__(self, calls):
        self.calls = calls

    def __call__(self, data):
        self.calls.append("callable")


def replace_in_call(c, proto):
    """Its data_received replaces the class's, from inside the call."""
    def first(self, data):
        self.calls.append("class")
        c["Proto"].data_received = lambda self, data: self.calls.append("replaced")
    c["Proto"].data_received = first


# scenario: (protocol class, what to do before the reads, changes between
# reads (one per read after the first), the calls expected)
SCENARIOS = {
    "as_defined": ("Proto", None, [None, None], ["class"] * 3),
    "own_attribute_from_the_start": ("Proto", lambda c, p: own(p, "own"), [None], ["own"] * 2),
    "own_attribute_set_then_deleted": (
        "Proto", None,
        [lambda c, p: own(p, "own"), lambda c, p: delattr(p, "data_received")],
        ["class", "own", "class"]),
    "class_method_replaced": (
        "Proto", None,
        [lambda c, p: setattr(c["Proto"], "data_received",
                              lambda self, data: self.calls.append("new")), None],
        ["class", "new", "new"]),
    "method_of_the_base_replaced": (
        "Inherits", None,
        [lambda c, p: setattr(c["Base"], "data_received",
                              lambda self, data: self.calls.append("new base"))],
        ["base", "new base"]),
    "method_defined_on_the_subclass_later": (
        "Inherits", None,
        [lambda c, p: setattr(c["Inherits"], "data_received",
                              lambda self, data: self.calls.append("sub"))],
        ["base", "sub"]),
    "method_deleted_from_the_class": (
        "Proto", None, [lambda c, p: delattr(c["Proto"], "data_received")],
        ["class", "base"]),
    "class_assigned": (
        "Proto", None, [lambda c, p: setattr(p, "__class__", c["Sibling"]),
                        lambda c, p: setattr(p, "__class__", c["Proto"])],
        ["class", "sibling", "class"]),
    "dict_made_then_own_attribute": (
        "Proto", lambda c, p: vars(p), [None, lambda c, p: own(p, "own")],
        ["class", "class", "own"]),
    "dict_written_directly": (
        "Proto", None,
        [lambda c, p: p.__dict__.__setitem__(
            "data_received", lambda data: p.calls.append("own")),
         lambda c, p: p.__dict__.pop("data_received")],
        ["class", "own", "class"]),
    # another object of the class has the attribute: the name is one of the
    # class's shared keys, this object's slot for it empty until it is set
    "another_object_has_its_own": (
        "Proto", lambda c, p: own(c["Proto"](), "other"),
        [None, lambda c, p: own(p, "own")], ["class", "class", "own"]),
    "many_attributes_then_own": (
        "Proto", lambda c, p: [setattr(p, f"a{i}", i) for i in range(40)],
        [lambda c, p: own(p, "own")], ["class", "own"]),
    "slots_class_patched": (
        "Slotted", None,
        [lambda c, p: setattr(c["Slotted"], "data_received",
                              lambda self, data: self.calls.append("new"))],
        ["class", "new"]),
    "getattribute": ("Redirects", None, [None], ["getattribute"] * 2),
    "a_callable_class_attribute": (
        "Proto", None, [lambda c, p: setattr(c["Proto"], "data_received", Callable(p.calls))],
        ["class", "callable"]),
    "a_staticmethod": (
        "Proto", None,
        [lambda c, p: setattr(c["Proto"], "data_received",
                              staticmethod(lambda data: p.calls.append("static")))],
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


def run_scenario(loop, name):
    cls, before, changes, _ = SCENARIOS[name]
    classes = recorder_classes()
    proto = classes[cls]()
    proto.calls = calls = []
    if before is not None:
        before(classes, proto)

    async def main():
        a, b = socket.socketpair()
        transport, _ = await loop.connect_accepted_socket(lambda: proto, a)
        try:
            for i, change in enumerate([None] + changes):
                if change is not None:
                    change(classes, proto)
                b.send(b"x")
                for _ in range(500):
                    if len(calls) > i:
                        break
                    await asyncio.sleep(0.002)
        finally:
            transport.close()
            b.close()
            await asyncio.sleep(0)
        return calls

    return loop.run_until_complete(main())


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_data_received_is_what_the_lookup_finds(any_loop, name):
    assert run_scenario(any_loop, name) == SCENARIOS[name][3]
