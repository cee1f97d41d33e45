"""Which shell command a worker's PreToolUse hook lets run: the one rule for Codex and Claude.

A command runs only when it is plain words (no shell syntax: ``shell_words``) and either, at
``shell``, starts with one of the profile's ``allow_commands`` (the admin's choice: any
arguments after the prefix), or is one of the read-only commands in its exact argument shape
on paths inside the workspace and ``extra_dirs`` (``read_shapes``). Everything else is
refused, with what and why. Codex needs the read commands (it has no file-read tool); Claude
Code would otherwise run its own built-in "read-only" commands at ``shell`` with any
arguments (``grep -R`` and ``rg -L`` printed a file outside the workspace through a link).

Both CLIs speak the same hook protocol: the event as JSON on stdin (``tool_name``,
``tool_input.command``, ``cwd``, which Codex sets to the call's ``workdir``), a deny decision
as JSON on stdout (``hook_main``).

With the profile's ``ask`` at ``shell`` (docs/approvals.md), a command refused only because no
``allow_commands`` entry starts it (plain words, naming no protected place: ``askable``) is
asked of a person instead (``shell_approval``): the hook records the request, waits for
the answer, and allows the call or denies it with why. Every other refusal stays a denial.
"""

import json
import re
import shlex
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from dispatcher.clis.read_shapes import read_command
from dispatcher.core.permissions import PermissionProfile
from dispatcher.core.profile_rules import MAX_APPROVAL_TIMEOUT_SECONDS
from dispatcher.core.protected import write_refused

# One shell word the hook accepts: plain characters, '...' or "..." without expansions.
_SEGMENT = r"""[A-Za-z0-9_./=:@+,%-]+|'[^']*'|"[^"$`\\!]*\""""
_WORD = re.compile(rf"(?:{_SEGMENT})+")
_LINE = re.compile(rf"(?:{_SEGMENT})+(?:[ \t]+(?:{_SEGMENT})+)*")
_SEGMENTS = re.compile(_SEGMENT)

Decide = Callable[[Mapping[str, Any], Mapping[str, Any]], str | None]
# A person's answer to an askable command (policy, event): None when allowed, else why it is denied.
Ask = Callable[[Mapping[str, Any], Mapping[str, Any]], str | None]

# The hook's timeout in the CLI's configuration: a plain check is quick; one that asks a person
# waits up to the agent's approval_timeout_seconds (at most MAX_APPROVAL_TIMEOUT_SECONDS), which
# the hook bounds itself, so the CLI must not end it sooner.
HOOK_TIMEOUT_SECONDS = 60
ASK_HOOK_TIMEOUT_SECONDS = MAX_APPROVAL_TIMEOUT_SECONDS + 60
# What an asking hook needs to record a request as its worker: the worker's bridge server's own
# settings (the store, config.json, the agent and the attempt it is bound to, by its token).
ASKER_SETTINGS = (
    "AGENT_ID",
    "AGENT_BRIDGE_DB",
    "AGENT_BRIDGE_CONFIG",
    "AGENT_BRIDGE_MESSAGE_ID",
    "AGENT_BRIDGE_WORKER_TOKEN",
)


def shell_words(command: str) -> list[str] | None:
    """The words bash would run for ``command``, or None when it uses any shell syntax beyond
    plain words and simple quotes (operators, redirections, expansions, globs, newlines)."""
    line = command.strip(" \t")
    if not _LINE.fullmatch(line):
        return None
    return [
        "".join(s[1:-1] if s[0] in "'\"" else s for s in _SEGMENTS.findall(word.group()))
        for word in _WORD.finditer(line)
    ]


def policy_document(
    profile: PermissionProfile, workspace: Path, asker: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """What the hook needs: the profile (``extra_dirs`` resolved) and the workspace; with ``ask``
    at ``shell``, what it needs to ask a person (``asker``: the worker server's settings,
    ``ASKER_SETTINGS``; a file as private as the CLI's MCP config, which holds the same)."""
    doc: dict[str, Any] = {"profile": json.loads(profile.resolved().to_env()), "workspace": str(workspace)}
    if asks(profile) and asker is not None:
        doc["asker"] = {name: asker[name] for name in ASKER_SETTINGS if name in asker}
    return doc


def asks(profile: PermissionProfile) -> bool:
    """Whether the hook asks a person for a command outside the allow list (``ask`` at ``shell``)."""
    return profile.ask and profile.level == "shell"


def hook_timeout(profile: PermissionProfile) -> int:
    """The hook's timeout for the CLI's configuration, in seconds (``ASK_HOOK_TIMEOUT_SECONDS``
    when it asks)."""
    return ASK_HOOK_TIMEOUT_SECONDS if asks(profile) else HOOK_TIMEOUT_SECONDS


def command_refusal(policy: Mapping[str, Any], event: Mapping[str, Any]) -> str | None:
    """Why the hook refuses the shell command of this PreToolUse ``event``, or None (pure)."""
    profile = PermissionProfile.from_json(policy["profile"])
    workspace = Path(policy["workspace"]).resolve()
    roots = [workspace, *(Path(d).resolve() for d in profile.extra_dirs)]
    tool_input = event.get("tool_input")
    command = tool_input.get("command") if isinstance(tool_input, dict) else None
    words = shell_words(command) if isinstance(command, str) else None
    if not words:
        return f"only plain commands (no shell syntax) at level {profile.level}"
    if profile.level == "shell" and profile.allows_command(words):
        return None
    why = read_command(words, Path(str(event.get("cwd") or workspace)), roots)
    if why is None:
        return None
    listed = " and the commands of its allow list" if profile.level == "shell" else ""
    return f"{why}; level {profile.level} allows only the read-only commands{listed}"


def askable(policy: Mapping[str, Any], event: Mapping[str, Any]) -> bool:
    """Whether a person may be asked for this refused shell command (pure): the profile asks
    (``asks``), the command is plain words, and none of them names a git directory or a
    protected place (``core.protected``). Any other refusal stays a denial."""
    if not asks(PermissionProfile.from_json(policy["profile"])):
        return False
    tool_input = event.get("tool_input")
    command = tool_input.get("command") if isinstance(tool_input, dict) else None
    words = shell_words(command) if isinstance(command, str) else None
    if not words:
        return False
    cwd = Path(str(event.get("cwd") or policy["workspace"]))
    protected = [str(p) for p in policy.get("protected", ())]
    return not any(_names_protected(word, cwd, protected) for word in words)


def _names_protected(word: str, cwd: Path, protected: list[str]) -> bool:
    """A word that is, or carries (``--opt=PATH``, ``-fPATH``), a protected path or a ``.git``."""
    if ".git" in word or any(root in word for root in protected):
        return True
    candidates = {word, word.split("=", 1)[-1], word[2:] if word.startswith("-") else word}
    return any(write_refused(cwd / c, protected) is not None for c in candidates if c)


def hook_command(python: str, project: str, policy: Path, module: str, function: str = "hook_main") -> str:
    """The hook's command line: ``module``'s ``function`` on the run's policy file, in an
    isolated Python (no cwd, no PYTHON* variables: the workspace cannot replace its modules)."""
    boot = f"import sys; sys.path.insert(0, sys.argv[1]); from {module} import {function}; sys.exit({function}(sys.argv[2]))"
    return shlex.join([python, "-I", "-c", boot, project, str(policy)])


def hook_main(decide: Decide, policy_path: str, ask: Ask | None = None, allow: bool = False) -> int:
    """The hook process: the event on stdin, a deny decision on stdout. It fails closed: any
    error denies the call (Codex and Claude let a call through when a hook crashes). With
    ``ask``, an ``askable`` refusal goes to a person; a call they allowed gets an explicit allow
    decision when ``allow`` (Claude: else its own rules would prompt again), else none."""
    approved = False
    try:
        policy = json.loads(Path(policy_path).read_text(encoding="utf-8"))
        event = json.loads(sys.stdin.read())
        reason = decide(policy, event)
        if reason is not None and ask is not None and askable(policy, event):
            reason = ask(policy, event)
            approved = reason is None
    except Exception as exc:  # noqa: BLE001 - any failure must deny, never allow
        reason = f"denied: the permission hook failed ({type(exc).__name__})"
    # The hook's answer is its stdout (the PreToolUse contract of both CLIs).
    if reason is not None:
        decision = {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": reason}
        print(json.dumps({"hookSpecificOutput": decision}))  # noqa: T201
    elif approved and allow:
        decision = {
            "hookEventName": "PreToolUse",
            "permissionDecision": "allow",
            "permissionDecisionReason": "a person approved this command (agent-bridge approve)",
        }
        print(json.dumps({"hookSpecificOutput": decision}))  # noqa: T201
    else:
        print("{}")  # noqa: T201 - no decision: the call goes on
    return 0
