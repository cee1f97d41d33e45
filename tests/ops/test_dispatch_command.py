"""``agent-bridge dispatch ID``: a deliberate human action with documented exit statuses and tidy numbers."""

import json
import time
from pathlib import Path

import pytest
from dispatch_harness import cli
from harness import bridge_env, write_config

from dispatcher.store import open_store
from dispatcher.store.messages import insert_message


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    launcher = tmp_path / "launch_nothing.sh"
    launcher.write_text("#!/bin/sh\nexit 0\n")  # a worker that does nothing: outcome failed (no_evidence)
    launcher.chmod(0o755)
    agents = {
        "claude": {"auto": False, "launcher": str(launcher), "worker_timeout_seconds": 60},
        "kimi": {"auto": False, "launcher": "launchers/kimi_headless.sh"},
    }
    return bridge_env(tmp_path, write_config(tmp_path / "config.json", agents))


def send_task(env: dict[str, str]) -> int:
    conn = open_store(Path(env["AGENT_BRIDGE_DB"]))
    try:
        return insert_message(
            conn, sender="kimi", recipient="claude", text="do it", kind="task", created_at=time.time()
        )
    finally:
        conn.close()


def test_a_failed_attempt_exits_4_with_rounded_numbers_and_a_second_one_is_refused_with_3(env):
    task = send_task(env)
    done = cli(env, "dispatch", str(task))  # claude's auto is off: a human may still run it
    assert done.returncode == 4, done.stderr
    result = json.loads(done.stdout)
    assert (result["message_id"], result["outcome"], result["error_kind"]) == (task, "failed", "no_evidence")
    assert result["duration_seconds"] == round(result["duration_seconds"], 1)
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"agent-bridge: attempt_failed: the attempt at message #{task} ended failed (no_evidence)")
    again = cli(env, "dispatch", str(task))
    (line,) = again.stderr.splitlines()
    assert again.returncode == 3 and again.stdout == ""
    assert line.startswith("agent-bridge: already_attempted: ")


def test_a_missing_message_is_refused_with_3(env):
    send_task(env)
    done = cli(env, "dispatch", "999")
    assert done.returncode == 3 and done.stderr.startswith("agent-bridge: message_not_found: "), done.stderr


def test_the_help_says_it_overrides_auto_and_never_repeats(env):
    text = " ".join(cli(env, "dispatch", "--help").stdout.split())
    assert "even when the agent's `auto` is off and outside the age window" in text
    assert "never a second attempt" in text


def test_serve_help_says_agent_id_is_required_and_declared(env):
    text = " ".join(cli(env, "serve", "--help").stdout.split())
    assert "AGENT_ID is required and must be declared in config.json" in text


def test_the_exit_statuses_are_in_the_help(env):
    text = cli(env, "--help").stdout
    for status in ("0  done", "1  the store", "2  wrong command line", "3  dispatch refused", "4  dispatch:"):
        assert status in text
