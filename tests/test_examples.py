"""The examples run and check their own results (README's first command runs
examples/echo_server.py --demo)."""
import os
import subprocess
import sys

import pytest

EXAMPLES = os.path.join(os.path.dirname(__file__), os.pardir, "examples")


@pytest.mark.parametrize("script, flags, expect", [
    ("echo_server.py", [], "2000 echoes of 1024 bytes verified"),
    ("zerocopy_blob_server.py", [], "identical: True"),
    ("zerocopy_blob_server.py", ["--registered"], "identical: True"),
    ("zcrx_upload_server.py", [], "sha256 matches: True"),
])
def test_example_demo(script, flags, expect):
    out = subprocess.run([sys.executable, os.path.join(EXAMPLES, script), "--demo"] + flags,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert expect in out.stdout


@pytest.mark.parametrize("script", ["echo_server.py", "zerocopy_blob_server.py",
                                    "zcrx_upload_server.py"])
def test_example_help_says_what_it_does_in_whole_sentences(script):
    """--help shows the docstring's first paragraph whole (it was cut at
    the end of its first line, mid-sentence)."""
    out = subprocess.run([sys.executable, os.path.join(EXAMPLES, script), "--help"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    description = out.stdout.split("\n\n")[1]
    assert description.rstrip().endswith((".", ")")), description
