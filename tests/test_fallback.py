"""When io_uring is refused: a real seccomp filter (as Docker's default
profile) and the kernel.io_uring_disabled sysctl, in child processes."""
import os
import subprocess
import sys
import textwrap

from conftest import io_uring_disabled



def run_child(prefix, code, env=None):
    full_env = dict(os.environ)
    full_env.pop("URINGLOOP_STRICT", None)
    full_env.update(env or {})
    return subprocess.run(prefix + [sys.executable, "-W", "always", "-c",
                                    textwrap.dedent(code)],
                          capture_output=True, text=True, env=full_env, timeout=60)


CHECK_REFUSED = """
    import asyncio, errno, warnings, uringloop
    try:
        uringloop.new_event_loop()
    except uringloop.RingUnavailableError as exc:
        assert exc.errno == errno.EPERM, exc
        print("raised:", exc)
    else:
        raise SystemExit("new_event_loop did not raise")
    info = uringloop.features()
    assert info["available"] is False and "io_uring_setup failed" in info["error"]
    print("features:", info["available"], info["error"])

    async def main():
        return type(asyncio.get_running_loop()).__name__

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        name = uringloop.run(main())
        name2 = uringloop.run(main())
        uringloop.install()
    msgs = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    print("loop:", name, name2)
    print("warnings:", len(msgs), msgs)
    assert name == name2 == "_UnixSelectorEventLoop"
    assert len(msgs) == 1, msgs
    assert not isinstance(asyncio.get_event_loop_policy(), uringloop.EventLoopPolicy)
    print("OK")
"""

CHECK_STRICT = """
    import asyncio, uringloop
    async def main():
        pass
    try:
        uringloop.run(main())
    except uringloop.RingUnavailableError as exc:
        print("strict raised:", exc)
    else:
        raise SystemExit("strict run() fell back")
"""


def test_seccomp_refusal_raises_and_run_falls_back(deny_io_uring):
    r = run_child([deny_io_uring], CHECK_REFUSED)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "OK" in r.stdout
    assert "seccomp" in r.stdout      # the message names the cause and the fix


CHECK_FACTORY_AND_WARNING_SITE = """
    import asyncio, warnings, uringloop
    async def main():
        return type(asyncio.get_running_loop()).__name__
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        name = uringloop.run(main())           # line 7: the warning's site
        with asyncio.Runner(loop_factory=uringloop.loop_factory) as runner:
            name2 = runner.run(main())
        loop = uringloop.loop_factory()
        name3 = type(loop).__name__
        loop.close()
    sites = [(w.filename, w.lineno) for w in caught if issubclass(w.category, RuntimeWarning)]
    print(name, name2, name3, sites)
    assert name == name2 == name3 == "_UnixSelectorEventLoop"
    assert sites == [("<string>", 7)], sites
    print("OK")
"""


def test_the_fallback_warning_names_the_callers_line_and_loop_factory_falls_back(
        deny_io_uring):
    """run()'s warning points at the line that called it (not at
    asyncio/runners.py, which calls the factory), and loop_factory() -- for
    asyncio.Runner and uvicorn's --loop -- falls back as run() does."""
    r = run_child([deny_io_uring], CHECK_FACTORY_AND_WARNING_SITE)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "OK" in r.stdout


def test_seccomp_refusal_strict_mode_raises(deny_io_uring):
    r = run_child([deny_io_uring], CHECK_STRICT, env={"URINGLOOP_STRICT": "1"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "strict raised" in r.stdout


def test_io_uring_disabled_sysctl(tmp_path):
    with io_uring_disabled("2"):
        r = run_child([], CHECK_REFUSED)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "OK" in r.stdout
