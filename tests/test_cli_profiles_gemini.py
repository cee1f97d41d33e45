"""dispatcher/dispatch/cli_profiles/gemini.py: a permission profile in Gemini CLI's terms, one
case per level and the refusals (pure functions; the real CLI is in test_permissions_gemini.py)."""

from pathlib import Path

import pytest

from dispatcher.dispatch.cli_profiles import gemini
from dispatcher.permissions import WORKER_BRIDGE_TOOLS, PermissionProfile

BRIDGE = [f"mcp_agent_bridge_{tool}" for tool in WORKER_BRIDGE_TOOLS]
READ = ["read_file", "list_directory", "glob", "grep_search"]
TMP = Path("/attempt/tmp")


def test_bridge_offers_the_bridge_worker_tools_only_and_adds_no_flag():
    profile = PermissionProfile(level="bridge")
    assert gemini.core_tools(profile) == BRIDGE
    assert not {"mcp_agent_bridge_listener", "mcp_agent_bridge_start_conversation"} & set(gemini.core_tools(profile))
    assert gemini.settings_keys(profile, TMP) == {"tools": {"core": BRIDGE}}
    assert gemini.cli_args(profile) == []  # exactly the launcher's flags from before profiles
    assert not gemini.sandboxed(profile) and not gemini.trusts_workspace_settings(profile)


def test_read_adds_the_read_only_file_tools_and_the_extra_dirs():
    profile = PermissionProfile(level="read", extra_dirs=("/data/a", "/data/b"))
    assert gemini.core_tools(profile) == BRIDGE + READ
    assert gemini.settings_keys(profile, TMP) == {"tools": {"core": BRIDGE + READ}}
    assert gemini.cli_args(profile) == ["--approval-mode", "default", "--include-directories", "/data/a",
                                        "--include-directories", "/data/b"]
    assert not gemini.sandboxed(profile)


def test_edit_adds_write_file_and_replace_with_auto_edit_never_yolo():
    profile = PermissionProfile(level="edit")
    assert gemini.core_tools(profile) == BRIDGE + READ + ["write_file", "replace"]
    assert gemini.cli_args(profile) == ["--approval-mode", "auto_edit"]
    assert "run_shell_command" not in " ".join(gemini.core_tools(profile))
    assert not gemini.sandboxed(profile)


def test_shell_adds_one_prefix_entry_per_allowed_command_and_the_sandbox():
    profile = PermissionProfile(level="shell", allow_commands=("uv run pytest*", "git diff *", "git status"),
                                extra_dirs=("/cache/uv",))
    core = gemini.core_tools(profile)
    assert core == BRIDGE + READ + ["write_file", "replace", "run_shell_command(uv run pytest)",
                                    "run_shell_command(git diff)", "run_shell_command(git status)"]
    assert "run_shell_command" not in core  # never the bare tool: that would allow any command
    assert gemini.settings_keys(profile, TMP) == {
        "tools": {"core": core, "sandboxAllowedPaths": ["/attempt/tmp", "/cache/uv"], "sandboxNetworkAccess": False},
        "security": {"toolSandboxing": True},
    }
    assert gemini.cli_args(profile) == ["--approval-mode", "auto_edit", "--include-directories", "/cache/uv"]
    assert gemini.sandboxed(profile)


def test_project_leaves_the_tools_to_the_workspace_settings():
    profile = PermissionProfile(level="project")
    assert gemini.core_tools(profile) is None
    assert gemini.settings_keys(profile, TMP) == {}
    assert gemini.cli_args(profile) == []
    assert gemini.trusts_workspace_settings(profile) and not gemini.sandboxed(profile)


def test_an_extra_dir_with_a_comma_is_refused_as_unenforceable():
    # Gemini splits --include-directories on commas: it would include two other directories.
    with pytest.raises(gemini.Unenforceable, match="comma"):
        gemini.cli_args(PermissionProfile(level="edit", extra_dirs=("/data/a,b",)))


def test_no_level_ever_asks_for_yolo():
    profiles = [PermissionProfile(level=level) for level in ("bridge", "read", "edit", "project")]
    profiles.append(PermissionProfile(level="shell", allow_commands=("git status",)))
    for profile in profiles:
        assert "yolo" not in gemini.cli_args(profile) and "--yolo" not in gemini.cli_args(profile)
