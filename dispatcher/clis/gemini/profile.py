"""A permission profile in Gemini CLI 0.61.0's own terms (``launchers/gemini_headless.sh``).

What enforces each level (checked end to end in tests/agent_clis/test_gemini_permissions.py):

- ``bridge``: ``tools.core`` in the worker's private settings.json lists the bridge's worker
  tools only. ``tools.core`` is an allowlist: Gemini turns it into policy rules (allow these,
  deny every other tool), and a tool denied outright is not even declared to the model.
- ``read``: the same allowlist plus the read-only file tools (``READ_TOOLS``). Gemini's file
  tools refuse any path outside the workspace and ``--include-directories`` ("Path not in
  workspace", symlinks resolved first). No shell, no web, no sub-agents, no memory tool.
- ``edit``: plus ``write_file`` and ``replace``, with ``--approval-mode auto_edit`` (which adds
  Gemini's own allowed-path checker to both); same path refusal.
- ``shell``: plus one ``run_shell_command(<prefix>)`` entry per allowed command. Gemini's policy
  engine allows a command only when every part of it (``a && b``, ``a; b``, pipes) starts with
  an allowed prefix followed by a word boundary; anything else is "denied by policy". The
  commands run in Gemini's tool sandbox (``security.toolSandboxing``: bubblewrap, read-only
  ``/``, writable workspace, private ``/tmp``, no network), so an allowed command cannot write
  outside the workspace, the attempt's TMPDIR and the ``extra_dirs``. The launcher refuses the
  level (exit 78) when ``bwrap`` does not work here.
- ``project``: no ``tools.core``, no approval mode, and the workspace trusted through
  ``GEMINI_CLI_TRUST_WORKSPACE=true`` so its ``.gemini/settings.json`` is loaded and decides,
  as when a person runs ``gemini`` there (Gemini's own headless defaults: read-only tools run,
  write and shell tools need a rule that allows them).

The workspace's ``.gemini/settings.json`` is NOT loaded at the other levels: Gemini 0.61.0
loads settings before it reads ``--skip-trust``, so the folder counts as untrusted for settings
(workspace settings, hooks, ``.env`` beyond the auth keys) and trusted for the rest of the run
(MCP servers, approval modes). The launcher therefore also drops an inherited
``GEMINI_CLI_TRUST_WORKSPACE``, which would make Gemini load the workspace's settings.
"""

import json
import os
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dispatcher.clis import launch
from dispatcher.clis.base import Enforcement
from dispatcher.core.permissions import WORKER_BRIDGE_TOOLS, PermissionProfile
from dispatcher.core.protected import write_refused

# Gemini's read-only file tools (read-only.toml of 0.61.0 lists them, plus web search and the
# sub-agents, which a worker does not get). Not read_many_files: 0.61.0 does not register it in
# a headless run, so listing it would offer nothing.
READ_TOOLS = ("read_file", "list_directory", "glob", "grep_search")
EDIT_TOOLS = ("write_file", "replace")
SHELL_TOOL = "run_shell_command"
BRIDGE_SERVER = "agent_bridge"
# The environment variable that makes Gemini trust (and so load the settings of) the workspace.
TRUST_ENV = "GEMINI_CLI_TRUST_WORKSPACE"


class Unenforceable(launch.Unenforceable):
    """A profile Gemini cannot express (the launcher exits 78 with this message)."""


def bridge_tool_names() -> list[str]:
    """The bridge's worker tools as Gemini names them (``mcp_<server>_<tool>``)."""
    return [f"mcp_{BRIDGE_SERVER}_{tool}" for tool in WORKER_BRIDGE_TOOLS]


def shell_entries(profile: PermissionProfile) -> list[str]:
    """One ``run_shell_command(<words>)`` entry per allowed command (a prefix of words)."""
    return [f"{SHELL_TOOL}({' '.join(words)})" for words in profile.command_prefixes()]


def core_tools(profile: PermissionProfile) -> list[str] | None:
    """``tools.core``: every tool the worker is offered, by exact name; None at ``project``."""
    if profile.level == "project":
        return None
    tools = bridge_tool_names()
    if profile.level in ("read", "edit", "shell"):
        tools += READ_TOOLS
    if profile.level in ("edit", "shell"):
        tools += EDIT_TOOLS
    if profile.level == "shell":
        tools += shell_entries(profile)
    return tools


def sandboxed(profile: PermissionProfile) -> bool:
    """Whether the level runs commands, and so needs Gemini's tool sandbox (bubblewrap)."""
    return profile.level == "shell"


def settings_keys(profile: PermissionProfile, attempt_tmp: Path) -> dict[str, Any]:
    """The keys this profile adds to the worker's private settings.json (merged by the launcher)."""
    keys: dict[str, Any] = {}
    core = core_tools(profile)
    if core is not None:
        keys["tools"] = {"core": core}
    if sandboxed(profile):
        keys["security"] = {"toolSandboxing": True}
        keys.setdefault("tools", {}).update(
            {
                # Writable inside the sandbox besides the workspace: the attempt's TMPDIR (the shell
                # tool keeps its own files there) and the extra directories.
                "sandboxAllowedPaths": [str(attempt_tmp), *profile.extra_dirs],
                "sandboxNetworkAccess": False,
            }
        )
    return keys


def hook_command(python: str, project: str, protected: Sequence[str]) -> str:
    """The BeforeTool hook's command line: ``hook_main`` on the run's protected paths."""
    boot = (
        "import sys; sys.path.insert(0, sys.argv[1]); "
        "from dispatcher.clis.gemini.profile import hook_main; sys.exit(hook_main(sys.argv[2]))"
    )
    return shlex.join([python, "-I", "-c", boot, project, json.dumps(list(protected))])


def hooks_keys(profile: PermissionProfile, command: str) -> dict[str, Any]:
    """The ``hooks`` section at the levels that write: the BeforeTool hook before every tool call."""
    if not profile.writes:
        return {}
    return {"BeforeTool": [{"matcher": ".*", "hooks": [{"type": "command", "command": command, "timeout": 60000}]}]}


def hook_decision(protected: Sequence[str], event: Mapping[str, Any], cwd: str) -> str | None:
    """Why the hook refuses this call (a write into what no worker may write), or None (pure)."""
    if event.get("tool_name") not in EDIT_TOOLS:
        return None
    tool_input = event.get("tool_input")
    path = tool_input.get("file_path") if isinstance(tool_input, dict) else None
    if not isinstance(path, str) or not path or "\0" in path:
        return f"{event.get('tool_name')} refused: no plain file_path"
    return write_refused(os.path.join(cwd, os.path.expanduser(path)), protected)  # noqa: PTH118


def hook_main(protected_json: str) -> int:
    """The hook itself: Gemini's event on stdin; exit 2 with the reason refuses the call. Gemini
    0.61.0 lets a call through on any other exit code, so every error it can catch refuses."""
    try:
        event = json.loads(sys.stdin.read())
        cwd = str(event.get("cwd") or Path.cwd())
        reason = hook_decision(json.loads(protected_json), event, cwd)
    except Exception as exc:  # noqa: BLE001 - any failure must deny, never allow
        reason = f"the permission hook failed ({type(exc).__name__})"
    if reason is None:
        return 0
    print(f"Denied by the Agent Bridge permission profile: {reason}", file=sys.stderr)  # noqa: T201 - Gemini's reason
    return 2


def cli_args(profile: PermissionProfile) -> list[str]:
    """The flags this profile adds to ``gemini -p``."""
    args: list[str] = []
    if profile.level == "read":
        args += ["--approval-mode", "default"]
    elif profile.level in ("edit", "shell"):
        args += ["--approval-mode", "auto_edit"]  # never yolo: that would allow every tool
    for directory in profile.extra_dirs:
        if "," in directory:  # Gemini splits --include-directories values on commas
            raise Unenforceable(
                f"extra_dirs entry {directory!r} contains a comma, which Gemini CLI cannot take; "
                "rename or link the directory"
            )
        args += ["--include-directories", directory]
    return args


def trusts_workspace_settings(profile: PermissionProfile) -> bool:
    """Whether Gemini may load the workspace's own ``.gemini/settings.json`` (only at ``project``)."""
    return profile.level == "project"


def enforcement(profile: PermissionProfile, which: Callable[[str], str | None]) -> Enforcement | None:
    """Doctor's view: bubblewrap missing for a sandboxed level; ``project`` runs unconfined."""
    needs = [name for name in ("bwrap",) if which(name) is None] if sandboxed(profile) else []
    if needs:
        return Enforcement("needs", tuple(needs))
    return Enforcement("unconfined") if profile.level == "project" else None
