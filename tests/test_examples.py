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
