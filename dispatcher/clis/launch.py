"""A CLI's launch plan: what one worker run of it is, computed in Python and tested as a pure
function (given a profile and an attempt: this argv, this env, these files).

``launchers/<cli>_headless.sh`` checks its invocation and execs ``dispatcher/dispatch/launch.py``,
which builds the ``Attempt`` from the supervisor's environment, asks the CLI's module for its
``LaunchPlan``, creates the plan's files (private, new names: a planted name stops the launch),
runs the CLI's host check (a sandbox that must work here), and execs the CLI with the plan's
argv and environment, stdin and stdout: the CLI leads the worker's process group.
"""

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dispatcher.core.permissions import PermissionProfile

UNENFORCEABLE = 78  # EX_CONFIG: the profile's level cannot be enforced here


class Unenforceable(ValueError):
    """The profile's level cannot be enforced by this CLI here: the launch exits 78."""


def read_user_file(path: Path) -> str | None:
    """A user's file as text, or None (missing, unreadable): what a plan may take from the user's setup."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


@dataclass(frozen=True)
class Attempt:
    """What a launch plan is computed from: one attempt of one worker, as the supervisor set it up."""

    env: Mapping[str, str]  # the launcher's environment (the supervisor's, the user's variables)
    attempt_dir: Path  # private, the run's own
    request_file: Path  # the task text, 0600: never in argv or the environment
    workspace: Path  # AGENT_BRIDGE_WORKSPACE (the supervisor's), else the cwd
    cwd: Path  # where the CLI runs (the workspace, or the attempt's worktree of it)
    profile: "PermissionProfile"
    server: Mapping  # the bridge's stdio MCP server entry for this worker (command, args, env)
    binary: str  # the CLI's binary, as found on PATH or named by *_BIN
    max_turns: int | None = None
    exists: Callable[[Path], bool] = field(default=os.path.exists, compare=False)
    read: Callable[[Path], str | None] = field(default=read_user_file, compare=False)


@dataclass(frozen=True)
class Dir:
    """A new private directory (0700); an existing name stops the launch."""

    path: Path


@dataclass(frozen=True)
class File:
    """A new private file (0600) holding ``text``; an existing name stops the launch."""

    path: Path
    text: str


@dataclass(frozen=True)
class Link:
    """A symbolic link ``path`` -> ``target`` (the user's credentials, never copied)."""

    path: Path
    target: Path


Step = Dir | File | Link


@dataclass(frozen=True)
class LaunchPlan:
    argv: tuple[str, ...]  # argv[0]: the program exec'd (looked up on PATH when not a path)
    env: Mapping[str, str] = field(default_factory=dict)  # set on top of the launcher's environment
    unset: tuple[str, ...] = ()  # taken out of it
    steps: tuple[Step, ...] = ()  # in order, before the exec
    stdin: Path | None = None  # None: /dev/null
    stdout: Path | None = None  # a new file in the attempt directory (the CLI's output_file)
    notes: tuple[str, ...] = ()  # lines for the worker log (never task text)


def positive_int(env: Mapping[str, str], name: str) -> int | None:
    """``env[name]`` as a positive integer, None when unset; ValueError (exit 2) otherwise."""
    raw = env.get(name) or ""
    if not raw:
        return None
    if not raw.isdigit() or raw.startswith("0"):
        raise ValueError(f"{name} must be a positive integer, got: {raw}")
    return int(raw)
