"""Issue 33, items 1 and 2: a worker whose profile sets ``ask`` asks a person through its bridge
server's ``approval_prompt`` (Claude Code's --permission-prompt-tool); only a person decides, with
``agent-bridge approve`` / ``deny``; a request nobody answers is denied. Over real MCP stdio
against real server.py processes, the commands as real processes, on both backends."""

import json
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from dispatch_harness import cli, record_attempt, wait_until
from harness import McpAgent, sql, write_config

from dispatcher.core.config import load_config
from dispatcher.store import open_store
from dispatcher.store.metrics import counter_totals

pytestmark = pytest.mark.both_backends

CANARY = "canary-input-9d1c-never-in-a-notice"


def _agents(ask: bool, approval_timeout: int = 600, notify: list[str] | None = None) -> dict:
    claude = {
        "auto": True,
        "launcher": "launchers/claude_headless.sh",
        "permissions": {"level": "read", "ask": ask},
        "approval_timeout_seconds": approval_timeout,
        **({"notify_command": notify} if notify else {}),
    }
    return {"claude": claude, "kimi": {"auto": False, "launcher": "launchers/kimi_headless.sh"}}


@pytest.fixture
def task(env, db_path, config_path, kimi):
    """A task to claude with its attempt recorded; yields (message id, token)."""

    def make(**config) -> tuple[int, str]:
        write_config(config_path, _agents(**config))
        message_id = kimi.ok("send_message", recipient="claude", text="please edit", kind="task")["id"]
        token = secrets.token_hex(16)
        conn = open_store(db_path)
        try:
            record_attempt(conn, message_id, load_config(config_path), token)
        finally:
            conn.close()
        return message_id, token

    return make


def _worker(env, bridge_root, message_id: int, token: str) -> McpAgent:
    bound = {
        "AGENT_BRIDGE_ROLE": "worker",
        "AGENT_BRIDGE_MESSAGE_ID": str(message_id),
        "AGENT_BRIDGE_WORKER_TOKEN": token,
    }
    return McpAgent("claude", {**env, **bound}, bridge_root / "worker.stderr")


def _request(db_path, message_id: int, count: int = 1) -> int:
    rows = wait_until(
        lambda: (
            (r := sql(db_path, "SELECT id FROM approvals WHERE message_id = ? ORDER BY id", (message_id,)))
            and len(r) >= count
            and r
        ),
        what="the approval request",
    )
    return int(rows[-1][0])


def _answer(future) -> dict:
    result = McpAgent._convert(future.result(120))
    assert not result.is_error, result.text
    assert result.data is None  # one text block, no structured result: what Claude Code reads
    return json.loads(result.text)


def test_only_a_worker_that_may_ask_is_offered_the_prompt_and_no_tool_decides(env, bridge_root, task, claude):
    session_tools = {t.name for t in claude.list_tools()}
    plain = _worker(env, bridge_root, *task(ask=False))
    try:
        plain_tools = {t.name for t in plain.list_tools()}
    finally:
        plain.close()
    asking = _worker(env, bridge_root, *task(ask=True))
    try:
        asking_tools = {t.name for t in asking.list_tools()}
    finally:
        asking.close()
    assert "approval_prompt" not in session_tools | plain_tools
    assert asking_tools - plain_tools == {"approval_prompt"}
    # No tool of any role decides: none is named so, and (tests/test_layers.py) no MCP module calls the decision.
    for name in session_tools | asking_tools:
        assert not any(word in name for word in ("approve", "deny", "decide", "decision")), name


def _approval_notices(db_path) -> int:
    """The approval_waiting notices started for claude, by the store's counter (docs/metrics.md)."""
    conn = open_store(db_path)
    try:
        return counter_totals(conn, "notices", "claude").get(("claude", "approval_waiting", "started"), 0)
    finally:
        conn.close()


def test_approved_once_then_for_the_attempt_then_denied(env, bridge_root, db_path, task, tmp_path):
    message_id, token = task(ask=True)
    counted = _approval_notices(db_path)
    record = tmp_path / "notices"
    record.mkdir()
    script = tmp_path / "record.sh"
    script.write_text(f'#!/bin/sh\nf={record}/$$; printf "%s\\n" "$@" > $f.args; env > $f.env\n')
    script.chmod(0o755)
    write_config(Path(env["AGENT_BRIDGE_CONFIG"]), _agents(ask=True, notify=[str(script), "{summary}"]))
    worker = _worker(env, bridge_root, message_id, token)
    try:
        edit = {"file_path": "/w/a.txt", "old_string": "a", "new_string": CANARY}
        pending = worker.call_async("approval_prompt", tool_name="Edit", input=edit, tool_use_id="toolu_1")
        first = _request(db_path, message_id)
        listed = cli(env, "approvals", "--json")
        assert listed.returncode == 0, listed.stderr
        (item,) = [i for i in json.loads(listed.stdout) if i["id"] == first]
        assert (item["agent"], item["task_id"], item["tool"], item["state"]) == (
            "claude",
            message_id,
            "Edit",
            "waiting",
        )
        assert CANARY not in listed.stdout  # the list never shows the input
        line = cli(env, "statusline").stdout
        assert "[claude]" in line and "1 approval waiting: agent-bridge approvals" in line and CANARY not in line
        shown = cli(env, "approvals", "show", str(first))
        assert json.loads(shown.stdout)["input"] == edit  # `show` does
        assert cli(env, "approve", str(first)).returncode == 0
        assert _answer(pending) == {"behavior": "allow", "updatedInput": edit}
        # A second approve of the same request changes nothing.
        again = cli(env, "approve", str(first))
        assert again.returncode != 0 and "approval_closed" in again.stderr
        # Once means once: the same tool asks again; allowed for the attempt, it asks no more.
        pending = worker.call_async("approval_prompt", tool_name="Edit", input=edit)
        second = _request(db_path, message_id, 2)
        assert cli(env, "approve", str(second), "--for-attempt").returncode == 0
        assert _answer(pending)["behavior"] == "allow"
        assert _answer(worker.call_async("approval_prompt", tool_name="Edit", input=edit))["behavior"] == "allow"
        assert len(sql(db_path, "SELECT id FROM approvals WHERE message_id = ?", (message_id,))) == 2
        # Another tool is asked for on its own, and denied.
        pending = worker.call_async("approval_prompt", tool_name="Bash", input={"command": "uv run pytest"})
        third = _request(db_path, message_id, 3)
        assert cli(env, "deny", str(third)).returncode == 0
        denied = _answer(pending)
        assert denied["behavior"] == "deny" and "blocked: denied Bash" in denied["message"]
    finally:
        worker.close()
    # Every decision is on the attempt: who, when, what.
    report = cli(env, "show", str(message_id), "--json")
    decided = json.loads(report.stdout)["dispatch"]["approvals"]
    assert [(a["tool"], a["decision"]) for a in decided] == [
        ("Edit", "allow_once"),
        ("Edit", "allow_attempt"),
        ("Bash", "deny"),
    ]
    assert all(a["decided_by"] and a["decided_at"] for a in decided)
    assert f"approval #{third} Bash: deny by " in cli(env, "show", str(message_id)).stdout
    # The notices (one per request) said that an approval waits, and nothing of the input.
    wait_until(lambda: len(list(record.glob("*.env"))) == 3, what="three notices")
    seen = "".join(p.read_text() for p in record.iterdir())
    assert "AGENT_BRIDGE_NOTICE_EVENT=approval_waiting" in seen
    assert f"agent-bridge approvals show {first}" in seen
    assert CANARY not in seen and "uv run pytest" not in seen
    assert _approval_notices(db_path) == counted + 3  # each counted by the worker's server that started it


def test_a_request_nobody_answers_is_denied(env, bridge_root, db_path, task):
    message_id, token = task(ask=True, approval_timeout=1)
    worker = _worker(env, bridge_root, message_id, token)
    try:
        answer = _answer(worker.call_async("approval_prompt", tool_name="Write", input={"file_path": "/w/b"}))
    finally:
        worker.close()
    assert answer["behavior"] == "deny" and "no person answered" in answer["message"]
    (approval_id,) = sql(db_path, "SELECT id FROM approvals WHERE message_id = ?", (message_id,))[0]
    late = cli(env, "approve", str(approval_id))
    assert late.returncode != 0 and "approval_closed" in late.stderr and "expired" in late.stderr
    assert cli(env, "approvals", "--json").stdout.strip() == "[]"
    unknown = cli(env, "deny", "999999")
    assert unknown.returncode != 0 and "approval_unknown" in unknown.stderr


def _shell_hook(env, tmp_path: Path, message_id: int, token: str) -> tuple[str, Path]:
    """The asking Bash hook's command line, as the Claude launch plan writes it for this attempt
    (level shell, ``git status`` allowed, ``ask``), and the workspace."""
    from dispatcher.clis.claude import profile as profiles  # noqa: PLC0415 - the hook's own plan
    from dispatcher.core.permissions import PermissionProfile  # noqa: PLC0415

    shell = PermissionProfile(level="shell", allow_commands=("git status",), ask=True)
    attempt_dir, workspace = tmp_path / f"attempt-{message_id}", tmp_path / "ws"
    attempt_dir.mkdir()
    workspace.mkdir(exist_ok=True)
    server_env = {
        **env,
        "AGENT_ID": "claude",
        "AGENT_BRIDGE_MESSAGE_ID": str(message_id),
        "AGENT_BRIDGE_WORKER_TOKEN": token,
    }
    files, _ = profiles.permission_plan(shell, attempt_dir, workspace, [], server_env)
    (policy,) = [f for f in files if f.path.name == profiles.POLICY_FILE]
    policy.path.write_text(policy.text)
    return profiles.hook_command(policy.path, shell), workspace


def _bash(command_line: str, workspace: Path, command: str) -> subprocess.Popen:
    event = {"tool_name": "Bash", "tool_input": {"command": command, "description": "d"}, "cwd": str(workspace)}
    proc = subprocess.Popen(  # noqa: S602 - the command line exactly as Claude runs it: through a shell
        command_line, shell=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(event))
    proc.stdin.close()
    proc.stdin = None  # written and closed: communicate() only reads
    return proc


def _decision(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return json.loads(out)["hookSpecificOutput"]


def test_the_shell_hook_asks_as_its_worker_and_only_a_person_decides(env, db_path, task, tmp_path):
    """The Bash hook at ``shell`` with ``ask`` records the request for its own attempt, waits for
    ``agent-bridge``, and answers Claude; allowed for the attempt, the same command is allowed at
    once and another one asked for again. With a token that is not its attempt's it records
    nothing and denies (it fails closed)."""
    message_id, token = task(ask=True)
    hook, workspace = _shell_hook(env, tmp_path, message_id, token)
    pending = _bash(hook, workspace, "uv run pytest")
    first = _request(db_path, message_id)
    assert sql(db_path, "SELECT tool, input FROM approvals WHERE id = ?", (first,)) == [
        ("Bash", json.dumps({"command": "uv run pytest"}))
    ]
    assert pending.poll() is None  # it waits for a person
    assert cli(env, "approve", str(first), "--for-attempt").returncode == 0
    assert _decision(pending)["permissionDecision"] == "allow"
    again = _decision(_bash(hook, workspace, "uv run pytest"))  # the same command: allowed, not asked
    assert again["permissionDecision"] == "allow"
    other = _bash(hook, workspace, "uv run ruff check")  # another command: asked for on its own
    second = _request(db_path, message_id, 2)
    assert cli(env, "deny", str(second)).returncode == 0
    denied = _decision(other)
    assert denied["permissionDecision"] == "deny" and "a person denied it" in denied["permissionDecisionReason"]
    assert "blocked: denied Bash" in denied["permissionDecisionReason"]
    # Never as another attempt: a wrong token records nothing and denies.
    forged, _ = _shell_hook(env, tmp_path, message_id + 1000, token)
    refused = _decision(_bash(forged, workspace, "uv run pytest"))
    assert refused["permissionDecision"] == "deny" and "hook failed" in refused["permissionDecisionReason"]
    assert len(sql(db_path, "SELECT id FROM approvals WHERE message_id = ?", (message_id,))) == 2


def test_the_shell_hook_counts_the_notice_it_starts(env, db_path, config_path, task):
    """A worker's shell hook (``clis.shell_approval``, a process of its own) records the request,
    starts the ``approval_waiting`` notice and counts it in the store (docs/metrics.md); nobody
    answers within its second, so the command is denied."""
    message_id, token = task(ask=True, approval_timeout=1, notify=["/bin/true", "{event}"])
    counted = _approval_notices(db_path)
    asker = {
        "AGENT_ID": "claude",
        "AGENT_BRIDGE_CONFIG": str(config_path),
        "AGENT_BRIDGE_MESSAGE_ID": str(message_id),
        "AGENT_BRIDGE_WORKER_TOKEN": token,
        "AGENT_BRIDGE_DB": str(db_path),
    }
    program = (
        "import json, sys\n"
        "from dispatcher.clis.shell_approval import ask\n"
        "print(json.dumps(ask('Bash', {'asker': json.loads(sys.argv[1])}, {'tool_input': {'command': sys.argv[2]}})))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program, json.dumps(asker), f"echo {CANARY}"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**env},
    )
    assert done.returncode == 0, done.stderr
    assert "blocked: denied Bash" in json.loads(done.stdout)
    assert _approval_notices(db_path) == counted + 1
