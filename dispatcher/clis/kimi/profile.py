"""Kimi Code 2.1.0 in the profile's terms (launchers/kimi_headless.sh calls these).

Kimi's prompt mode (``-p``) approves every tool call it is offered, cannot be combined with
``--yolo``/``--auto``/``--plan``, and does not apply ``[[permission.rules]]`` from config.toml
(a deny rule for ``Read`` did not stop a ``Read``, re-checked with 2.1.0). Two mechanisms of
Kimi itself remain, and they are what enforces each level:

- the **agent file's tool list** (``--agent-file``): the model is offered exactly these tools;
  a call to any other tool is answered ``Tool "X" not found``;
- a **PreToolUse hook** in the worker's private config.toml (above ``bridge``): Kimi runs it
  before every tool call and refuses the call when it exits 2 (its stderr becomes the tool
  result). The hook (``kimi_hook.py`` -> ``hook_main``) confines every file path, symlinks
  resolved, to the workspace and ``extra_dirs`` (plus the request file for ``Read``), and at
  ``shell`` lets ``Bash`` run only commands that are plain words starting with an allowed prefix.

Per level:

- ``bridge``: tool list only: ``Read`` + the worker's bridge tools, exactly as before profiles.
  ``Read`` (needed for the request file: Kimi takes its prompt only from argv) reads any file
  the user can read; no hook.
- ``read``: + ``Glob``, ``Grep``; the hook confines reads to the workspace, ``extra_dirs`` and
  the request file. Glob and Grep need ripgrep (``rg`` on PATH, or ``bin/rg`` in the user's
  Kimi home, which the launcher links); without it Kimi tries to download it at the call.
- ``edit``: + ``Write``, ``Edit``; the hook confines writes to the workspace and ``extra_dirs``.
- ``shell``: + ``Bash``; the hook allows only commands of plain words (no quotes, ``$``,
  redirections, pipes, ``;``, globs ...) whose first words are an allowed prefix, run in the
  workspace. There is **no OS sandbox**: an allowed command runs with all of the user's rights
  (``uv run pytest`` runs whatever the tests do, anywhere).
- ``project``: refused (``Unenforceable``, exit 78): Kimi 2.1.0 has no workspace permission
  settings that prompt mode applies, so "as when a person runs it there" means every tool,
  approved without asking, unconfined.

The hook fails OPEN in Kimi 2.1.0 when it cannot run: a hook that exits with another code
than 2, crashes before it can catch anything, or outlives its timeout counts as "allow". The
hook therefore exits 2 on every error it can catch, and the launcher gives it a long timeout.
"""

import json
import os
import re
import shlex
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from dispatcher.clis import launch
from dispatcher.clis.base import Enforcement
from dispatcher.core.permissions import WORKER_BRIDGE_TOOLS, PermissionProfile, command_allowed
from dispatcher.core.protected import write_refused

BRIDGE_TOOLS = tuple(f"mcp__agent_bridge__{tool}" for tool in WORKER_BRIDGE_TOOLS)
# Kimi's built-in tools per level (exact names: Kimi matches the agent file's list by name).
LEVEL_TOOLS: dict[str, tuple[str, ...]] = {
    "bridge": ("Read",),
    "read": ("Read", "Glob", "Grep"),
    "edit": ("Read", "Glob", "Grep", "Write", "Edit"),
    "shell": ("Read", "Glob", "Grep", "Write", "Edit", "Bash"),
}
WRITE_TOOLS = ("Write", "Edit")
HOOK_TIMEOUT_SECONDS = 300  # Kimi allows 1..600; a hook that times out counts as "allow"
# What the hook says when it refuses a call; the diagnostics count such results as denials.
DENIAL_PREFIX = "Denied by the Agent Bridge permission profile"
_TOOL_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
DENIAL_PATTERN = re.compile(re.escape(DENIAL_PREFIX) + r" \(level [a-z]+\): ([A-Za-z0-9_.:-]{1,64}) refused: ")
# One word of an allowed command (the characters permissions.COMMAND_PATTERN allows).
_PLAIN_WORD = re.compile(r"[A-Za-z0-9_./=:@+,%-]+")

AGENT_FILE_BRIDGE_BODY = """\
---
${base_prompt}

You are running as a one-shot, non-interactive Agent Bridge worker. Your only tools are
the agent_bridge MCP tools and Read. Nobody is watching this session: do not ask
questions; report results and problems through the agent_bridge tools.
"""

AGENT_FILE_BODY = """\
---
${base_prompt}

You are running as a one-shot, non-interactive Agent Bridge worker at permission level
"{level}". Your only tools are the agent_bridge MCP tools and {tools}. Calls outside the
level are refused by Kimi itself. Nobody is watching this session: do not ask questions;
report results and problems through the agent_bridge tools.
"""


class Unenforceable(launch.Unenforceable):
    """This profile cannot be enforced by Kimi Code here: the launcher exits 78 with the message."""


@dataclass(frozen=True)
class HookPolicy:
    """What the PreToolUse hook allows, with every directory resolved (symlinks included)."""

    level: str
    workspace: str
    read_roots: tuple[str, ...]  # the workspace and extra_dirs
    write_roots: tuple[str, ...]  # the same at edit and shell, none below
    request_file: str  # Read may open this one file outside the roots
    tools: tuple[str, ...]  # the built-in tools of the level
    commands: tuple[tuple[str, ...], ...]  # the allowed command prefixes, as words
    protected: tuple[str, ...] = ()  # never written (core.protected: the bridge's files, git dirs)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> "HookPolicy":
        data = json.loads(text)
        return cls(
            level=str(data["level"]),
            workspace=str(data["workspace"]),
            read_roots=tuple(data["read_roots"]),
            write_roots=tuple(data["write_roots"]),
            request_file=str(data["request_file"]),
            tools=tuple(data["tools"]),
            commands=tuple(tuple(words) for words in data["commands"]),
            protected=tuple(data["protected"]),
        )


def builtin_tools(profile: PermissionProfile) -> tuple[str, ...]:
    """Kimi's built-in tools the level offers; ``project`` is refused."""
    if profile.level not in LEVEL_TOOLS:
        raise Unenforceable(
            "level project cannot be enforced by Kimi Code 2.1.0: prompt mode approves every call and "
            "applies no workspace permission settings; use level read, edit or shell for this agent"
        )
    return LEVEL_TOOLS[profile.level]


def offered_tools(profile: PermissionProfile) -> tuple[str, ...]:
    """Every tool the model is offered: the level's built-in tools, then the worker's bridge tools."""
    return (*builtin_tools(profile), *BRIDGE_TOOLS)


def agent_file(profile: PermissionProfile) -> str:
    """The ``--agent-file`` text: Kimi offers the model exactly its ``tools`` list (at ``bridge``
    byte for byte the file the launcher wrote before profiles existed)."""
    builtin = builtin_tools(profile)
    if profile.level == "bridge":
        description, body = "limited to the agent_bridge MCP tools and Read.", AGENT_FILE_BRIDGE_BODY
    else:
        names = ", ".join(builtin)
        # YAML front matter: a plain scalar, so no ": " in it.
        description = f"at permission level {profile.level}, with the agent_bridge MCP tools and {names}."
        body = AGENT_FILE_BODY.replace("{level}", profile.level).replace("{tools}", names)
    head = [
        "---",
        "name: agent-bridge-worker",
        f"description: One-shot Agent Bridge worker {description}",
        "tools:",
        *(f"  - {tool}" for tool in offered_tools(profile)),
    ]
    return "\n".join(head) + "\n" + body


def _real(path: str | Path) -> str:
    return os.path.realpath(os.path.expanduser(str(path)))


def hook_policy(
    profile: PermissionProfile, workspace: str | Path, request_file: str | Path, protected: Sequence[str] = ()
) -> HookPolicy:
    """The hook's policy for this attempt (the directories resolved now, on this machine);
    ``protected``: what no write may touch (``core.protected.protected_from_env``)."""
    tools = builtin_tools(profile)
    roots = (_real(workspace), *(_real(d) for d in profile.resolved().extra_dirs))
    return HookPolicy(
        level=profile.level,
        workspace=_real(workspace),
        read_roots=roots,
        write_roots=roots if profile.writes else (),
        request_file=_real(request_file),
        tools=tools,
        commands=profile.command_prefixes(),
        protected=tuple(protected),
    )


def hook_command(python: str | Path, hook_script: str | Path, policy: HookPolicy) -> str:
    """The shell command Kimi runs for the hook: isolated Python (no cwd, no PYTHON* variables on
    its path: a file the worker plants in the workspace cannot replace the hook's modules)."""
    return " ".join(shlex.quote(str(part)) for part in (python, "-I", hook_script, policy.to_json()))


def _toml_string(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string (\uXXXX escapes included)


def worker_config(user_config: str | None, command: str) -> str:
    """The worker's config.toml: the user's own settings (providers, models, [loop_control]) with
    the PreToolUse hook appended. Refused when the user's file cannot take it."""
    text = user_config or ""
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise Unenforceable(
            f"the user's Kimi config.toml is not valid TOML ({exc}); fix it so the permission hook can be added"
        ) from None
    hook = f'\n[[hooks]]\nevent = "PreToolUse"\ncommand = {_toml_string(command)}\ntimeout = {HOOK_TIMEOUT_SECONDS}\n'
    combined = (text if not text or text.endswith("\n") else text + "\n") + hook
    try:
        hooks = tomllib.loads(combined).get("hooks")
    except tomllib.TOMLDecodeError:
        hooks = None
    if not isinstance(hooks, list) or not any(isinstance(h, dict) and h.get("command") == command for h in hooks):
        raise Unenforceable(
            "the user's Kimi config.toml defines `hooks` in a form the permission hook cannot be "
            "added to; write its hooks as [[hooks]] tables"
        )
    return combined


# -- the hook's decision -------------------------------------------------------------------


def _within(path: str, roots: Sequence[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def _resolve(policy: HookPolicy, raw: object) -> str | None:
    """The real path a tool's path argument names, or None when it is not a plain path (Kimi
    expands ``~/``; ``kimi-file://`` names an attachment)."""
    if not isinstance(raw, str) or not raw or raw.startswith("~") or "://" in raw or "\0" in raw:
        return None
    return os.path.realpath(os.path.join(policy.workspace, raw))  # noqa: PTH118 - a str path, resolved like Kimi does


def _command_allowed(policy: HookPolicy, command: object) -> bool:
    if not isinstance(command, str):
        return False
    words = command.split(" ")
    if not all(_PLAIN_WORD.fullmatch(word) for word in words):  # also: no empty word, tab or newline
        return False
    return command_allowed(policy.commands, words)


def check_call(policy: HookPolicy, tool: str, arguments: Mapping[str, object]) -> str | None:
    """None when the call may run, else why not (no argument in it)."""
    if tool in BRIDGE_TOOLS:
        return None
    if tool not in policy.tools:
        return "the tool is not part of this level"
    if tool == "Bash":
        cwd = arguments.get("cwd")
        if cwd is not None and not ((real := _resolve(policy, cwd)) and _within(real, policy.write_roots)):
            return "commands run only in the workspace"
        if not _command_allowed(policy, arguments.get("command")):
            return "the command is not on the allow list (plain words starting with an allowed command)"
        return None
    if tool == "Glob":
        pattern = arguments.get("pattern")
        if not isinstance(pattern, str) or pattern.startswith(("/", "~")) or ".." in pattern.split("/"):
            return "a glob pattern must be relative and stay below its directory"
    key = "path"
    if arguments.get(key) is None and tool in ("Glob", "Grep"):
        return None  # the working directory: the workspace
    real = _resolve(policy, arguments.get(key))
    if real is None:
        return "the path is not a plain file path"
    if tool in WRITE_TOOLS:
        if not _within(real, policy.write_roots):
            return "the path is outside the workspace and extra_dirs"
        return write_refused(os.path.join(policy.workspace, str(arguments.get(key))), policy.protected)  # noqa: PTH118
    if tool == "Read" and real == policy.request_file:
        return None
    return None if _within(real, policy.read_roots) else "the path is outside the workspace and extra_dirs"


def denial_text(policy: HookPolicy, tool: str, reason: str) -> str:
    return f"{DENIAL_PREFIX} (level {policy.level}): {tool} refused: {reason}."


def hook_main(policy_json: str, event_json: str) -> tuple[int, str]:
    """The hook, given its policy (argv) and Kimi's event (stdin): (exit code, stderr line).
    Exit 2 refuses the call; anything it cannot read is refused too."""
    policy = HookPolicy.from_json(policy_json)
    event = json.loads(event_json)
    tool = event.get("tool_name") if isinstance(event, dict) else None
    arguments = event.get("tool_input") if isinstance(event, dict) else None
    if not isinstance(tool, str) or not isinstance(arguments, dict):
        return 2, f"{DENIAL_PREFIX} (level {policy.level}): unknown refused: the hook could not read the call."
    reason = check_call(policy, tool, arguments)
    name = tool if _TOOL_NAME.fullmatch(tool) else "unknown"
    return (0, "") if reason is None else (2, denial_text(policy, name, reason))


def enforcement(profile: PermissionProfile, which: Callable[[str], str | None]) -> Enforcement | None:
    """Doctor's view: ``project`` never (prompt mode applies no workspace permission settings);
    ``shell`` runs commands no OS sandbox confines."""
    if profile.level == "project":
        return Enforcement(
            "refused",
            why="prompt mode applies no workspace permission settings",
            fix="give kimi level read, edit or shell in config.json",
        )
    return Enforcement("unconfined") if profile.level == "shell" else None
