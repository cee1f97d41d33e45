"""dispatcher/clis/gemini/profile.py: a permission profile in Gemini CLI's terms, one
case per level and the refusals (pure functions; the real CLI is in tests/agent_clis/test_gemini_permissions.py)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from harness import PROJECT

from dispatcher.clis.gemini import profile as gemini
from dispatcher.core.permissions import WORKER_BRIDGE_TOOLS, PermissionProfile

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
    assert gemini.cli_args(profile) == [
        "--approval-mode",
        "default",
        "--include-directories",
        "/data/a",
        "--include-directories",
        "/data/b",
    ]
    assert not gemini.sandboxed(profile)


def test_edit_adds_write_file_and_replace_with_auto_edit_never_yolo():
    profile = PermissionProfile(level="edit")
    assert gemini.core_tools(profile) == BRIDGE + READ + ["write_file", "replace"]
    assert gemini.cli_args(profile) == ["--approval-mode", "auto_edit"]
    assert "run_shell_command" not in " ".join(gemini.core_tools(profile))
    assert not gemini.sandboxed(profile)


def test_shell_adds_one_prefix_entry_per_allowed_command_and_the_sandbox():
    profile = PermissionProfile(
        level="shell", allow_commands=("uv run pytest*", "git diff *", "git status"), extra_dirs=("/cache/uv",)
    )
    core = gemini.core_tools(profile)
    assert core == BRIDGE + READ + [
        "write_file",
        "replace",
        "run_shell_command(uv run pytest)",
        "run_shell_command(git diff)",
        "run_shell_command(git status)",
    ]
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


# The launcher's side of it, with a fake `gemini` that records its argv and environment.
LAUNCHER = PROJECT / "launchers" / "gemini_headless.sh"
FAKE_GEMINI = """#!{python}
import json, os, sys
with open(os.environ["FAKE_RECORD"], "w") as fh:
    json.dump({{"argv": sys.argv[1:], "trust": os.environ.get("GEMINI_CLI_TRUST_WORKSPACE")}}, fh)
"""


@pytest.fixture
def launch(tmp_path):
    import json
    import os
    import subprocess
    import sys

    fake = tmp_path / "gemini"
    fake.write_text(FAKE_GEMINI.format(python=sys.executable))
    fake.chmod(0o755)
    (tmp_path / "ws").mkdir()
    request = tmp_path / "request.txt"
    request.write_text("the task\n")
    runs = iter(range(1, 100))

    def run(permissions: dict | str | None, path: str | None = None) -> tuple[subprocess.CompletedProcess, dict]:
        attempt = tmp_path / f"attempt-{next(runs)}"
        attempt.mkdir(mode=0o700)
        env = {
            "PATH": path or os.environ["PATH"],
            "HOME": str(tmp_path),
            "AGENT_ID": "gemini",
            "AGENT_BRIDGE_MESSAGE_ID": "7",
            "AGENT_BRIDGE_DB": str(tmp_path / "db"),
            "AGENT_BRIDGE_CONFIG": str(tmp_path / "config.json"),
            "AGENT_BRIDGE_PROJECT": str(LAUNCHER.parents[1]),
            "AGENT_BRIDGE_PYTHON": sys.executable,
            "AGENT_BRIDGE_ATTEMPT_DIR": str(attempt),
            "GEMINI_BIN": str(fake),
            "FAKE_RECORD": str(tmp_path / "record.json"),
            "GEMINI_CLI_TRUST_WORKSPACE": "true",
        }  # inherited: only project may keep it
        if permissions is not None:
            env["AGENT_BRIDGE_PERMISSIONS"] = permissions if isinstance(permissions, str) else json.dumps(permissions)
        (tmp_path / "record.json").unlink(missing_ok=True)
        done = subprocess.run(
            [str(LAUNCHER), str(request)],
            cwd=tmp_path / "ws",
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        record = json.loads((tmp_path / "record.json").read_text()) if (tmp_path / "record.json").exists() else {}
        settings = attempt / "gemini-home" / ".gemini" / "settings.json"
        record["settings"] = json.loads(settings.read_text()) if settings.exists() else None
        return done, record

    return run


def test_the_launcher_refuses_an_invalid_profile_with_exit_2_and_one_line(launch):
    done, record = launch({"level": "root"})
    assert done.returncode == 2 and record == {"settings": None}
    assert done.stderr.count("\n") == 1 and "AGENT_BRIDGE_PERMISSIONS" in done.stderr


def test_the_launcher_refuses_shell_without_bwrap_with_exit_78(launch, tmp_path):
    import os

    bin_dir = tmp_path / "bin"  # everything the launcher needs, but no bwrap
    bin_dir.mkdir()
    for tool in ("bash", "env", "mkdir", "dirname", "ln"):
        os.symlink(f"/usr/bin/{tool}" if Path(f"/usr/bin/{tool}").exists() else f"/bin/{tool}", bin_dir / tool)
    done, record = launch({"level": "shell", "allow_commands": ["git status"]}, path=str(bin_dir))
    assert done.returncode == 78 and "argv" not in record, done.stderr
    assert done.stderr.count("\n") == 1 and "bubblewrap" in done.stderr


@pytest.mark.parametrize(
    ("level", "flags", "trust"),
    [
        (None, [], None),  # no profile: exactly the flags from before profiles
        ("read", ["--approval-mode", "default"], None),
        ("project", [], "true"),
    ],
)
def test_the_launcher_passes_the_profile_to_gemini(launch, level, flags, trust):
    done, record = launch({"level": level} if level else None)
    assert done.returncode == 0, done.stderr
    assert record["argv"][:3] == ["--skip-trust", "--allowed-mcp-server-names", "agent_bridge"]
    assert record["argv"][3:-4] == flags and record["argv"][-4:-1] == ["-o", "json", "-p"]
    assert record["trust"] == trust  # an inherited GEMINI_CLI_TRUST_WORKSPACE is dropped below project
    core = record["settings"]["tools"].get("core") if "tools" in record["settings"] else None
    assert core == gemini.core_tools(PermissionProfile(level=level or "bridge"))


def test_a_before_tool_hook_guards_the_levels_that_write():
    command = gemini.hook_command("/py", "/project", ["/p"])
    for level in ("bridge", "read"):
        assert gemini.hooks_keys(PermissionProfile(level=level), command) == {}
    for profile in (PermissionProfile(level="edit"), PermissionProfile(level="project")):
        [group] = gemini.hooks_keys(profile, command)["BeforeTool"]
        assert group == {"matcher": ".*", "hooks": [{"type": "command", "command": command, "timeout": 60000}]}


@pytest.mark.parametrize(
    ("tool", "path", "refused"),
    [
        ("write_file", ".git/config", True),
        ("replace", "/ws/.git/hooks/pre-commit", True),
        ("write_file", "sub/.git/config", True),
        ("write_file", "/p/config.json", True),
        ("write_file", "notes.txt", False),
        ("read_file", ".git/config", False),
        ("run_shell_command", ".git/config", False),
    ],
)
def test_the_hook_refuses_writes_into_git_and_the_protected_paths(tool, path, refused):
    event = {"tool_name": tool, "tool_input": {"file_path": path}}
    assert (gemini.hook_decision(["/p"], event, "/ws") is not None) is refused


def test_the_hook_refuses_with_exit_2_and_fails_closed(tmp_path):
    command = gemini.hook_command(sys.executable, str(PROJECT), [str(tmp_path / "p")])
    for event, code in (
        ({"tool_name": "write_file", "tool_input": {"file_path": str(tmp_path / "ws/.git/config")}}, 2),
        ({"tool_name": "write_file", "tool_input": {"file_path": str(tmp_path / "ws/notes.txt")}}, 0),
        ("not json", 2),
    ):
        done = subprocess.run(  # noqa: S602 - the hook's own command line, as Gemini runs it
            command,
            shell=True,
            input=event if isinstance(event, str) else json.dumps(event),
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == code, done.stderr
        assert (done.stderr.startswith("Denied by the Agent Bridge permission profile: ")) is (code == 2)
