"""Issue 33: a real Claude Code 2.1.332 worker at level ``read`` with ``ask: true``, driven by the
scripted model (tests/models/anthropic.py, MODE=workspace) to read a file of its workspace and
Edit it. Claude routes the Edit's permission prompt to the bridge server's ``approval_prompt``
(--permission-prompt-tool); a person answers with the real ``agent-bridge`` command:

- approved: the file changes and the task succeeds;
- denied: the file is as it was, and the task ends ``blocked`` naming the tool;
- not answered within approval_timeout_seconds: the same as denied.

The real listener, the real launchers/claude_headless.sh and worker server.py; one bridge per run."""

import json
import os
from pathlib import Path

import pytest
from cli_harness import claude_worker_env, without_cli_settings
from dispatch_harness import attempt, cli, end_listeners, start_listener, status, wait_until
from harness import PROJECT, McpAgent, bridge_env, sql, write_config
from models.anthropic import AnthropicModel

pytestmark = pytest.mark.cli

LAUNCHER = PROJECT / "launchers" / "claude_headless.sh"
RUN_DEADLINE = 180.0
NOTES = "line one\n"


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    with AnthropicModel(tmp_path_factory.mktemp("anthropic") / "requests.jsonl") as server:
        yield server


def _run(root: Path, model, claude_bin, answer: str | None) -> tuple[dict, str, dict]:
    """One task on a bridge of its own: (the finished attempt, notes.txt after it, its result message)."""
    workspace = root / "ws"
    workspace.mkdir(parents=True)
    (workspace / "notes.txt").write_text(NOTES)
    claude_env = claude_worker_env(bridge_env(root, root / "config.json"), root, model.base_url, claude_bin)
    claude = {
        "auto": True,
        "launcher": str(LAUNCHER),
        "worker_timeout_seconds": 150,
        "workspace": str(workspace),
        "permissions": {"level": "read", "ask": True},
        "approval_timeout_seconds": 60 if answer else 3,
    }
    write_config(
        Path(claude_env["AGENT_BRIDGE_CONFIG"]),
        agents={"claude": claude, "kimi": {"auto": False, "launcher": "launchers/kimi_headless.sh"}},
    )
    db_path = Path(claude_env["AGENT_BRIDGE_DB"])
    listener = start_listener(claude_env, inherited=without_cli_settings(dict(os.environ)))
    sender = McpAgent("kimi", claude_env)
    try:
        wait_until(lambda: status(claude_env)["stage"] == "idle", what="listener idle")
        notes = str(workspace / "notes.txt")
        lines = [
            f"Workspace task {os.urandom(6).hex()}.",
            "MODE=workspace",
            "TOOLKIT=claude",
            f"DO={json.dumps({'read': notes})}",
            f"DO={json.dumps({'edit': notes, 'old': 'line one', 'new': 'line one edited'})}",
        ]
        task = sender.wait_ready().ok("send_message", recipient="claude", text="\n".join(lines) + "\n", kind="task")[
            "id"
        ]
        attempt_dir = Path(claude_env["AGENT_BRIDGE_RUNTIME_DIR"]) / "attempts" / str(task)
        try:
            if answer is not None:
                (approval_id,) = wait_until(
                    lambda: sql(db_path, "SELECT id FROM approvals WHERE message_id = ?", (task,)),
                    RUN_DEADLINE,
                    what="the Edit's approval request",
                )[0]
                assert sql(db_path, "SELECT tool FROM approvals WHERE id = ?", (approval_id,)) == [("Edit",)]
                decided = cli(claude_env, answer, str(approval_id))
                assert decided.returncode == 0, decided.stderr
            row = wait_until(
                lambda: (a := attempt(db_path, task)) and a["state"] == "finished" and a,
                RUN_DEADLINE,
                what=f"the attempt on #{task} to finish",
            )
        except AssertionError as exc:
            log = (attempt_dir / "worker.log").read_text()[-3000:] if (attempt_dir / "worker.log").exists() else ""
            raise AssertionError(f"{exc}\n{log}") from None
        replies = sender.ok("get_message", message_id=task)
        replies["result"] = sql(db_path, "SELECT text FROM messages WHERE reply_to = ? AND kind = 'result'", (task,))
        replies["approvals"] = sql(db_path, "SELECT tool, decision FROM approvals WHERE message_id = ?", (task,))
        return row, (workspace / "notes.txt").read_text(), replies
    finally:
        sender.close()
        end_listeners([listener])


def test_approved_the_edit_happens_and_the_task_succeeds(tmp_path, model, claude_bin):
    row, notes, replies = _run(tmp_path, model, claude_bin, "approve")
    assert row["outcome"] == "succeeded", (row, replies)
    assert replies["approvals"] == [("Edit", "allow_once")]
    assert notes == "line one edited\n"


def test_denied_the_file_stays_and_the_task_is_blocked_naming_the_tool(tmp_path, model, claude_bin):
    row, notes, replies = _run(tmp_path, model, claude_bin, "deny")
    assert row["outcome"] == "blocked", (row, replies)
    assert replies["approvals"] == [("Edit", "deny")]
    assert notes == NOTES
    assert replies["result"][0][0].startswith("blocked: denied Edit")
    assert row["denied_tools"] == "Edit"  # the ledger names it too


def test_unanswered_is_the_same_as_denied(tmp_path, model, claude_bin):
    row, notes, replies = _run(tmp_path, model, claude_bin, None)
    assert row["outcome"] == "blocked", (row, replies)
    assert replies["approvals"] == [("Edit", None)]  # asked, never decided: denied at its timeout
    assert notes == NOTES
    assert replies["result"][0][0].startswith("blocked: denied Edit")
    assert row["denied_tools"] == "Edit"  # the ledger names it too
