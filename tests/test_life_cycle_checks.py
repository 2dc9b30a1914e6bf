"""The debug build's checks of the life of a request and of the transports'
states fire: each rule, broken on purpose in a child process
(uringloop.core._break_a_rule), stops that process with a fatal error
naming the rule, as a bug that broke it would.

The normal build does not check (test_debug_build.py runs this file on a
debug build), so here each case skips there; what the normal build says
when asked to break a rule is tested below.
"""
import signal
import subprocess
import sys

import pytest

import uringloop.core as core

DEBUG_BUILD = core.debug_counters() is not None

RULES = {
    "submitted twice": "an Operation submitted while its request is in flight",
    "completed twice": "a completion for an Operation with no request in flight",
    "cancelled idle": "an Operation moved between life states its table does not join",
    "read state": "moved between read states its table does not join",
    "send state": "moved between send states its table does not join",
}


@pytest.mark.skipif(not DEBUG_BUILD, reason="the checks are the debug build's "
                    "(test_debug_build.py runs this file on one)")
@pytest.mark.parametrize("rule", sorted(RULES))
def test_the_debug_build_stops_at_a_broken_rule(rule):
    child = subprocess.run(
        [sys.executable, "-c",
         f"import uringloop.core as c; c._break_a_rule({rule!r})"],
        capture_output=True, text=True, timeout=60)
    assert child.returncode == -signal.SIGABRT, child.stderr[-2000:]
    assert "Fatal Python error" in child.stderr
    assert RULES[rule] in child.stderr, child.stderr[-2000:]


@pytest.mark.skipif(DEBUG_BUILD, reason="the normal build's answer")
def test_the_normal_build_refuses_to_break_a_rule():
    with pytest.raises(RuntimeError, match="only the debug build"):
        core._break_a_rule("submitted twice")
