"""dispatcher/dispatch/cli_profiles/claude.py: a permission profile as Claude Code 2.1.332's
flags and --settings document, one case per level, plus the refusals (an invalid profile:
exit 2; a level this machine cannot enforce: exit 78). What the real CLI does with these
flags is tests/agent_clis/test_claude_permissions.py."""

import json
import stat
from pathlib import Path

import pytest

from dispatcher.core.permissions import PERMISSIONS_ENV, PermissionProfile
from dispatcher.dispatch.cli_profiles import claude as profiles
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
    args = profiles.prepare({PERMISSIONS_ENV: p.to_env()}, tmp_path, which=all_on_path, probe=lambda _: True)
    written = tmp_path / profiles.SETTINGS_FILE
    assert flag(args, "--settings") == str(written)
    assert json.loads(written.read_text()) == profiles.settings(p)
    assert stat.S_IMODE(written.stat().st_mode) == 0o600


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


def test_launcher_main_exit_codes_and_one_line(tmp_path, capsys):
    assert profiles.launcher_main({PERMISSIONS_ENV: '{"level": "root"}'}, str(tmp_path)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("claude_headless.sh: AGENT_BRIDGE_PERMISSIONS")
    env = {PERMISSIONS_ENV: profile("edit", extra_dirs=["/x/*"]).to_env()}
    assert profiles.launcher_main(env, str(tmp_path)) == PERMISSIONS_UNENFORCEABLE_EXIT == 78
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot be enforced" in err
    assert profiles.launcher_main({PERMISSIONS_ENV: profile("read").to_env()}, str(tmp_path)) == 0
    written = (tmp_path / profiles.ARGS_FILE).read_text().split("\0")
    assert written[-1] == "" and written[:-1] == profiles.claude_args(
        profile("read"), tmp_path / "claude-settings.json"
    )
    # a second run into the same attempt dir finds the names taken: never written through
    assert profiles.launcher_main({PERMISSIONS_ENV: profile("read").to_env()}, str(tmp_path)) == 2
