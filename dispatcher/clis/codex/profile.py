"""A permission profile in Codex CLI 0.171.0's own terms (``launchers/codex_headless.sh``).

Codex has no file-read tool: it reads through its shell tool (``exec_command``) and edits
through ``apply_patch`` (offered for known model slugs). So every level above ``bridge``
switches the shell tool on, and three mechanisms of Codex's own enforce the level:

- its OS **sandbox** (bubblewrap): ``read-only`` at ``read`` (no write anywhere; reads are
  NOT confined to the workspace by it), ``workspace-write`` at ``edit`` and ``shell`` (writes
  only in the workspace, the ``extra_dirs`` and a private ``TMPDIR`` in the attempt
  directory; ``/tmp`` is excluded; no network). Every command runs inside it, allowed
  ones included;
- a **PreToolUse hook** (``hook_decision``, run by Codex before each tool call, trusted for
  this run only by ``--dangerously-bypass-hook-trust``): a command must be plain words (no
  shell syntax) and either one of a few read-only commands in an exact argument shape on
  paths inside the workspace or ``extra_dirs``, or, at ``shell``, start with an
  ``allow_commands`` prefix (``command_gate``, shared with Claude; an allow list of programs
  with free arguments ran programs, e.g. sed's ``e``); ``apply_patch`` is denied at
  ``read`` and confined to the writable roots above. Everything else is denied: this is the default-deny that Codex's execpolicy rules lack
  (an unmatched command runs in the sandbox under approval ``never``, and an ``allow`` rule
  runs its command *outside* the sandbox, so the launcher writes no rules);
- its **tool list**: the bridge's worker tools only, by name, as before profiles existed.

``bridge`` is exactly the launcher's behaviour before profiles (shell off, exec's default
``read-only`` sandbox, no hook). ``project`` trusts the workspace in the private Codex home:
its ``.codex/config.toml`` and ``.codex/rules`` load (``--ignore-rules`` is dropped), and it
decides sandbox and approvals; without them Codex exec's defaults (``read-only``, ``never``)
apply. Its ``.codex/hooks.json`` runs only once trusted in a Codex TUI (never here), and the
user's own ``~/.codex/config.toml`` is not loaded at any level.
"""

import json
import re
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from dispatcher.clis import command_gate, shell_approval
from dispatcher.clis.base import Enforcement

# The one path rule of the read commands, also for apply_patch's paths.
from dispatcher.clis.read_shapes import inside as _inside
from dispatcher.core.permissions import PermissionProfile
from dispatcher.core.protected import git_environment, write_refused

# Where the launcher puts this run's policy (read by the hook) and its private TMPDIR.
POLICY_FILE = "codex-permissions.json"
TMP_DIR = "tmp"
# Codex's tool names as a PreToolUse hook sees them, and as denied_tools records them.
HOOK_SHELL = "Bash"  # the hook's name for exec_command
SHELL_TOOL = "exec_command"
PATCH_TOOL = "apply_patch"

BASE_FLAGS = ("--json", "--ephemeral", "--skip-git-repo-check")

_PATCH_PATH = re.compile(r"^\*\*\* (?:Add File|Update File|Delete File|Move to): (.+)$", re.MULTILINE)


def sandbox_mode(profile: PermissionProfile) -> str | None:
    """The ``--sandbox`` this level runs in; None: the launcher does not choose one."""
    return {"read": "read-only", "edit": "workspace-write", "shell": "workspace-write"}.get(profile.level)


def uses_hook(profile: PermissionProfile) -> bool:
    return profile.level in ("read", "edit", "shell")


def exec_flags(profile: PermissionProfile) -> list[str]:
    """``codex exec`` flags between ``exec`` and the overrides (see the launcher for each)."""
    flags = list(BASE_FLAGS)
    if profile.level != "project":
        flags.append("--ignore-rules")
    mode = sandbox_mode(profile)
    if mode:
        flags += ["--sandbox", mode]
    if uses_hook(profile):
        flags.append("--dangerously-bypass-hook-trust")
    if profile.writes and profile.level != "project":
        for directory in profile.resolved().extra_dirs:
            flags += ["--add-dir", directory]
    return flags


def features(profile: PermissionProfile) -> dict[str, bool]:
    """``[features]`` switches that differ by level (the rest stay off at every level)."""
    return {"shell_tool": profile.level != "bridge", "hooks": uses_hook(profile)}


def toml_string(value: str) -> str:
    """A TOML basic string (a JSON string, once DEL is escaped)."""
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


def config_tables(profile: PermissionProfile, workspace: Path) -> list[str]:
    """Extra config.toml tables for this level (none at ``bridge``)."""
    if profile.level == "bridge":
        return []
    # Every git the shell tool runs gets the bridge's git configuration. Given here, not only
    # inherited: Codex drops inherited variables whose names hold KEY (GIT_CONFIG_KEY_0 ...),
    # and its `set` table is applied after that filter.
    tables = [
        "[shell_environment_policy.set]",
        *(f"{name} = {toml_string(value)}" for name, value in git_environment().items()),
    ]
    if sandbox_mode(profile) == "workspace-write":
        # /tmp is not a writable root; $TMPDIR is, and the launcher points it into the attempt dir.
        tables += [
            "[sandbox_workspace_write]",
            "exclude_slash_tmp = true",
            "exclude_tmpdir_env_var = false",
            "network_access = false",
        ]
    if profile.level == "project":
        tables += [f"[projects.{toml_string(str(workspace))}]", 'trust_level = "trusted"']
    return tables


def hook_command(python: str, project: str, policy: Path, profile: PermissionProfile | None = None) -> str:
    """The PreToolUse hook's command line: this module's ``hook_main`` on the run's policy file
    (the asking hook when ``profile`` asks, ``command_gate.asks``)."""
    function = "asking_hook_main" if profile is not None and command_gate.asks(profile) else "hook_main"
    return command_gate.hook_command(python, project, policy, __name__, function)


def hooks_json(command: str, timeout: int = command_gate.HOOK_TIMEOUT_SECONDS) -> dict[str, Any]:
    """Codex's hooks.json: the hook before every tool call (it lets non-workspace tools through);
    ``timeout`` in seconds (``command_gate.hook_timeout``)."""
    entry = {"type": "command", "command": command, "timeout": timeout}
    return {"hooks": {"PreToolUse": [{"matcher": ".*", "hooks": [entry]}]}}


def policy_document(
    profile: PermissionProfile,
    workspace: Path,
    tmp_dir: Path,
    protected: Sequence[str] = (),
    asker: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """What the hook needs: the profile, the roots it may read and write, and what no patch may
    touch (``core.protected``: the bridge's files, the repository's git directory); ``asker``:
    the worker server's settings, for a hook that asks (``command_gate.policy_document``)."""
    document = command_gate.policy_document(profile, workspace, asker)
    return {**document, "tmp_dir": str(tmp_dir), "protected": list(protected)}


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def hook_decision(policy: Mapping[str, Any], event: Mapping[str, Any]) -> str | None:
    """Why the hook denies this tool call, or None to let it through (pure)."""
    profile = PermissionProfile.from_json(policy["profile"])
    workspace = Path(policy["workspace"]).resolve()
    read_roots = [workspace, *(Path(d).resolve() for d in profile.extra_dirs)]
    write_roots = [*read_roots, Path(policy["tmp_dir"]).resolve()]
    tool = event.get("tool_name")
    tool_input = _object(event.get("tool_input"))
    cwd = Path(str(event.get("cwd") or workspace))
    if tool == HOOK_SHELL:
        why = command_gate.command_refusal(policy, event)
        return None if why is None else f"denied {SHELL_TOOL}: {why}"
    if tool == PATCH_TOOL:
        if not profile.writes:
            return f"denied {PATCH_TOOL}: level {profile.level} does not edit files"
        patch = tool_input.get("command")
        paths = _PATCH_PATH.findall(patch) if isinstance(patch, str) else []
        if not paths:
            return f"denied {PATCH_TOOL}: no file named in the patch"
        for name in paths:
            if not _inside(cwd / name.strip(), write_roots):
                return f"denied {PATCH_TOOL}: writes only inside the workspace at level {profile.level}"
            if (why := write_refused(cwd / name.strip(), policy.get("protected", ()))) is not None:
                return f"denied {PATCH_TOOL}: {why}"
        return None
    return None


def hook_main(policy_path: str) -> int:
    """The hook itself (``command_gate.hook_main``): it denies on any error."""
    return command_gate.hook_main(hook_decision, policy_path)


def asking_hook_main(policy_path: str) -> int:
    """The hook with ``ask`` at ``shell``: a command refused only for the allow list is asked of a
    person (``shell_approval.ask``, recorded as the shell tool ``exec_command``); allowed, the call
    goes on with no decision (into Codex's sandbox, as an allowed command does)."""
    return command_gate.hook_main(hook_decision, policy_path, partial(shell_approval.ask, SHELL_TOOL))


def enforcement(profile: PermissionProfile, which: Callable[[str], str | None]) -> Enforcement | None:
    """Doctor's view: nothing to say before a launch (its sandbox is probed by the launch itself)."""
    return None
