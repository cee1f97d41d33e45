"""dispatcher/clis/codex/profile.py: a permission profile in Codex 0.171.0's terms (pure
functions: flags, config, the PreToolUse hook's decisions), one case per level plus refusals."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dispatcher.clis import command_gate
from dispatcher.clis.codex import profile as codex
from dispatcher.core.permissions import PermissionProfile

BASE = ["--json", "--ephemeral", "--skip-git-repo-check"]
from harness import PROJECT


def profile(level: str, **extra) -> PermissionProfile:
    return PermissionProfile.model_validate({"level": level, **extra})


@pytest.mark.parametrize(
    ("level", "flags", "mode", "shell", "hook"),
    [
        ("bridge", [*BASE, "--ignore-rules"], None, False, False),
        (
            "read",
            [*BASE, "--ignore-rules", "--sandbox", "read-only", "--dangerously-bypass-hook-trust"],
            "read-only",
            True,
            True,
        ),
        (
            "edit",
            [*BASE, "--ignore-rules", "--sandbox", "workspace-write", "--dangerously-bypass-hook-trust"],
            "workspace-write",
            True,
            True,
        ),
        ("project", BASE, None, True, False),
    ],
)
def test_each_level_s_flags_sandbox_and_features(level, flags, mode, shell, hook):
    p = profile(level)
    assert codex.exec_flags(p) == flags
    assert codex.sandbox_mode(p) == mode
    assert codex.features(p) == {"shell_tool": shell, "hooks": hook}
    assert codex.uses_hook(p) is hook


def test_shell_adds_extra_dirs_as_writable_roots_and_read_does_not():
    shell = profile("shell", allow_commands=["git status"], extra_dirs=["/srv/data", "~/notes"])
    flags = codex.exec_flags(shell)
    assert flags[:6] == [*BASE, "--ignore-rules", "--sandbox", "workspace-write"]
    assert flags[flags.index("--add-dir") :] == [
        "--add-dir",
        "/srv/data",
        "--add-dir",
        str(Path("~/notes").expanduser()),
    ]
    assert "--add-dir" not in codex.exec_flags(profile("read", extra_dirs=["/srv/data"]))


GIT_ENV_TABLE = [
    "[shell_environment_policy.set]",
    'GIT_CONFIG_NOSYSTEM = "1"',
    'GIT_CONFIG_COUNT = "4"',
    'GIT_CONFIG_KEY_0 = "core.fsmonitor"',
    'GIT_CONFIG_VALUE_0 = "false"',
    'GIT_CONFIG_KEY_1 = "core.hooksPath"',
    'GIT_CONFIG_VALUE_1 = "/dev/null"',
    'GIT_CONFIG_KEY_2 = "core.pager"',
    'GIT_CONFIG_VALUE_2 = "cat"',
    'GIT_CONFIG_KEY_3 = "safe.bareRepository"',
    'GIT_CONFIG_VALUE_3 = "explicit"',
]


def test_config_tables_per_level(tmp_path):
    assert codex.config_tables(profile("bridge"), tmp_path) == []  # no shell tool: no git
    assert codex.config_tables(profile("read"), tmp_path) == GIT_ENV_TABLE
    assert codex.config_tables(profile("edit"), tmp_path) == [
        *GIT_ENV_TABLE,
        "[sandbox_workspace_write]",
        "exclude_slash_tmp = true",
        "exclude_tmpdir_env_var = false",
        "network_access = false",
    ]
    assert codex.config_tables(profile("project"), Path('/w/a "b"')) == [
        *GIT_ENV_TABLE,
        '[projects."/w/a \\"b\\""]',
        'trust_level = "trusted"',
    ]


@pytest.mark.parametrize(
    ("command", "words"),
    [
        ("cat notes.txt", ["cat", "notes.txt"]),
        ("sed -n '1,20p' a.txt", ["sed", "-n", "1,20p", "a.txt"]),
        ('grep -n "two words" src', ["grep", "-n", "two words", "src"]),
        ("  uv run pytest -q  ", ["uv", "run", "pytest", "-q"]),
        ("cat a; rm b", None),
        ("cat a && rm b", None),
        ("cat a | sh", None),
        ("cat $HOME/x", None),
        ("cat `id`", None),
        ('cat "$(id)"', None),
        ("cat *.txt", None),
        ("cat ~/x", None),
        ("echo x > f", None),
        ("cat a\nrm b", None),
        ("cat {a,b}", None),
        ("", None),
        ("cat 'unclosed", None),
        ('cat "a\\"b"', None),
    ],
)
def test_shell_words_accepts_plain_words_only(command, words):
    assert command_gate.shell_words(command) == words


def policy(tmp_path: Path, level: str, **extra) -> dict:
    return codex.policy_document(profile(level, **extra), tmp_path / "ws", tmp_path / "attempt" / "tmp")


def event(tool: str, command: str, cwd: Path) -> dict:
    return {"hook_event_name": "PreToolUse", "tool_name": tool, "tool_input": {"command": command}, "cwd": str(cwd)}


@pytest.fixture
def ws(tmp_path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("x\n")
    (tmp_path / "outside").mkdir()
    (ws / "link").symlink_to(tmp_path / "outside")
    return ws


def patch(path: str) -> str:
    return f"*** Begin Patch\n*** Update File: {path}\n@@\n-x\n+y\n*** End Patch\n"


@pytest.mark.parametrize(
    ("level", "tool", "command", "allowed"),
    [
        # read: the read-only vocabulary on workspace paths, nothing else
        ("read", "Bash", "cat notes.txt", True),
        ("read", "Bash", "sed -n 1,5p notes.txt", True),
        ("read", "Bash", "rg -n todo .", True),
        ("read", "Bash", "sed -i s/x/y/ notes.txt", False),
        ("read", "Bash", "find . -delete", False),
        ("read", "Bash", "rg --pre=sh x .", False),
        ("read", "Bash", "rg -iz x .", False),
        ("read", "Bash", "sort -o out notes.txt", False),
        ("read", "Bash", "cat /etc/passwd", False),
        ("read", "Bash", "cat ../outside/x", False),
        ("read", "Bash", "cat link/x", False),  # a link out of the workspace is outside
        ("read", "Bash", "touch notes.txt", False),
        ("read", "Bash", "git status", False),
        ("read", "Bash", "cat notes.txt > copy", False),
        ("read", "apply_patch", patch("notes.txt"), False),
        ("read", "mcp__agent_bridge__claim_message", "", True),
        # edit: patches inside the workspace; commands still read-only
        ("edit", "apply_patch", patch("notes.txt"), True),
        ("edit", "apply_patch", patch("link/x"), False),
        ("edit", "apply_patch", patch("/etc/hosts"), False),
        ("edit", "apply_patch", "no file named", False),
        ("edit", "Bash", "touch new.txt", False),
        # shell: plus the allowed prefixes, word by word
        ("shell", "Bash", "git status", True),
        ("shell", "Bash", "git status --short", True),
        ("shell", "Bash", "uv run pytest -q tests", True),
        ("shell", "Bash", "git statusx", False),
        ("shell", "Bash", "git push", False),
        ("shell", "Bash", "git status; rm -rf /", False),
        ("shell", "Bash", "rm -rf notes.txt", False),
    ],
)
def test_the_hook_allows_exactly_what_the_level_allows(tmp_path, ws, level, tool, command, allowed):
    extra = {"allow_commands": ["git status", "uv run pytest*"]} if level == "shell" else {}
    reason = codex.hook_decision(policy(tmp_path, level, **extra), event(tool, command, ws))
    assert (reason is None) is allowed, reason
    if reason is not None:  # the reason names the tool, as denied_tools records it
        assert reason.startswith(f"denied {'exec_command' if tool == 'Bash' else 'apply_patch'}: ")


def test_extra_dirs_are_readable_at_read_and_writable_at_edit(tmp_path, ws):
    extra = tmp_path / "extra"
    extra.mkdir()
    read = policy(tmp_path, "read", extra_dirs=[str(extra)])
    edit = policy(tmp_path, "edit", extra_dirs=[str(extra)])
    assert codex.hook_decision(read, event("Bash", f"cat {extra}/a", ws)) is None
    assert codex.hook_decision(read, event("apply_patch", patch(f"{extra}/a"), ws)) is not None
    assert codex.hook_decision(edit, event("apply_patch", patch(f"{extra}/a"), ws)) is None
    assert codex.hook_decision(edit, event("Bash", f"cat {tmp_path}/outside/a", ws)) is not None


def test_a_working_directory_outside_the_workspace_is_refused(tmp_path, ws):
    assert codex.hook_decision(policy(tmp_path, "read"), event("Bash", "cat passwd", Path("/etc"))) is not None


def run_hook(tmp_path: Path, policy_doc: dict | None, stdin: str) -> dict:
    path = tmp_path / "policy.json"
    if policy_doc is not None:
        path.write_text(json.dumps(policy_doc))
    command = codex.hook_command(sys.executable, str(PROJECT), path)
    # The hook command exactly as Codex runs it: through a shell.
    done = subprocess.run(  # noqa: S602
        command,
        shell=True,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_hook_command_denies_with_codex_s_json_and_fails_closed(tmp_path, ws):
    doc = policy(tmp_path, "read")
    denied = run_hook(tmp_path, doc, json.dumps(event("Bash", "rm -rf notes.txt", ws)))
    assert denied["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert denied["hookSpecificOutput"]["permissionDecisionReason"].startswith("denied exec_command: ")
    assert run_hook(tmp_path, doc, json.dumps(event("Bash", "cat notes.txt", ws))) == {}
    # Garbage on stdin, or no policy file: deny (Codex would let a call through on a crash).
    assert run_hook(tmp_path, doc, "not json")["hookSpecificOutput"]["permissionDecision"] == "deny"
    (tmp_path / "policy.json").unlink()
    assert (
        run_hook(tmp_path, None, json.dumps(event("Bash", "cat notes.txt", ws)))["hookSpecificOutput"][
            "permissionDecision"
        ]
        == "deny"
    )


def test_hooks_json_runs_the_hook_before_every_tool():
    doc = codex.hooks_json("the command")
    assert doc == {
        "hooks": {
            "PreToolUse": [{"matcher": ".*", "hooks": [{"type": "command", "command": "the command", "timeout": 60}]}]
        }
    }


@pytest.mark.parametrize("level", ["edit", "shell"])
def test_no_patch_writes_a_git_directory_or_a_protected_path(tmp_path, ws, level):
    """Issue 28: .git at any depth, and what AGENT_BRIDGE_PROTECTED names (the bridge's files, the
    common git dir of a worktree outside the workspace), are refused even inside the workspace."""
    extra = {"allow_commands": ["git status"]} if level == "shell" else {}
    doc = codex.policy_document(profile(level, **extra), ws, tmp_path / "attempt" / "tmp", [str(ws / "cfg")])
    for path in (".git/config", ".git/hooks/pre-commit", ".git/info/attributes", "sub/.git/config", ".git", "cfg/x"):
        reason = codex.hook_decision(doc, event("apply_patch", patch(path), ws))
        assert reason is not None and reason.startswith("denied apply_patch: "), path
        assert "read-only to workers" in reason
    assert codex.hook_decision(doc, event("apply_patch", patch(".gitignore"), ws)) is None
