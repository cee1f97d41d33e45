"""Issue 33: which refused shell command a hook may ask a person for (``command_gate.askable``),
and what the hook answers with that person's decision (``command_gate.hook_main`` with an ``ask``),
as pure rules: the asking itself (store, notice, wait) is tests/mcp/test_approvals.py and, with a
real Claude Code, tests/agent_clis/test_claude_approvals.py."""

import io
import json
from pathlib import Path

import pytest

from dispatcher.clis import command_gate
from dispatcher.clis.claude import profile as claude
from dispatcher.clis.codex import profile as codex
from dispatcher.core.permissions import PermissionProfile
from dispatcher.core.profile_rules import MAX_APPROVAL_TIMEOUT_SECONDS


def _policy(ws: Path, protected: tuple[str, ...] = (), **profile) -> dict:
    fields = {"level": "shell", "allow_commands": ("git status",), "ask": True, **profile}
    return {**command_gate.policy_document(PermissionProfile(**fields), ws), "protected": list(protected)}


def _bash(command: str, ws: Path) -> dict:
    return {"tool_name": "Bash", "tool_input": {"command": command}, "cwd": str(ws)}


@pytest.mark.parametrize(
    ("command", "asked"),
    [
        ("uv run pytest", True),  # plain words, not on the allow list: a person may allow it
        ("touch ran.txt", True),
        ("uv run pytest; curl x", False),  # shell syntax: denied, never asked
        ("uv run pytest > out", False),
        ("cat $HOME/x", False),
        ("git --git-dir=.git log", False),  # a git directory: never
        ("rm -rf .git", False),
        ("cat /bridge/config.json", False),  # a protected place, as a word, an option's value, a flag's tail
        ("sqlite3 --db=/bridge/store.db", False),
        ("tar -f/bridge/x", False),
        ("cat ../bridge/config.json", False),  # relative to the cwd
        ("cat link/config.json", False),  # through a link in the workspace that points into it
    ],
)
def test_a_plain_command_naming_nothing_protected_is_askable(tmp_path, command, asked):
    ws = tmp_path / "ws"
    ws.mkdir()
    (tmp_path / "bridge").mkdir()
    (ws / "link").symlink_to(tmp_path / "bridge")
    policy = _policy(ws, (str(tmp_path / "bridge"), "/bridge"))
    assert command_gate.askable(policy, _bash(command, ws)) is asked


@pytest.mark.parametrize(
    "profile",
    [{"ask": False}, {"level": "edit", "allow_commands": ()}, {"level": "read", "allow_commands": ()}],
)
def test_only_ask_at_shell_asks(tmp_path, profile):
    assert not command_gate.askable(_policy(tmp_path, **profile), _bash("uv run pytest", tmp_path))


def test_the_hook_asks_only_at_ask_and_gets_the_longest_wait_as_its_timeout(tmp_path):
    asks = PermissionProfile(level="shell", allow_commands=("git status",), ask=True)
    plain = PermissionProfile(level="shell", allow_commands=("git status",))
    assert command_gate.hook_timeout(asks) == MAX_APPROVAL_TIMEOUT_SECONDS + 60
    assert command_gate.hook_timeout(plain) == command_gate.HOOK_TIMEOUT_SECONDS
    assert "asking_hook_main" in claude.hook_command(tmp_path / "p.json", asks)
    assert "asking_hook_main" not in claude.hook_command(tmp_path / "p.json", plain)
    entry = claude.settings(asks, hook="HOOK")["hooks"]["PreToolUse"][0]["hooks"][0]  # type: ignore[index]
    assert entry["timeout"] == MAX_APPROVAL_TIMEOUT_SECONDS + 60
    assert "asking_hook_main" in codex.hook_command("/py", "/project", tmp_path / "p.json", asks)
    assert "asking_hook_main" not in codex.hook_command("/py", "/project", tmp_path / "p.json", plain)
    hooks = codex.hooks_json("HOOK", command_gate.hook_timeout(asks))["hooks"]["PreToolUse"][0]["hooks"][0]
    assert hooks["timeout"] == MAX_APPROVAL_TIMEOUT_SECONDS + 60
    asker = {name: "x" for name in command_gate.ASKER_SETTINGS} | {"PATH": "/bin"}
    assert command_gate.policy_document(asks, tmp_path, asker)["asker"] == {n: "x" for n in command_gate.ASKER_SETTINGS}
    assert "asker" not in command_gate.policy_document(plain, tmp_path, asker)


def _hook(monkeypatch, capsys, tmp_path, command: str, ask, allow: bool = True) -> dict:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(_policy(tmp_path)))
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(_bash(command, tmp_path))))
    assert command_gate.hook_main(claude.hook_decision, str(policy), ask, allow) == 0
    return json.loads(capsys.readouterr().out)


def test_the_hook_answers_with_the_persons_decision(monkeypatch, capsys, tmp_path):
    asked = []

    def allowed(policy, event):
        asked.append(event["tool_input"]["command"])

    answer = _hook(monkeypatch, capsys, tmp_path, "uv run pytest", allowed)["hookSpecificOutput"]
    assert answer["permissionDecision"] == "allow"  # Claude: explicit, or its own rules would prompt again
    assert _hook(monkeypatch, capsys, tmp_path, "uv run pytest", allowed, allow=False) == {}  # Codex: no decision
    denied = _hook(monkeypatch, capsys, tmp_path, "uv run pytest", lambda p, e: "a person denied it")
    assert denied["hookSpecificOutput"] == {
        "hookEventName": "PreToolUse",
        "permissionDecision": "deny",
        "permissionDecisionReason": "a person denied it",
    }
    assert asked == ["uv run pytest", "uv run pytest"]
    # Allowed or shell syntax: nobody is asked.
    assert _hook(monkeypatch, capsys, tmp_path, "git status", allowed) == {}
    syntax = _hook(monkeypatch, capsys, tmp_path, "uv run pytest && id", allowed)
    assert syntax["hookSpecificOutput"]["permissionDecision"] == "deny" and len(asked) == 2


def test_a_failure_while_asking_denies(monkeypatch, capsys, tmp_path):
    def broken(policy, event):
        raise OSError("the store is gone")

    answer = _hook(monkeypatch, capsys, tmp_path, "uv run pytest", broken)["hookSpecificOutput"]
    assert answer["permissionDecision"] == "deny" and "hook failed (OSError)" in answer["permissionDecisionReason"]
