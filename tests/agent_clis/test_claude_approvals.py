"""Issue 33: a real Claude Code 2.1.332 worker with ``ask: true``, driven by the scripted model
(tests/models/anthropic.py, MODE=workspace); a person answers with the real ``agent-bridge``
command.

At level ``read`` it reads a file of its workspace and Edits it: Claude routes the Edit's
permission prompt to the bridge server's ``approval_prompt`` (--permission-prompt-tool).
At level ``shell`` it runs ``touch ran.txt`` (standing for ``uv run pytest``), which its
``allow_commands`` do not hold: the Bash hook records the request itself, the agent's
notify_command is told (nothing of the task or the command), and the hook waits. Either way:

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


SHELL = {"level": "shell", "allow_commands": ["git status"], "ask": True}
COMMAND = "touch ran.txt"  # plain words, not on the allow list: asked for


def _record_notices(root: Path) -> tuple[Path, list[str]]:
    """A notify_command that records its arguments and environment, one file pair per notice."""
    record = root / "notices"
    record.mkdir()
    script = root / "record.sh"
    script.write_text(f'#!/bin/sh\nf={record}/$$; printf "%s\\n" "$@" > $f.args; env > $f.env\n')
    script.chmod(0o755)
    return record, [str(script), "{summary}"]


def _run(
    root: Path, model, claude_bin, answer: tuple[str, ...] | None, level: str = "read", runs: int = 1
) -> tuple[dict, str, dict]:
    """One task on a bridge of its own: (the finished attempt, notes.txt after it, its result
    message, the approvals and what the notices got). ``level`` read: an Edit is asked for;
    shell: ``COMMAND``, ``runs`` times."""
    workspace = root / "ws"
    workspace.mkdir(parents=True)
    (workspace / "notes.txt").write_text(NOTES)
    claude_env = claude_worker_env(bridge_env(root, root / "config.json"), root, model.base_url, claude_bin)
    record, notify = _record_notices(root)
    claude = {
        "auto": True,
        "launcher": str(LAUNCHER),
        "worker_timeout_seconds": 150,
        "workspace": str(workspace),
        "permissions": SHELL if level == "shell" else {"level": "read", "ask": True},
        "approval_timeout_seconds": 60 if answer else 3,
        "notify_command": notify,
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
        canary = f"Workspace task {os.urandom(6).hex()}."
        lines = [canary, "MODE=workspace", "TOOLKIT=claude", f"DO={json.dumps({'read': notes})}"]
        if level == "shell":
            lines += [f"DO={json.dumps({'run': COMMAND})}"] * runs
        else:
            lines.append(f"DO={json.dumps({'edit': notes, 'old': 'line one', 'new': 'line one edited'})}")
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
                tool = "Bash" if level == "shell" else "Edit"
                assert sql(db_path, "SELECT tool FROM approvals WHERE id = ?", (approval_id,)) == [(tool,)]
                decided = cli(claude_env, *answer[:1], str(approval_id), *answer[1:])
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
        replies["approvals"] = sql(
            db_path, "SELECT tool, decision FROM approvals WHERE message_id = ? ORDER BY id", (task,)
        )
        replies["inputs"] = [
            json.loads(i) for (i,) in sql(db_path, "SELECT input FROM approvals WHERE message_id = ?", (task,))
        ]
        replies["ran"] = (workspace / "ran.txt").exists()
        count = len(replies["approvals"])
        wait_until(lambda: len(list(record.glob("*.env"))) == count, what=f"{count} notices")
        replies["notices"] = "".join(p.read_text() for p in sorted(record.iterdir()))
        replies["canary"] = canary
        return row, (workspace / "notes.txt").read_text(), replies
    finally:
        sender.close()
        end_listeners([listener])


def test_approved_the_edit_happens_and_the_task_succeeds(tmp_path, model, claude_bin):
    row, notes, replies = _run(tmp_path, model, claude_bin, ("approve",))
    assert row["outcome"] == "succeeded", (row, replies)
    assert replies["approvals"] == [("Edit", "allow_once")]
    assert notes == "line one edited\n"


def test_denied_the_file_stays_and_the_task_is_blocked_naming_the_tool(tmp_path, model, claude_bin):
    row, notes, replies = _run(tmp_path, model, claude_bin, ("deny",))
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


def test_a_shell_command_outside_the_allow_list_is_asked_for_and_approved_for_the_attempt(
    tmp_path_factory, model, claude_bin
):
    """The Done-when of issue 33: the person's phone (a notify_command) hears that the worker asks,
    nothing of the task or the command; one ``agent-bridge approve ID --for-attempt`` and the
    command runs, the same command later in the attempt runs without a new request, and the task
    succeeds."""
    root = tmp_path_factory.mktemp("sh")  # short: Claude's sandbox sockets live below it (107 bytes at most)
    row, _, replies = _run(root, model, claude_bin, ("approve", "--for-attempt"), level="shell", runs=2)
    assert row["outcome"] == "succeeded", (row, replies)
    assert replies["approvals"] == [("Bash", "allow_attempt")]  # one request for both calls
    assert replies["inputs"] == [{"command": COMMAND}]  # recorded by the hook (Claude's prompt adds a description)
    assert replies["ran"]
    assert "AGENT_BRIDGE_NOTICE_EVENT=approval_waiting" in replies["notices"]
    assert "agent-bridge approvals show" in replies["notices"]
    assert replies["canary"] not in replies["notices"] and COMMAND not in replies["notices"]


def test_a_denied_shell_command_does_not_run_and_the_task_is_blocked_naming_bash(tmp_path_factory, model, claude_bin):
    row, _, replies = _run(tmp_path_factory.mktemp("sh"), model, claude_bin, ("deny",), level="shell")
    assert row["outcome"] == "blocked", (row, replies)
    assert replies["approvals"] == [("Bash", "deny")]
    assert not replies["ran"]
    assert replies["result"][0][0].startswith("blocked: denied Bash")


def test_an_unanswered_shell_command_is_denied(tmp_path_factory, model, claude_bin):
    row, _, replies = _run(tmp_path_factory.mktemp("sh"), model, claude_bin, None, level="shell")
    assert row["outcome"] == "blocked", (row, replies)
    assert replies["approvals"] == [("Bash", None)]  # asked, never decided: denied at its timeout
    assert not replies["ran"]
    assert replies["result"][0][0].startswith("blocked: denied Bash")
