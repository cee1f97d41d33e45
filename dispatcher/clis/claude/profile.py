"""A permission profile in Claude Code 2.1.332's own terms (launchers/claude_headless.sh).

What enforces each level (observed with the pinned binary, as root; docs/launchers.md):

- every level: ``--permission-mode dontAsk`` with ``--permission-prompts none`` (anything no
  rule allows is denied, never asked), the seven worker bridge tools pre-approved by name and
  the other bridge tools not offered (``--allowedTools`` / ``--disallowedTools``). Never
  ``acceptEdits`` (it let a ``Bash`` call run that no rule allowed) nor ``bypassPermissions``;
- every level but ``project``: ``--setting-sources user``, so the workspace's own
  ``.claude/settings.json`` and ``settings.local.json`` (allow rules, hooks, sandbox switches)
  are not loaded; the user's own settings are (their choice, not the task author's);
- ``bridge``: ``--tools ""``, no built-in tool at all (as before profiles existed);
- ``read``: the tool list ``Read, Grep, Glob`` plus ``Edit, Write``, which a deny rule
  ``Edit(//**)`` (it covers ``Write`` too, and a deny beats any allow rule of any source)
  refuses on every path: so a worker that tries to edit is *denied* by the CLI, and the
  denial is reported (``denied_tools``). Reads outside the workspace (and ``--add-dir``) are
  denied by ``dontAsk``, which only lets reads inside the working directories through;
- ``edit``: ``Read, Grep, Glob, Edit, Write`` with the allow rule ``Edit(./**)`` (relative to
  the workspace, the cwd; a bare ``Edit`` rule is not limited to it). Paths are resolved
  before they are matched, so a symlink out of the workspace does not let a write out;
- ``shell``: also ``Bash``, with one rule ``Bash(<words>:*)`` per allowed command (a prefix of
  whole words; compound commands are split and every part must match), inside Claude's OS
  sandbox (bubblewrap + socat): ``failIfUnavailable`` (no sandbox, no start),
  ``allowUnsandboxedCommands: false`` (the model cannot ask to leave it) and
  ``autoAllowBashIfSandboxed: false`` (being sandboxed does not approve a command). The
  sandbox confines the commands' writes to the workspace; the allow list decides which
  commands run at all. A PreToolUse hook on ``Bash`` (``hook_main``, the rule of
  ``command_gate``) narrows that: plain words only, an allowed prefix or a read-only command
  in its exact shape. Without it Claude ran its own built-in "read-only" commands with any
  arguments (``grep -R`` read outside the workspace through a link);
- ``project``: the CLI's default tools and every settings source: the workspace's settings
  decide what is allowed (``dontAsk`` still denies the rest).

With ``ask: true`` (docs/approvals.md) the no-prompt policy is replaced: ``--permission-mode
default`` with ``--permission-prompt-tool mcp__agent_bridge__approval_prompt``, so what no rule
allows or denies is asked of a person through the worker's bridge server; at ``read`` the blanket
``Edit(//**)`` deny gives way to the protected paths' deny rules, so an edit is asked for. At
``shell`` the Bash hook asks a person itself for a plain command outside the allow list
(``command_gate.askable``; ``shell_approval``), waits, and answers allow or deny: Claude's
own prompt never sees a Bash call the hook refused.

``extra_dirs`` become ``--add-dir`` (readable, and writable by sandboxed commands), plus an
``Edit(//dir/**)`` allow rule at ``edit`` and above.
"""

import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from dispatcher.clis import command_gate, launch, shell_approval
from dispatcher.clis.base import Enforcement
from dispatcher.clis.launch import File
from dispatcher.core.permissions import (
    NON_WORKER_BRIDGE_TOOLS,
    WORKER_BRIDGE_TOOLS,
    PermissionProfile,
    profile_from_env,
)
from dispatcher.core.private_files import create_private_file
from dispatcher.core.protected import protected_from_env

# The built-in tools offered at each level (None: the CLI's default set, for ``project``).
READ_TOOLS = ("Read", "Grep", "Glob")
EDIT_TOOLS = ("Edit", "Write")
TOOLS: dict[str, tuple[str, ...] | None] = {
    "bridge": (),
    "read": (*READ_TOOLS, *EDIT_TOOLS),  # Edit and Write offered, and denied by DENY_ALL_EDITS
    "edit": (*READ_TOOLS, *EDIT_TOOLS),
    "shell": (*READ_TOOLS, *EDIT_TOOLS, "Bash"),
    "project": None,
}
# With the profile's ``ask``: Claude's permission prompts go to the worker's bridge server, which
# records a request and waits for a person (dispatcher/bridge/approvals.py).
APPROVAL_PROMPT_TOOL = "mcp__agent_bridge__approval_prompt"
DENY_ALL_EDITS = "Edit(//**)"  # every absolute path; Claude applies Edit rules to Write too
WORKSPACE_EDITS = "Edit(./**)"  # relative to the workspace (the cwd)
DENY_GIT_EDITS = ("Edit(**/.git)", "Edit(**/.git/**)")  # a .git file or directory at any depth
SANDBOX: dict[str, Any] = {
    "enabled": True,
    "failIfUnavailable": True,
    "allowUnsandboxedCommands": False,
    "autoAllowBashIfSandboxed": False,
}
SANDBOX_BINARIES = ("bwrap", "socat")
SETTINGS_FILE = "claude-settings.json"
POLICY_FILE = "claude-permissions.json"  # what the Bash hook reads (shell)
PROJECT_ROOT = Path(__file__).resolve().parents[3]
# A directory name that Claude's rules would read as a pattern (gitignore-style globs, the
# rule's own parentheses) or that the argv file cannot carry.
_UNSAFE_IN_RULE = frozenset("*?[]{}()!\\\n\r\0")


class Unenforceable(launch.Unenforceable):
    """The profile cannot be enforced by Claude Code on this machine (the launcher exits 78)."""


def builtin_tools(profile: PermissionProfile) -> tuple[str, ...] | None:
    """The built-in tools offered to the model (``--tools``); None: the CLI's default set."""
    return TOOLS[profile.level]


def _dir_rule(directory: str) -> str:
    if _UNSAFE_IN_RULE & set(directory):
        raise Unenforceable(
            f"extra_dirs entry {directory!r} holds a character that Claude Code's permission "
            "rules read as a pattern; rename the directory or leave it out"
        )
    return f"Edit(/{directory.rstrip('/')}/**)"  # "//abs/**": an absolute path in Claude's rules


def command_rule(words: Sequence[str]) -> str:
    """``Bash(git status:*)``: the command starts with exactly these words (pure)."""
    return f"Bash({' '.join(words)}:*)"


def protected_rules(protected: Sequence[str]) -> list[str]:
    """Deny rules for what no worker may write (``core.protected``): any ``.git`` below the
    workspace, and each protected path and everything in it. A path Claude's rules would read as
    a pattern gets no rule of its own: it lies outside every writable directory anyway (a
    workspace that holds one is refused), and a git directory inside one is a ``.git``."""
    rules = list(DENY_GIT_EDITS)
    for path in protected:
        if not _UNSAFE_IN_RULE & set(path):
            rules += [f"Edit(/{path.rstrip('/')})", f"Edit(/{path.rstrip('/')}/**)"]
    return rules


def permission_rules(profile: PermissionProfile, protected: Sequence[str] = ()) -> dict[str, list[str]]:
    """The level's ``permissions`` block for ``--settings``: ``allow`` and ``deny`` rules (pure)."""
    profile = profile.resolved()
    allow: list[str] = []
    deny: list[str] = []
    if profile.level == "read" and profile.ask:
        deny.extend(protected_rules(protected))  # edits are asked for (a person decides), never these
    elif profile.level == "read":
        deny.append(DENY_ALL_EDITS)
    if profile.level in ("edit", "shell"):
        allow.append(WORKSPACE_EDITS)
    if profile.writes:  # at project too: a deny rule beats the workspace's own allow rules
        deny.extend(protected_rules(protected))
    if profile.writes:
        allow.extend(_dir_rule(d) for d in profile.extra_dirs)
    else:
        for directory in profile.extra_dirs:
            _dir_rule(directory)  # the same check: --add-dir gets the same name
    allow.extend(command_rule(words) for words in profile.command_prefixes())
    return {key: rules for key, rules in (("allow", allow), ("deny", deny)) if rules}


def settings(
    profile: PermissionProfile, protected: Sequence[str] = (), hook: str | None = None
) -> dict[str, Any] | None:
    """The ``--settings`` document of the level, or None when it needs none (pure). ``protected``:
    what no tool may write (``core.protected``), as deny rules; ``hook``: the Bash hook's command
    line (``hook_command``), run before every ``Bash`` call at ``shell``."""
    doc: dict[str, Any] = {}
    rules = permission_rules(profile, protected)
    if rules:
        doc["permissions"] = rules
    if uses_sandbox(profile):
        doc["sandbox"] = dict(SANDBOX)
        if hook is not None:
            entry = {"type": "command", "command": hook, "timeout": command_gate.hook_timeout(profile)}
            doc["hooks"] = {"PreToolUse": [{"matcher": "Bash", "hooks": [entry]}]}
    return doc or None


def hook_command(policy: Path, profile: PermissionProfile | None = None) -> str:
    """The Bash hook's command line: this module's ``hook_main`` on the run's policy file (the
    asking hook when ``profile`` asks), in the launcher's own Python (the one running this)."""
    asks = profile is not None and command_gate.asks(profile)
    function = "asking_hook_main" if asks else "hook_main"
    return command_gate.hook_command(sys.executable, str(PROJECT_ROOT), policy, __name__, function)


def hook_decision(policy: Mapping[str, Any], event: Mapping[str, Any]) -> str | None:
    """Why the hook denies this ``Bash`` call, or None to leave it to Claude's own rules (pure).
    Without it, Claude runs its built-in "read-only" commands at ``shell`` with any arguments
    (``grep -R`` and ``rg -L`` printed a file outside the workspace through a link)."""
    if event.get("tool_name") != "Bash":
        return None
    why = command_gate.command_refusal(policy, event)
    return None if why is None else f"denied Bash: {why}"


def hook_main(policy_path: str) -> int:
    """The hook itself (``command_gate.hook_main``): it denies on any error."""
    return command_gate.hook_main(hook_decision, policy_path)


def asking_hook_main(policy_path: str) -> int:
    """The hook with ``ask`` at ``shell``: a command refused only for the allow list is asked of a
    person (``shell_approval.ask``). An allowed call gets an explicit allow (else Claude's own
    rules would prompt again, through ``approval_prompt``)."""
    return command_gate.hook_main(hook_decision, policy_path, partial(shell_approval.ask, "Bash"), allow=True)


def uses_sandbox(profile: PermissionProfile) -> bool:
    """Whether the level offers ``Bash`` under our control, so it runs in Claude's sandbox."""
    tools = builtin_tools(profile)
    return tools is not None and "Bash" in tools


def missing_sandbox_binaries(which: Callable[[str], str | None], profile: PermissionProfile) -> list[str]:
    """The sandbox's helpers not on PATH, when the level needs the sandbox."""
    return [name for name in SANDBOX_BINARIES if which(name) is None] if uses_sandbox(profile) else []


def claude_args(profile: PermissionProfile, settings_file: Path | None) -> list[str]:
    """The permission flags for ``claude -p`` (pure): tool lists, rules, settings sources,
    extra directories, the no-prompt policy. ``settings_file`` holds ``settings(profile)``
    (None when that is None)."""
    profile = profile.resolved()
    args: list[str] = []
    tools = builtin_tools(profile)
    if tools is not None:
        args += ["--tools", ",".join(tools)]
    args += [
        "--allowedTools",
        ",".join(f"mcp__agent_bridge__{t}" for t in WORKER_BRIDGE_TOOLS),
        "--disallowedTools",
        ",".join(f"mcp__agent_bridge__{t}" for t in NON_WORKER_BRIDGE_TOOLS),
    ]
    if profile.level != "project":
        args += ["--setting-sources", "user"]
    for directory in profile.extra_dirs:
        args += ["--add-dir", directory]
    if settings_file is not None:
        args += ["--settings", str(settings_file)]
    if profile.ask:  # what no rule decides goes to a person (docs/approvals.md), never to the model's say
        args += ["--permission-mode", "default", "--permission-prompt-tool", APPROVAL_PROMPT_TOOL]
    else:
        args += ["--permission-mode", "dontAsk", "--permission-prompts", "none"]
    return args


def _sandbox_works(bwrap: str) -> bool:
    """bubblewrap can make a namespace here (as Claude's sandbox needs: mount, pid, net)."""
    try:
        done = subprocess.run(  # noqa: S603 - bwrap from PATH with a fixed argv
            [
                bwrap,
                "--ro-bind",
                "/",
                "/",
                "--dev",
                "/dev",
                "--proc",
                "/proc",
                "--unshare-pid",
                "--unshare-net",
                "--",
                "true",
            ],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def permission_plan(
    profile: PermissionProfile,
    attempt_dir: Path,
    workspace: Path,
    protected: Sequence[str],
    asker: Mapping[str, str] | None = None,
) -> tuple[list[File], list[str]]:
    """The level's files for the attempt directory (the ``--settings`` document, at ``shell`` the
    Bash hook's policy) and its flags (pure). ``asker``: the worker server's settings, for a hook
    that asks (``command_gate.policy_document``). Raises ``Unenforceable`` (an extra dir no rule can name)."""
    files, hook = [], None
    if uses_sandbox(profile):
        policy = attempt_dir / POLICY_FILE
        document = {**command_gate.policy_document(profile, workspace, asker), "protected": list(protected)}
        files.append(File(policy, json.dumps(document) + "\n"))
        hook = hook_command(policy, profile)
    doc = settings(profile, protected, hook)
    settings_file = None
    if doc is not None:
        settings_file = attempt_dir / SETTINGS_FILE
        files.append(File(settings_file, json.dumps(doc, indent=2) + "\n"))
    return files, claude_args(profile, settings_file)


def sandbox_problem(
    profile: PermissionProfile,
    which: Callable[[str], str | None] = shutil.which,
    probe: Callable[[str], bool] = _sandbox_works,
) -> str | None:
    """Why the level's sandbox cannot work here (the launch's host check), or None."""
    missing = missing_sandbox_binaries(which, profile)
    if missing:
        return (
            f"level {profile.level} needs Claude Code's sandbox, which needs {' and '.join(missing)} "
            "on PATH: install them (Debian/Ubuntu: apt-get install bubblewrap socat)"
        )
    if uses_sandbox(profile) and not probe(which("bwrap") or "bwrap"):
        return (
            f"level {profile.level} needs Claude Code's sandbox, but bubblewrap cannot create "
            "its namespaces here (user namespaces off, or a container without them)"
        )
    return None


def prepare(
    env: Mapping[str, str],
    attempt_dir: Path,
    which: Callable[[str], str | None] = shutil.which,
    probe: Callable[[str], bool] = _sandbox_works,
    workspace: Path | None = None,
) -> list[str]:
    """The profile from ``AGENT_BRIDGE_PERMISSIONS`` checked on this host, its files written
    (private, new names) into the attempt directory, and the flags. ``workspace``: the cwd.
    Raises ``ProfileError`` (invalid profile) or ``Unenforceable`` (not here)."""
    profile = profile_from_env(env)
    problem = sandbox_problem(profile, which, probe)
    if problem is not None:
        raise Unenforceable(problem)
    files, args = permission_plan(profile, attempt_dir, workspace or Path.cwd(), protected_from_env(env))
    for file in files:
        create_private_file(file.path, file.text)
    return args


def enforcement(profile: PermissionProfile, which: Callable[[str], str | None]) -> Enforcement | None:
    """Doctor's view: the sandbox's helpers missing for a level that needs them."""
    needs = missing_sandbox_binaries(which, profile)
    return Enforcement("needs", tuple(needs)) if needs else None
