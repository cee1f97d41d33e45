"""dispatcher/clis/kimi/profile.py: a permission profile in Kimi Code 2.1.0's terms (the
agent file's tools, the worker's config.toml with the PreToolUse hook) and the hook's decision,
one case per level plus the refusals. The real CLI runs in tests/agent_clis/test_kimi_permissions.py."""

import json
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from dispatcher.clis.kimi import profile as kimi
from dispatcher.core.permissions import BRIDGE_ONLY, WORKER_BRIDGE_TOOLS, PermissionProfile

BRIDGE = [f"mcp__agent_bridge__{tool}" for tool in WORKER_BRIDGE_TOOLS]
HOOK = Path(kimi.__file__).with_name("kimi_hook.py")
# The agent file launchers/kimi_headless.sh wrote before profiles existed, byte for byte.
BRIDGE_AGENT_FILE = (
    "---\nname: agent-bridge-worker\n"
    "description: One-shot Agent Bridge worker limited to the agent_bridge MCP tools and Read.\ntools:\n  - Read\n"
    + "".join(f"  - {name}\n" for name in BRIDGE)
    + """\
---
${base_prompt}

You are running as a one-shot, non-interactive Agent Bridge worker. Your only tools are
the agent_bridge MCP tools and Read. Nobody is watching this session: do not ask
questions; report results and problems through the agent_bridge tools.
"""
)


def profile(level: str, **extra) -> PermissionProfile:
    return PermissionProfile(level=level, **extra)


def front_matter_tools(text: str) -> list[str]:
    front = text.split("---")[1]
    assert ": " not in front.split("description: ", 1)[1].splitlines()[0]  # a plain YAML scalar
    return [line.removeprefix("  - ") for line in front.splitlines() if line.startswith("  - ")]


@pytest.fixture
def layout(tmp_path: Path) -> dict[str, Path]:
    ws, outside, extra = tmp_path / "ws", tmp_path / "outside", tmp_path / "extra"
    for d in (ws, outside, extra):
        d.mkdir()
    (ws / "link").symlink_to(outside, target_is_directory=True)
    (ws / "file-link").symlink_to(outside / "secret.txt")
    request = tmp_path / "attempt" / "request.md"
    request.parent.mkdir()
    request.write_text("task")
    return {"ws": ws, "outside": outside, "extra": extra, "request": request, "tmp": tmp_path}


def policy(layout: dict, level: str, **extra) -> kimi.HookPolicy:
    return kimi.hook_policy(profile(level, **extra), layout["ws"], layout["request"])


# -- the tools per level ------------------------------------------------------------------


def test_bridge_keeps_the_agent_file_of_before_profiles_byte_for_byte():
    assert kimi.agent_file(BRIDGE_ONLY) == BRIDGE_AGENT_FILE


@pytest.mark.parametrize(
    ("level", "builtin"),
    [
        ("bridge", ["Read"]),
        ("read", ["Read", "Glob", "Grep"]),
        ("edit", ["Read", "Glob", "Grep", "Write", "Edit"]),
        ("shell", ["Read", "Glob", "Grep", "Write", "Edit", "Bash"]),
    ],
)
def test_each_level_lists_its_tools_then_the_bridge_tools(level, builtin):
    extra = {"allow_commands": ("git status",)} if level == "shell" else {}
    text = kimi.agent_file(profile(level, **extra))
    assert front_matter_tools(text) == [*builtin, *BRIDGE]
    assert "mcp__agent_bridge__listener" not in text and "start_conversation" not in text
    assert "${base_prompt}" in text


def test_project_is_refused_as_unenforceable():
    with pytest.raises(kimi.Unenforceable, match="level project cannot be enforced by Kimi Code 2.1.0"):
        kimi.agent_file(profile("project"))
    with pytest.raises(kimi.Unenforceable):
        kimi.hook_policy(profile("project"), "/ws", "/req")


def test_the_policy_resolves_roots_and_writes_only_from_edit_up(layout):
    read = policy(layout, "read", extra_dirs=(str(layout["extra"]),))
    assert read.read_roots == (str(layout["ws"].resolve()), str(layout["extra"].resolve()))
    assert read.write_roots == () and read.commands == ()
    edit = policy(layout, "edit", extra_dirs=(str(layout["extra"]),))
    assert edit.write_roots == edit.read_roots
    shell = policy(layout, "shell", allow_commands=("uv run pytest*", "git status"))
    assert shell.commands == (("uv", "run", "pytest"), ("git", "status"))
    assert kimi.HookPolicy.from_json(shell.to_json()) == shell


# -- the worker's config.toml -------------------------------------------------------------


def test_the_worker_config_keeps_the_users_settings_and_appends_the_hook():
    command = kimi.hook_command(
        "/venv/bin/python",
        HOOK,
        kimi.HookPolicy(
            level="read",
            workspace="/ws",
            read_roots=("/ws",),
            write_roots=(),
            request_file="/r",
            tools=("Read",),
            commands=(),
        ),
    )
    user = '[loop_control]\nmax_attempts_per_step = 2\n\n[[hooks]]\nevent = "Stop"\ncommand = "true"'
    config = tomllib.loads(kimi.worker_config(user, command))
    assert config["loop_control"] == {"max_attempts_per_step": 2}
    assert [h["event"] for h in config["hooks"]] == ["Stop", "PreToolUse"]
    assert config["hooks"][1] == {"event": "PreToolUse", "command": command, "timeout": 300}
    assert tomllib.loads(kimi.worker_config(None, command))["hooks"][0]["command"] == command
    argv = shlex.split(command)
    assert argv[:3] == ["/venv/bin/python", "-I", str(HOOK)] and json.loads(argv[3])["level"] == "read"


@pytest.mark.parametrize("user", ["hooks = []\n", "[hooks]\nx = 1\n", "not toml = = 1\n"])
def test_a_user_config_the_hook_cannot_join_is_refused(user):
    with pytest.raises(kimi.Unenforceable):
        kimi.worker_config(user, "python hook.py")


# -- the hook's decision ------------------------------------------------------------------


def test_bridge_tools_pass_and_tools_outside_the_level_are_refused(layout):
    read = policy(layout, "read")
    assert kimi.check_call(read, "mcp__agent_bridge__claim_message", {"message_id": 1}) is None
    for tool in ("Write", "Edit", "Bash", "mcp__agent_bridge__listener", "FetchURL"):
        assert kimi.check_call(read, tool, {"path": str(layout["ws"] / "a")}) is not None, tool


@pytest.mark.parametrize(
    ("path", "allowed"),
    [
        ("ws/notes.txt", True),
        ("notes.txt", True),
        ("ws/sub/deeper.txt", True),
        ("extra/x.txt", True),
        ("attempt/request.md", True),
        ("attempt/other.md", False),
        ("outside/secret.txt", False),
        ("ws/../outside/secret.txt", False),
        ("ws/link/secret.txt", False),
        ("ws/file-link", False),
        ("~/.ssh/id_rsa", False),
        ("kimi-file://attachment", False),
        ("/etc/passwd", False),
    ],
)
def test_read_stays_in_the_workspace_extra_dirs_and_the_request_file(layout, path, allowed):
    p = policy(layout, "read", extra_dirs=(str(layout["extra"]),))
    raw = path if path.startswith(("~", "kimi-file:", "/", "notes")) else str(layout["tmp"] / path)
    assert (kimi.check_call(p, "Read", {"path": raw}) is None) == allowed


def test_glob_and_grep_stay_below_the_workspace(layout):
    p = policy(layout, "read")
    assert kimi.check_call(p, "Glob", {"pattern": "**/*.py"}) is None
    assert kimi.check_call(p, "Grep", {"pattern": "x"}) is None
    assert kimi.check_call(p, "Grep", {"pattern": "x", "path": str(layout["ws"])}) is None
    assert kimi.check_call(p, "Grep", {"pattern": "x", "path": str(layout["outside"])}) is not None
    for pattern in ("/etc/*", "../*", "a/../../*", "~/*"):
        assert kimi.check_call(p, "Glob", {"pattern": pattern}) is not None, pattern
    assert kimi.check_call(p, "Glob", {"pattern": "*", "path": str(layout["ws"] / "link")}) is not None


@pytest.mark.parametrize("level", ["edit", "shell"])
def test_writes_stay_in_the_workspace_and_extra_dirs(layout, level):
    extra = {"allow_commands": ("git status",)} if level == "shell" else {}
    p = policy(layout, level, extra_dirs=(str(layout["extra"]),), **extra)
    for tool in ("Write", "Edit"):
        assert kimi.check_call(p, tool, {"path": str(layout["ws"] / "new.txt"), "content": ""}) is None
        assert kimi.check_call(p, tool, {"path": str(layout["extra"] / "n.txt"), "content": ""}) is None
        for bad in (
            layout["outside"] / "n.txt",
            layout["ws"] / "link" / "n.txt",
            layout["ws"] / "file-link",
            layout["request"],
        ):
            assert kimi.check_call(p, tool, {"path": str(bad), "content": ""}) is not None, (tool, bad)


def test_read_level_writes_nowhere_even_in_its_extra_dirs(layout):
    p = policy(layout, "read", extra_dirs=(str(layout["extra"]),))
    assert p.write_roots == ()


@pytest.mark.parametrize(
    ("command", "allowed"),
    [
        ("git status", True),
        ("git status --short", True),
        ("uv run pytest tests/test_x.py -q", True),
        ("uv run pytest", True),
        ("git statusx", False),
        ("git", False),
        ("uv run", False),
        ("rm -rf canary.txt", False),
        ("git status; rm -rf /", False),
        ("git status && rm x", False),
        ("git status | sh", False),
        ("git status > /tmp/x", False),
        ("git status $(rm x)", False),
        ("git status `rm x`", False),
        ("git status\nrm x", False),
        ("git  status", False),
        (" git status", False),
        ("git status 'a b'", False),
        ("git status ~/x", False),
        ("git status *", False),
        ("", False),
    ],
)
def test_shell_runs_only_plain_words_that_start_with_an_allowed_command(layout, command, allowed):
    p = policy(layout, "shell", allow_commands=("git status", "uv run pytest*"))
    assert (kimi.check_call(p, "Bash", {"command": command}) is None) == allowed


def test_shell_commands_run_only_in_the_workspace(layout):
    p = policy(layout, "shell", allow_commands=("git status",))
    assert kimi.check_call(p, "Bash", {"command": "git status", "cwd": str(layout["ws"])}) is None
    assert kimi.check_call(p, "Bash", {"command": "git status", "cwd": str(layout["outside"])}) is not None


# -- the hook as Kimi runs it ---------------------------------------------------------------


def run_hook(p: kimi.HookPolicy | str, event: object) -> subprocess.CompletedProcess:
    policy_json = p.to_json() if isinstance(p, kimi.HookPolicy) else p
    return subprocess.run(
        [sys.executable, "-I", str(HOOK), policy_json],
        input=json.dumps(event),
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
    )


def test_the_hook_allows_with_0_and_refuses_with_2_and_one_line_naming_only_the_tool(layout):
    p = policy(layout, "edit")
    ok = run_hook(p, {"tool_name": "Write", "tool_input": {"path": str(layout["ws"] / "a"), "content": "x"}})
    assert (ok.returncode, ok.stderr) == (0, "")
    secret = str(layout["outside"] / "SECRET-PATH-1234")
    no = run_hook(p, {"tool_name": "Write", "tool_input": {"path": secret, "content": "x"}})
    assert no.returncode == 2 and no.stderr.count("\n") == 1 and "SECRET-PATH-1234" not in no.stderr
    found = kimi.DENIAL_PATTERN.match(no.stderr)
    assert found and found.group(1) == "Write"


@pytest.mark.parametrize(
    ("policy_json", "event"),
    [
        ("not json", {"tool_name": "Read", "tool_input": {}}),
        (None, "not an event"),
        (None, {"tool_name": "Read"}),
    ],
)
def test_the_hook_fails_closed(layout, policy_json, event):
    done = run_hook(policy_json or policy(layout, "read"), event)
    assert done.returncode == 2 and done.stderr.startswith(kimi.DENIAL_PREFIX)


@pytest.mark.parametrize("level", ["edit", "shell"])
def test_the_hook_refuses_writes_into_any_git_directory_and_the_protected_paths(layout, level):
    """Issue 28: Write and Edit never reach .git (at any depth, through a link too) nor what
    AGENT_BRIDGE_PROTECTED names, even inside the workspace; reading them is not refused."""
    ws = layout["ws"]
    (ws / "to-git").symlink_to(ws / ".git", target_is_directory=True)
    extra = {"allow_commands": ["git status"]} if level == "shell" else {}
    hook = kimi.hook_policy(profile(level, **extra), ws, layout["request"], [str(ws / "cfg")])
    assert kimi.HookPolicy.from_json(hook.to_json()) == hook
    for path in (".git/config", ".git/hooks/pre-commit", ".git/info/x", "sub/.git/config", "to-git/config", "cfg/a"):
        for tool in ("Write", "Edit"):
            reason = kimi.check_call(hook, tool, {"path": path, "content": "x"})
            assert reason is not None and "read-only to workers" in reason, (tool, path)
    assert kimi.check_call(hook, "Write", {"path": ".gitignore", "content": "x"}) is None
    assert kimi.check_call(hook, "Read", {"path": ".git/config"}) is None
