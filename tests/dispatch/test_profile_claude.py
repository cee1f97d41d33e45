"""dispatcher/clis/claude/profile.py: a permission profile as Claude Code 2.1.332's
flags and --settings document, one case per level, plus the refusals (an invalid profile:
exit 2; a level this machine cannot enforce: exit 78). What the real CLI does with these
flags is tests/agent_clis/test_claude_permissions.py."""

import json
import stat
import subprocess
from pathlib import Path

import pytest

from dispatcher.clis.claude import profile as profiles
from dispatcher.core.permissions import PERMISSIONS_ENV, PermissionProfile
from dispatcher.dispatch.outcome import PERMISSIONS_UNENFORCEABLE_EXIT

BRIDGE_ALLOWED = ",".join(
    f"mcp__agent_bridge__{t}"
    for t in (
        "send_message",
        "receive_messages",
        "claim_message",
        "release_message",
        "mark_read",
        "get_message",
        "conversation",
    )
)
BRIDGE_DISALLOWED = "mcp__agent_bridge__start_conversation,mcp__agent_bridge__listener"
POLICY = ["--permission-mode", "dontAsk", "--permission-prompts", "none"]


def profile(level: str, **fields) -> PermissionProfile:
    return PermissionProfile(level=level, **{k: tuple(v) for k, v in fields.items()})


def flag(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


def all_on_path(name: str) -> str:
    return f"/usr/bin/{name}"


def test_bridge_is_the_flags_of_before_profiles():
    args = profiles.claude_args(profile("bridge"), None)
    assert args == [
        "--tools",
        "",
        "--allowedTools",
        BRIDGE_ALLOWED,
        "--disallowedTools",
        BRIDGE_DISALLOWED,
        "--setting-sources",
        "user",
        *POLICY,
    ]
    assert profiles.settings(profile("bridge")) is None


GIT_DENY = ("Edit(**/.git)", "Edit(**/.git/**)")


def test_read_offers_read_search_list_and_denies_every_edit():
    p = profile("read")
    args = profiles.claude_args(p, Path("/a/claude-settings.json"))
    assert flag(args, "--tools") == "Read,Grep,Glob,Edit,Write"
    assert flag(args, "--setting-sources") == "user" and flag(args, "--settings") == "/a/claude-settings.json"
    assert profiles.settings(p) == {"permissions": {"deny": ["Edit(//**)"]}}
    assert "Bash" not in flag(args, "--tools") and "--add-dir" not in args


@pytest.mark.parametrize("level", ["bridge", "read", "edit", "shell"])
def test_ask_sends_what_no_rule_decides_to_the_approval_prompt(level):
    """Issue 33: with ``ask`` the no-prompt policy gives way to the bridge's permission prompt tool."""
    fields = {"allow_commands": ("git status",)} if level == "shell" else {}
    asking = PermissionProfile(level=level, ask=True, **fields)
    args = profiles.claude_args(asking, None)
    assert args[-4:] == [
        "--permission-mode",
        "default",
        "--permission-prompt-tool",
        "mcp__agent_bridge__approval_prompt",
    ]
    assert "--permission-prompts" not in args and "dontAsk" not in args
    assert args[:-4] == profiles.claude_args(PermissionProfile(level=level, **fields), None)[:-4]


def test_ask_at_read_asks_for_edits_but_never_for_protected_paths():
    rules = profiles.settings(PermissionProfile(level="read", ask=True), protected=("/bridge/store",))
    assert rules == {"permissions": {"deny": [*GIT_DENY, "Edit(//bridge/store)", "Edit(//bridge/store/**)"]}}
    assert "Edit(//**)" not in rules["permissions"]["deny"]


def test_edit_allows_edits_inside_the_workspace_only():
    p = profile("edit")
    assert flag(profiles.claude_args(p, Path("/s")), "--tools") == "Read,Grep,Glob,Edit,Write"
    assert profiles.settings(p) == {
        "permissions": {"allow": ["Edit(./**)"], "deny": list(GIT_DENY)}
    }  # never a bare "Edit"
    assert not profiles.uses_sandbox(p)


def test_shell_adds_bash_one_prefix_rule_per_command_and_the_sandbox():
    p = profile("shell", allow_commands=["uv run pytest*", "git diff *", "git status"])
    args = profiles.claude_args(p, Path("/s"))
    assert flag(args, "--tools") == "Read,Grep,Glob,Edit,Write,Bash"
    doc = profiles.settings(p)
    assert doc["permissions"] == {
        "allow": ["Edit(./**)", "Bash(uv run pytest:*)", "Bash(git diff:*)", "Bash(git status:*)"],
        "deny": list(GIT_DENY),
    }
    assert doc["sandbox"] == {
        "enabled": True,
        "failIfUnavailable": True,
        "allowUnsandboxedCommands": False,
        "autoAllowBashIfSandboxed": False,
    }
    assert not any(rule in ("Bash", "Edit") or rule.startswith("Bash(*") for rule in doc["permissions"]["allow"])


def test_project_leaves_tools_rules_and_settings_sources_to_the_workspace():
    p = profile("project")
    args = profiles.claude_args(p, None)
    assert "--tools" not in args and "--setting-sources" not in args and "--settings" not in args
    assert flag(args, "--allowedTools") == BRIDGE_ALLOWED and args[-4:] == POLICY
    # Only deny rules: what no worker may write (a deny beats the workspace's allow rules).
    assert profiles.settings(p) == {"permissions": {"deny": list(GIT_DENY)}} and not profiles.uses_sandbox(p)


def test_every_writing_level_denies_edits_of_any_git_dir_and_of_the_protected_paths():
    protected = ("/home/u/.config/agent-bridge/config.json", "/w/repo/.git", "/odd/(dir)")
    for level in ("edit", "project"):
        deny = profiles.settings(profile(level), protected)["permissions"]["deny"]
        assert deny == [
            *GIT_DENY,
            "Edit(//home/u/.config/agent-bridge/config.json)",
            "Edit(//home/u/.config/agent-bridge/config.json/**)",
            "Edit(//w/repo/.git)",
            "Edit(//w/repo/.git/**)",
        ]  # a path Claude would read as a pattern gets no rule (it lies outside every writable dir)
    assert profiles.settings(profile("read"), protected) == {"permissions": {"deny": ["Edit(//**)"]}}
    assert profiles.settings(profile("bridge"), protected) is None


@pytest.mark.parametrize("level", ["read", "edit", "shell", "project"])
def test_extra_dirs_are_added_and_writable_only_from_edit_up(level, tmp_path):
    extra = {"allow_commands": ["git status"]} if level == "shell" else {}
    p = profile(level, extra_dirs=["/data/shared", "~/notes/"], **extra)
    args = profiles.claude_args(p, None)
    home = str(Path("~").expanduser())
    assert [args[i + 1] for i, a in enumerate(args) if a == "--add-dir"] == ["/data/shared", f"{home}/notes"]
    rules = (profiles.settings(p) or {}).get("permissions", {}).get("allow", [])
    dir_rules = [r for r in rules if r.startswith("Edit(//")]
    assert dir_rules == (["Edit(//data/shared/**)", f"Edit(/{home}/notes/**)"] if p.writes else [])
    for i, a in enumerate(args):  # a variadic flag never swallows the next one's value
        if a in ("--add-dir", "--tools", "--allowedTools", "--disallowedTools"):
            assert args[i + 2].startswith("--")


@pytest.mark.parametrize("directory", ["/data/*", "/data/(x)", "/data/[ab]", "/da\nta"])
def test_an_extra_dir_claude_would_read_as_a_pattern_is_unenforceable(directory):
    with pytest.raises(profiles.Unenforceable, match="extra_dirs"):
        profiles.settings(profile("edit", extra_dirs=[directory]))
    with pytest.raises(profiles.Unenforceable):
        profiles.permission_rules(profile("read", extra_dirs=[directory]))


def test_prepare_writes_a_private_settings_file_and_the_flags(tmp_path):
    p = profile("shell", allow_commands=["git status"])
    workspace = tmp_path / "ws"
    env = {PERMISSIONS_ENV: p.to_env()}
    args = profiles.prepare(env, tmp_path, which=all_on_path, probe=lambda _: True, workspace=workspace)
    written, policy = tmp_path / profiles.SETTINGS_FILE, tmp_path / profiles.POLICY_FILE
    assert flag(args, "--settings") == str(written)
    assert json.loads(written.read_text()) == profiles.settings(p, hook=profiles.hook_command(policy))
    assert json.loads(policy.read_text()) == {
        "profile": json.loads(p.to_env()),
        "workspace": str(workspace),
        "protected": [],
    }
    assert stat.S_IMODE(written.stat().st_mode) == stat.S_IMODE(policy.stat().st_mode) == 0o600


def test_shell_runs_the_bash_hook_before_every_bash_call_and_no_other_level_does():
    shell = profiles.settings(profile("shell", allow_commands=["git status"]), hook="the hook")
    assert shell["hooks"] == {
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "the hook", "timeout": 60}]}]
    }
    for level in ("read", "edit"):
        assert "hooks" not in (profiles.settings(profile(level), hook="the hook") or {})


@pytest.fixture
def ws(tmp_path) -> Path:
    """A workspace with a link to a directory outside it, which holds a secret."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("canary\n")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "link").symlink_to(outside)
    (ws / "notes.txt").write_text("line\n")
    return ws


def bash(command: str, cwd: Path, tool: str = "Bash") -> dict:
    tool_input = {"command": command, "description": "d"}
    return {"hook_event_name": "PreToolUse", "tool_name": tool, "tool_input": tool_input, "cwd": str(cwd)}


@pytest.mark.parametrize(
    ("command", "allowed"),
    [
        ("touch ran.txt", True),  # an allowed prefix, any arguments
        ("git status --short", True),
        ("cat notes.txt", True),  # a read shape
        ("sed -n 1,5p notes.txt", True),
        ("grep -R canary .", False),  # Claude's own read-only list ran these, through the link out
        ("rg -L canary .", False),
        ("grep -rn canary link", False),
        ("find -L . -name secret.txt", False),
        ("wc --files0-from=notes.txt", False),
        ("sed -n 1p -e '1e id' notes.txt", False),
        ("touch a && grep -R canary .", False),  # compound: every part would need to pass; refused
        ("touch a; id", False),
        ("git status | sh", False),
        ("git status > canary.txt", False),  # a redirect: Claude's rules allowed it, as a write in the workspace
        ("FOO=1 touch x", False),
        ("rm -rf notes.txt", False),
    ],
)
def test_the_bash_hook_allows_allowed_prefixes_and_read_shapes_only(tmp_path, ws, command, allowed):
    p = profile("shell", allow_commands=["touch", "git status"])
    policy = profiles.command_gate.policy_document(p, ws)
    reason = profiles.hook_decision(policy, bash(command, ws))
    assert (reason is None) is allowed, reason
    if reason is not None:
        assert reason.startswith("denied Bash: ")


def test_the_bash_hook_leaves_other_tools_to_claude(tmp_path, ws):
    policy = profiles.command_gate.policy_document(profile("shell", allow_commands=["touch"]), ws)
    assert profiles.hook_decision(policy, bash("anything", ws, tool="Read")) is None


def test_the_bash_hook_command_denies_in_claude_s_json_and_fails_closed(tmp_path, ws):
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(profiles.command_gate.policy_document(profile("shell", allow_commands=["touch"]), ws)))

    def run(stdin: str) -> dict:
        done = subprocess.run(  # noqa: S602 - the command line exactly as Claude runs it: through a shell
            profiles.hook_command(policy), shell=True, input=stdin, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    denied = run(json.dumps(bash("grep -R canary .", ws)))["hookSpecificOutput"]
    assert denied["permissionDecision"] == "deny" and "option -R is not allowed" in denied["permissionDecisionReason"]
    assert run(json.dumps(bash("touch x", ws))) == {}
    assert run("not json")["hookSpecificOutput"]["permissionDecision"] == "deny"


def test_no_profile_in_the_environment_is_bridge(tmp_path):
    assert profiles.prepare({}, tmp_path, which=lambda _: None) == profiles.claude_args(profile("bridge"), None)
    assert not (tmp_path / profiles.SETTINGS_FILE).exists()


@pytest.mark.parametrize("missing", [["socat"], ["bwrap"], ["bwrap", "socat"]])
def test_shell_without_the_sandbox_helpers_is_refused(tmp_path, missing):
    env = {PERMISSIONS_ENV: profile("shell", allow_commands=["git status"]).to_env()}
    with pytest.raises(profiles.Unenforceable, match=" and ".join(missing)):
        profiles.prepare(env, tmp_path, which=lambda n: None if n in missing else all_on_path(n))
    assert not (tmp_path / profiles.SETTINGS_FILE).exists()
    # the levels without Bash do not need it
    env = {PERMISSIONS_ENV: profile("edit").to_env()}
    assert profiles.prepare(env, tmp_path, which=lambda n: None) is not None


def test_shell_with_a_bubblewrap_that_cannot_make_namespaces_is_refused(tmp_path):
    env = {PERMISSIONS_ENV: profile("shell", allow_commands=["git status"]).to_env()}
    with pytest.raises(profiles.Unenforceable, match="namespaces"):
        profiles.prepare(env, tmp_path, which=all_on_path, probe=lambda _: False)


def test_the_launch_exit_codes_and_one_line(tmp_path, capsys, monkeypatch):
    """dispatcher/dispatch/launch.py: 2 for an invalid profile, 78 for a level Claude cannot
    enforce, each with one line; a second launch into the same attempt dir finds the names taken."""
    from dispatcher.dispatch import launch

    fake = tmp_path / "claude"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o700)
    request = tmp_path / "request"
    request.write_text("task\n")
    env = {
        "PATH": "/usr/bin:/bin",
        "CLAUDE_BIN": str(fake),
        "AGENT_ID": "claude",
        "AGENT_BRIDGE_MESSAGE_ID": "1",
        "AGENT_BRIDGE_DB": str(tmp_path / "db"),
        "AGENT_BRIDGE_CONFIG": str(tmp_path / "config.json"),
        "AGENT_BRIDGE_PROJECT": str(profiles.PROJECT_ROOT),
        "AGENT_BRIDGE_PYTHON": "/usr/bin/python3",
        "AGENT_BRIDGE_ATTEMPT_DIR": str(tmp_path),
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv(PERMISSIONS_ENV, '{"level": "root"}')
    assert launch.main("claude", str(request), "claude_headless.sh") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("claude_headless.sh: AGENT_BRIDGE_PERMISSIONS")
    monkeypatch.setenv(PERMISSIONS_ENV, profile("edit", extra_dirs=["/x/*"]).to_env())
    assert launch.main("claude", str(request), "claude_headless.sh") == PERMISSIONS_UNENFORCEABLE_EXIT == 78
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot be enforced" in err
    (tmp_path / "claude-mcp-config.json").write_text("planted")
    monkeypatch.setenv(PERMISSIONS_ENV, profile("read").to_env())
    assert launch.main("claude", str(request), "claude_headless.sh") == 2
    assert (tmp_path / "claude-mcp-config.json").read_text() == "planted"
