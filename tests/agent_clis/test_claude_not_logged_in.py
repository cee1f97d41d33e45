"""A real Claude Code 2.1.332 that is not logged in, dispatched by the real listener through
launchers/claude_headless.sh: the attempt ends with cli_status `auth_error` (before, Claude's
"Not logged in" was classified `api_error` and the failure showed only `no_evidence`), and the
cause with its fix is where a person looks first: `send --wait`, `listener status` (with the
attempt directory), `listener progress`, the sender's notice and `doctor`. No model request is made."""

import json
import os
from pathlib import Path

import pytest
from cli_harness import claude_worker_env, without_cli_settings
from dispatch_harness import cli, end_listeners, start_listener, status, wait_until
from harness import PROJECT, bridge_env, sql, write_config

pytestmark = pytest.mark.cli


@pytest.fixture
def logged_out(tmp_path, claude_bin):
    config = write_config(
        tmp_path / "config.json",
        agents={
            "claude": {"auto": True, "launcher": str(PROJECT / "launchers" / "claude_headless.sh")},
            "kimi": {"auto": False, "launcher": "launchers/kimi_headless.sh"},
        },
    )
    env = claude_worker_env(bridge_env(tmp_path, config), tmp_path, "http://127.0.0.1:9", claude_bin)
    for key in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"):  # no credentials at all: not logged in
        env.pop(key)
    proc = start_listener(env, inherited=without_cli_settings(dict(os.environ)))
    try:
        wait_until(lambda: status(env)["stage"] == "idle", what="listener idle")
        yield env
    finally:
        end_listeners([proc])


def test_a_claude_that_is_not_logged_in_ends_as_auth_error_with_the_fix_shown(logged_out):
    env = logged_out
    done = cli(env, "send", "--from", "kimi", "--to", "claude", "--task", "say hello", "--wait")
    assert done.returncode == 4, (done.stdout, done.stderr)
    assert "task #1: failed (auth_error); error_kind no_evidence" in done.stdout  # the cause leads (issue 30)
    assert "why: auth_error: the agent's CLI is not logged in" in done.stdout
    # The listener notes the attempt once it has reaped its supervisor, which may be just after
    # `send --wait` saw the verdict in the store.
    last = wait_until(lambda: status(env)["last"], what="the listener's note of the attempt")
    assert (last["cli_status"], last["reason"].split(":")[0]) == ("auth_error", "auth_error")
    assert "/login" in last["reason"] and "agent-bridge doctor" in last["reason"]
    assert Path(last["attempt_dir"]).is_dir() and (Path(last["attempt_dir"]) / "claude-result.json").exists()
    progress = cli(env, "listener", "progress", "--once", "--agent", "claude").stdout
    assert "result=failed" in progress and "why=auth_error" in progress
    ((notice,),) = sql(env["AGENT_BRIDGE_DB"], "SELECT text FROM messages WHERE origin = 'system'")
    assert "Why: auth_error: the agent's CLI is not logged in" in notice
    assert "agent-bridge show 1" in notice
    shown = json.loads(cli(env, "show", "1", "--json").stdout)
    assert shown["dispatch"]["reason"] == last["reason"]
    doctor = json.loads(cli(env, "doctor", "--json").stdout)  # the real `claude auth status` says no
    (found,) = [f for f in doctor["findings"] if f["code"] == "cli_not_authenticated"]
    assert found["agent"] == "claude" and "/login" in found["fix"]
