"""python -m uringloop: the report, its JSON and exit status, when io_uring
is allowed and when a seccomp filter or the sysctl refuses it."""
import json
import os
import subprocess
import sys

from conftest import io_uring_disabled, requires, until_closed, without_ipc_lock
import asyncio
import socket


def diagnose(*args, prefix=(), env=None, cwd=None):
    full_env = dict(os.environ)
    full_env.pop("URINGLOOP_STRICT", None)
    full_env.pop("URINGLOOP_DRIVER", None)
    full_env.update(env or {})
    return subprocess.run([*prefix, sys.executable, "-m", "uringloop", *args],
                          capture_output=True, text=True, env=full_env, timeout=60, cwd=cwd)


def test_the_directory_holding_a_clone_named_uringloop_does_not_shadow_it(tmp_path):
    """`python -m uringloop` run where the clone is a directory named
    uringloop: with the package under src/, that directory is no package
    and at most a namespace portion, which the installed package outranks
    (issue #35: it was imported instead, with no __version__)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.symlink(root, tmp_path / "uringloop")
    r = diagnose("--json", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["uringloop"]


@requires("ring")
def test_allowed_reports_usable_and_exits_0():
    r = diagnose()
    assert r.returncode == 0, r.stdout + r.stderr
    assert "io_uring: usable" in r.stdout
    assert "SEND_ZC" in r.stdout and "RLIMIT_MEMLOCK" in r.stdout

    r = diagnose("--json")
    assert r.returncode == 0, r.stderr
    facts = json.loads(r.stdout)
    assert facts["usable"] is True and facts["verdict"] == "io_uring"
    assert facts["driver"] == "ring" and facts["driver_reason"] == ""
    assert facts["kernel"] == os.uname().release
    assert facts["opcodes"]["POLL_ADD"] is True
    assert "DEFER_TASKRUN" in facts["setup_flags"]
    assert facts["ring_entries"][0] >= 32


def test_seccomp_refusal_names_the_filter_and_the_epoll_driver(deny_io_uring):
    r = diagnose("--json", prefix=[deny_io_uring])
    assert r.returncode == 0, r.stdout + r.stderr       # a loop is made: on epoll
    facts = json.loads(r.stdout)
    assert facts["usable"] is False and facts["verdict"] == "epoll driver"
    assert facts["driver"] == "epoll" and "EPERM" in facts["driver_reason"]
    assert facts["seccomp"] == "filter"
    assert any("seccomp" in cause for cause in facts["causes"]), facts["causes"]

    r = diagnose(prefix=[deny_io_uring])
    assert "NOT usable" in r.stdout and "driver: epoll" in r.stdout

    r = diagnose(prefix=[deny_io_uring], env={"URINGLOOP_STRICT": "1"})
    assert r.returncode == 1
    assert "NOT usable" in r.stdout and "raises RingUnavailableError" in r.stdout


def test_sysctl_refusal_names_the_sysctl():
    with io_uring_disabled("2"):
        r = diagnose()
        rj = diagnose("--json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "driver: epoll" in r.stdout
    assert "io_uring_disabled is 2" in r.stdout
    facts = json.loads(rj.stdout)
    assert facts["io_uring_disabled"] == 2 and facts["driver"] == "epoll"


@requires("ring")
def test_tight_memlock_is_reported():
    # a loop still works in 64 KiB (a smaller ring); the report says so.
    # Root has CAP_IPC_LOCK, which lifts the limit: the child drops it.
    prefix = without_ipc_lock()
    code = ("import resource, sys, runpy; "
            "resource.setrlimit(resource.RLIMIT_MEMLOCK, (65536, 65536)); "
            "sys.argv = ['uringloop', '--json']; "
            "sys.exit(runpy.run_module('uringloop', run_name='uringloop_report')['main']())")
    r = subprocess.run(prefix + [sys.executable, "-c", code],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    facts = json.loads(r.stdout)
    assert facts["memlock_limit"] == 65536
    assert facts["capabilities"]["CAP_IPC_LOCK"] is False
    assert facts["usable"] is True
    assert facts["ring_entries"][0] < 2048       # the smaller ring
    assert any("RLIMIT_MEMLOCK is 64 KiB" in cause for cause in facts["causes"]), facts


def test_a_setting_that_cannot_be_read_is_listed_as_the_cause():
    """A bad URINGLOOP_* variable makes Loop() raise ValueError; the report
    names the variable as the cause instead of ending in a traceback."""
    for name, value in (("URINGLOOP_SPIN_US", "abc"), ("URINGLOOP_RING_ENTRIES", "bogus"),
                        ("URINGLOOP_SENDFILE", "zerocopy")):
        r = diagnose(env={name: value})
        assert r.returncode == 1, r.stdout + r.stderr
        assert "Traceback" not in r.stderr, r.stderr
        assert "why / what to do:" in r.stdout and name in r.stdout
        facts = json.loads(diagnose("--json", env={name: value}).stdout)
        assert facts["usable"] is False and facts["verdict"] == "error"
        assert name in facts["settings_error"] and name in facts["causes"][0]


def test_debug_logs_eof_and_pauses_as_the_selector_loop(any_loop, caplog):
    """With the loop's debug on (set_debug(), read by the transport from the
    loop's field, not through get_debug()), "received EOF", "pauses
    reading" and "resumes reading" are logged at DEBUG, as the selector
    transport logs them; with it off, none is."""
    loop = any_loop

    async def main(debug):
        loop.set_debug(debug)
        a, b = socket.socketpair()
        got = loop.create_future()

        class Proto(asyncio.Protocol):
            def eof_received(self):
                got.set_result(None)

        tr, _ = await loop.create_connection(Proto, sock=a)
        tr.pause_reading()
        tr.resume_reading()
        b.shutdown(socket.SHUT_WR)
        await asyncio.wait_for(got, 5)
        tr.close()
        b.close()
        await until_closed(tr)

    for debug in (False, True):
        caplog.clear()
        with caplog.at_level("DEBUG", logger="asyncio"):
            loop.run_until_complete(main(debug))
        loop.set_debug(False)
        said = [r.getMessage().split("> ")[-1] for r in caplog.records
                if r.name == "asyncio" and "> " in r.getMessage()]
        wanted = ["pauses reading", "resumes reading", "received EOF"] if debug else []
        caplog.clear()              # (its records hold the transport)
        assert [s for s in said if s in ("pauses reading", "resumes reading",
                                         "received EOF")] == wanted
