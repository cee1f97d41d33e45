"""The README's first command works and shows the whole flow."""

import os
import subprocess
import sys

from harness import PROJECT


def test_demo_runs_end_to_end(tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "dispatcher", "demo"], cwd=PROJECT, env=env,
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "dispatch=succeeded" in out
    assert "completed after 4/4 turns" in out
    assert "[claude] idle | last msg#" in out and "result=succeeded" in out
    assert not list(tmp_path.iterdir())  # the temporary store is cleaned up
