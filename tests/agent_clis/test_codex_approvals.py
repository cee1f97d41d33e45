"""Issue 33 for Codex 0.171.0: a real Codex worker at level ``shell`` with ``ask: true`` runs
``touch ran.txt`` (standing for ``uv run pytest``), which its ``allow_commands`` do not hold. Its
PreToolUse hook records the request as the worker, the agent's notify_command is told (nothing of
the task or the command), the hook waits, a person approves with the real ``agent-bridge
approve``, the command runs and the task succeeds; denied with ``agent-bridge deny``, it never
runs and the task ends ``blocked`` naming the tool. Expiry is the shared rule
(tests/dispatch/test_command_gate_ask.py, tests/bridge/test_approval_rules.py) and Claude's
end-to-end run (tests/agent_clis/test_claude_approvals.py).

The real listener, launchers/codex_headless.sh and worker server.py, against the scripted
Responses model on 127.0.0.1."""

import json
import os
from pathlib import Path

import pytest
from cli_harness import require_cli
from dispatch_harness import cli, end_listeners, start_listener, status, wait_finished, wait_until
from harness import PROJECT, McpAgent, bridge_env, sql

pytestmark = pytest.mark.cli

LAUNCHER = PROJECT / "launchers" / "codex_headless.sh"
COMMAND = "touch ran.txt"
DEADLINE = 150.0


@pytest.mark.parametrize(
    ("decision", "outcome", "recorded"), [("approve", "succeeded", "allow_once"), ("deny", "blocked", "deny")]
)
def test_a_shell_command_outside_the_allow_list_is_asked_for_and_decided_by_a_person(
    tmp_path_factory, decision, outcome, recorded
):
    from models.openai_responses import ResponsesServer

    root = tmp_path_factory.mktemp("cx")
    workspace = root / "ws"
    workspace.mkdir()
    record = root / "notices"
    record.mkdir()
    notify = root / "record.sh"
    notify.write_text(f'#!/bin/sh\nf={record}/$$; printf "%s\\n" "$@" > $f.args; env > $f.env\n')
    notify.chmod(0o755)
    config = root / "config.json"
    codex = {
        "auto": True,
        "launcher": str(LAUNCHER),
        "worker_timeout_seconds": 120,
        "workspace": str(workspace),
        "permissions": {"level": "shell", "allow_commands": ["git status"], "ask": True},
        "approval_timeout_seconds": 60,
        "notify_command": [str(notify), "{summary}"],
    }
    config.write_text(
        json.dumps({"agents": {"codex": codex, "kimi": {"auto": False, "launcher": "launchers/kimi_headless.sh"}}})
    )
    home = root / "home" / ".codex"
    home.mkdir(parents=True)
    (home / "auth.json").write_text(json.dumps({"OPENAI_API_KEY": "sk-not-a-real-key"}))
    with ResponsesServer(root / "model" / "requests.jsonl") as model:
        env = {
            **bridge_env(root, config),
            "HOME": str(root / "home"),
            "CODEX_HOME": str(home),
            "CODEX_BIN": str(require_cli("codex")),
            "AGENT_BRIDGE_CODEX_BASE_URL": model.base_url,
            "AGENT_BRIDGE_CODEX_MODEL": "gpt-5.5",
            "AGENT_BRIDGE_CODEX_MAX_RETRIES": "0",
        }
        db = Path(env["AGENT_BRIDGE_DB"])
        kimi = McpAgent("kimi", env).wait_ready()
        listener = start_listener(env, agent="codex")
        try:
            wait_until(lambda: status(env, "codex")["stage"] == "idle", DEADLINE, what="listener idle")
            canary = f"Work in the workspace {os.urandom(6).hex()}."
            text = "\n".join([canary, "MODE=workspace", "TOOLKIT=codex", f"DO={json.dumps({'run': COMMAND})}"])
            task = kimi.ok("send_message", recipient="codex", kind="task", text=text)["id"]
            ((approval_id, tool, given),) = wait_until(
                lambda: sql(db, "SELECT id, tool, input FROM approvals WHERE message_id = ?", (task,)),
                DEADLINE,
                what="the command's approval request",
            )
            assert (tool, json.loads(given)) == ("exec_command", {"command": COMMAND})
            assert not (workspace / "ran.txt").exists()  # it waits for a person
            decided = cli(env, decision, str(approval_id))
            assert decided.returncode == 0, decided.stderr
            row = wait_finished(db, task, deadline=DEADLINE)
        finally:
            kimi.close()
            end_listeners([listener])
    assert row["outcome"] == outcome, row
    assert (workspace / "ran.txt").exists() is (decision == "approve")
    assert sql(db, "SELECT decision FROM approvals WHERE message_id = ?", (task,)) == [(recorded,)]
    if decision == "deny":
        ((result,),) = sql(db, "SELECT text FROM messages WHERE reply_to = ? AND kind = 'result'", (task,))
        assert result.startswith("blocked: denied exec_command"), result
    wait_until(lambda: list(record.glob("*.env")), what="the notice")
    seen = "".join(p.read_text() for p in record.iterdir())
    assert "AGENT_BRIDGE_NOTICE_EVENT=approval_waiting" in seen
    assert canary not in seen and COMMAND not in seen
