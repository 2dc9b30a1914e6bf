"""The one switch over the CPython shortcuts (src/uringloop/shortcuts/switch.pyx):
URINGLOOP_SHORTCUTS turns them all off, or keeps those named; a bad value
is a clear error for Loop() and `python -m uringloop`; and with them off
the loop does what the stdlib does where they used to skip a step.  (CI
runs the whole suite a second time with URINGLOOP_SHORTCUTS=0.)"""
import json
import os
import subprocess
import sys
import textwrap

import pytest

import uringloop

NAMES = ('kept_methods', 'spare_bytes', 'handle_slots', 'socket_objects',
         'loop_methods', 'run_once_tag', 'ready_queue')
VERIFIED = sys.version_info[:2] in {(3, 11), (3, 12), (3, 13), (3, 14), (3, 15)}


def child(code, setting, *args):
    env = dict(os.environ)
    env.pop("URINGLOOP_SHORTCUTS", None)
    if setting is not None:
        env["URINGLOOP_SHORTCUTS"] = setting
    return subprocess.run([sys.executable, *args, "-c", textwrap.dedent(code)] if code else
                          [sys.executable, *args], capture_output=True, text=True, env=env,
                          timeout=120)


SAY_SHORTCUTS = """
    import json, uringloop
    print(json.dumps(uringloop.shortcuts()))
"""


@pytest.mark.parametrize("setting", [None, "", "1"])
def test_by_default_every_shortcut_is_on_where_the_suite_verified_it(setting):
    r = child(SAY_SHORTCUTS, setting)
    assert r.returncode == 0, r.stderr
    said = json.loads(r.stdout)
    assert tuple(said) == NAMES
    if VERIFIED:
        assert set(said.values()) == {"on"}
    else:
        assert all(why.startswith("off: not verified on CPython") for why in said.values())


def test_zero_turns_every_shortcut_off_and_says_why():
    r = child(SAY_SHORTCUTS, "0")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {name: "off: URINGLOOP_SHORTCUTS=0" for name in NAMES}


def test_a_list_keeps_only_the_shortcuts_it_names():
    r = child(SAY_SHORTCUTS, "kept_methods, spare_bytes")
    assert r.returncode == 0, r.stderr
    said = json.loads(r.stdout)
    on = {name for name, why in said.items() if why == "on"}
    assert on == ({"kept_methods", "spare_bytes"} if VERIFIED else set())
    assert said["handle_slots"] == "off: not in URINGLOOP_SHORTCUTS=kept_methods, spare_bytes"


@pytest.mark.parametrize("bad", ["2", "yes", "kept_methods,nonsense", ",", "off"])
def test_a_bad_value_fails_loop_creation_naming_the_accepted_values(bad):
    r = child("""
        import uringloop
        try:
            uringloop.new_event_loop()
        except ValueError as exc:
            print(exc)
        else:
            print("made")
    """, bad)
    assert r.returncode == 0, r.stderr
    said = r.stdout.strip()
    assert said.startswith("URINGLOOP_SHORTCUTS must be '1'"), said
    for name in NAMES:
        assert name in said
    assert repr(bad) in said


def test_a_bad_value_is_the_cause_python_m_uringloop_reports():
    r = child(None, "bogus", "-m", "uringloop")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "URINGLOOP_SHORTCUTS must be" in r.stdout
    assert "why / what to do:" in r.stdout
    r = child(None, "bogus", "-m", "uringloop", "--json")
    facts = json.loads(r.stdout)
    assert facts["verdict"] == "error"
    assert "URINGLOOP_SHORTCUTS" in facts["settings_error"]


def test_python_m_uringloop_lists_the_shortcuts():
    r = child(None, "0", "-m", "uringloop", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["shortcuts"] == {name: "off: URINGLOOP_SHORTCUTS=0"
                                                 for name in NAMES}
    r = child(None, "0", "-m", "uringloop")
    assert "CPython shortcuts         none (off: URINGLOOP_SHORTCUTS=0)" in r.stdout


ECHO_AND_PATCHES = """
    import asyncio, json, socket, uringloop

    made = []

    class Echo(asyncio.Protocol):
        def connection_made(self, transport):
            self.transport = transport
        def data_received(self, data):
            self.transport.write(data)

    async def main():
        loop = asyncio.get_running_loop()
        server = await loop.create_server(Echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for size in (1, 1000, 100000):
            writer.write(b"x" * size)
            assert await reader.readexactly(size) == b"x" * size
        writer.close()
        await writer.wait_closed()
        server.close()
        await server.wait_closed()
        # create_future set on the loop after it was made
        original = loop.create_future
        def counting():
            made.append(1)
            return original()
        loop.create_future = counting
        a, b = socket.socketpair()
        a.setblocking(False)
        b.setblocking(False)
        loop.call_later(0.01, b.send, b"ping")       # the receive must wait
        assert await loop.sock_recv(a, 4) == b"ping"
        a.close(); b.close()

    uringloop.run(main())
    print(json.dumps({"create_future_calls": len(made)}))
"""


def test_with_every_shortcut_off_the_loop_serves_and_goes_through_patched_methods():
    """Off, the loop takes the plain steps: an echo over a server's
    accepted socket at three sizes, and sock_recv() through the
    create_future set on the loop, as the stdlib does."""
    r = child(ECHO_AND_PATCHES, "0")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["create_future_calls"] >= 1
