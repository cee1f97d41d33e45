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

# One shell word the hook accepts: plain characters, '...' or "..." without expansions.
_SEGMENT = r"""[A-Za-z0-9_./=:@+,%-]+|'[^']*'|"[^"$`\\!]*\""""
_WORD = re.compile(rf"(?:{_SEGMENT})+")
_LINE = re.compile(rf"(?:{_SEGMENT})+(?:[ \t]+(?:{_SEGMENT})+)*")
_SEGMENTS = re.compile(_SEGMENT)

Decide = Callable[[Mapping[str, Any], Mapping[str, Any]], str | None]


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


def policy_document(profile: PermissionProfile, workspace: Path) -> dict[str, Any]:
    """What the hook needs: the profile (``extra_dirs`` resolved) and the workspace."""
    return {"profile": json.loads(profile.resolved().to_env()), "workspace": str(workspace)}


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


def hook_command(python: str, project: str, policy: Path, module: str) -> str:
    """The hook's command line: ``module``'s ``hook_main`` on the run's policy file, in an
    isolated Python (no cwd, no PYTHON* variables: the workspace cannot replace its modules)."""
    boot = (
        f"import sys; sys.path.insert(0, sys.argv[1]); from {module} import hook_main; sys.exit(hook_main(sys.argv[2]))"
    )
    return shlex.join([python, "-I", "-c", boot, project, str(policy)])


def hook_main(decide: Decide, policy_path: str) -> int:
    """The hook process: the event on stdin, a deny decision on stdout. It fails closed: any
    error denies the call (Codex and Claude let a call through when a hook crashes)."""
    try:
        policy = json.loads(Path(policy_path).read_text(encoding="utf-8"))
        reason = decide(policy, json.loads(sys.stdin.read()))
    except Exception as exc:  # noqa: BLE001 - any failure must deny, never allow
        reason = f"denied: the permission hook failed ({type(exc).__name__})"
    if reason is not None:
        # The hook's answer is its stdout (the PreToolUse contract of both CLIs).
        decision = {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": reason}
        print(json.dumps({"hookSpecificOutput": decision}))  # noqa: T201
    else:
        print("{}")  # noqa: T201 - no decision: the call goes on
    return 0
