"""The README's first command works and shows the whole flow."""

import os
import re
import subprocess
import sys

from harness import PROJECT


def test_demo_runs_end_to_end(tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "dispatcher", "demo"],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "dispatch=succeeded" in out
    assert "completed after 4/4 turns" in out
    assert "[claude] idle | last msg#" in out and "result=succeeded" in out
    # Issue 30, item 6: it printed a status line every second, and ended without a summary or a next step.
    status = [line for line in out.splitlines() if line.lstrip().startswith("status |")]
    assert len(status) <= 20, out
    assert out.splitlines()[-2].startswith("    demo | done: 3 tasks dispatched"), out
    assert "agent-bridge init --scripted" in out.splitlines()[-1], out
    assert not list(tmp_path.iterdir())  # the temporary store is cleaned up
    lines = out.splitlines()
    # Kimi's sends create messages 1 (task), 3 (the conversation's root) and 5 (the follow-up task): the
    # status line may mention each one only after the line that sent it.
    sends = [i for i, line in enumerate(lines) if re.match(r" *kimi \| (send_message|start_conversation)\(", line)]
    assert len(sends) == 3, out
    for sent_at, message_id in zip(sends, (1, 3, 5), strict=True):
        first = next(
            i for i, line in enumerate(lines) if line.lstrip().startswith("status |") and f"msg#{message_id} " in line
        )
        assert first > sent_at, f"a status line about msg#{message_id} came before the line that sent it:\n{out}"


FAILING_STEP = (
    "import sys, dispatcher.ops.demo as demo\n"
    "async def broken(env):\n    raise RuntimeError('step two went wrong')\n"
    "demo._script = broken\n"
    "from dispatcher.ops.cli import main; main(['demo'])"
)


def test_a_failed_demo_ends_with_one_line_and_cleans_up(tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", FAILING_STEP],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.splitlines()[-1] == (
        "agent-bridge: demo_failed: RuntimeError: step two went wrong; run it again with --keep to inspect its files."
    )
    assert not list(tmp_path.iterdir())
