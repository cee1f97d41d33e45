"""The one interface every agent CLI module implements (``AgentCli``), and its plain parts.

A new CLI is one package under ``dispatcher/clis/`` exporting ``CLI``, an object with these
attributes and methods; ``registry.py`` finds it. Nothing else in the dispatcher names it.
"""

import importlib
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # the listener loads this module: core.permissions stays out of it
    from dispatcher.clis.config_files import Registration
    from dispatcher.clis.launch import Attempt, LaunchPlan
    from dispatcher.core.permissions import Level, PermissionProfile


@dataclass(frozen=True)
class Discovery:
    """How ``init`` and ``doctor`` find the CLI and say its version."""

    agent: str  # the CLI's name, also the agent id ``init`` declares for it
    binary_env: str  # the variable that names another binary (CLAUDE_BIN ...)
    default_binary: str  # the command looked up on PATH
    tested_version: str  # the version the launch plan and tests were checked against
    auto: bool  # False: least privilege is only approximate, so no unattended dispatch by default
    level: "Level"  # the permission level init gives it: the most its own sandbox can enforce
    version_line: str  # its own `--version` line (a whole line), the version as group 1
    runs_on: str = ""  # what it needs to run, said when it does not
    display: str = ""  # how the launcher names it when it is not found ("Claude Code CLI")
    install: str = ""  # how to get it, said then
    runner_env: str = ""  # a variable naming an interpreter to run the binary with (its launch does too)

    def binary(self, environ: Mapping[str, str] | None = None) -> str:
        """The binary to run: ``*_BIN`` when set, else the command name."""
        return (os.environ if environ is None else environ).get(self.binary_env) or self.default_binary


@dataclass(frozen=True)
class Login:
    """How ``doctor`` tells whether the CLI can authenticate, without a model request."""

    variables: tuple[str, ...]  # credentials it accepts from the environment
    status_command: tuple[str, ...]  # its own local "am I logged in" command (exit 0: yes); () none
    fix: str  # what the user does when it has none (doctor's cli_not_authenticated fix)
    home_variable: str  # the variable naming its home ("" when it has none)
    home_default: str  # its home under $HOME when that variable is unset
    credentials_file: str  # the credentials file inside its home

    def files(self, environ: Mapping[str, str]) -> list[Path]:
        """The credentials files it reads (any one of them present will do)."""
        home = Path(environ.get("HOME") or Path.home())
        root = (self.home_variable and environ.get(self.home_variable)) or home / self.home_default
        return [Path(root) / self.credentials_file]


@dataclass(frozen=True)
class Enforcement:
    """What ``doctor`` says about a level this CLI cannot fully enforce here (``permission_finding``)."""

    kind: str  # "needs": its sandbox's programs are missing; "refused": it never can; "unconfined": it runs, unconfined
    needs: tuple[str, ...] = ()  # the missing programs ("needs")
    why: str = ""  # why it never can ("refused")
    fix: str = ""  # what to do instead ("refused")


@dataclass(frozen=True)
class StatuslineSetting:
    """What a CLI's settings file says about its status line (doctor's ``statusline_*`` checks)."""

    path: Path  # the settings file that holds the status line
    exists: bool  # whether that file exists
    command: object = None  # the command its status line runs (None: none)
    unreadable: str | None = None  # why the file cannot be read (None: it can, or it does not exist)


@dataclass(frozen=True)
class Channel:
    """A wake path a CLI offers its MCP servers: an experimental capability the bridge's server
    declares, and the notification it sends when mail arrives (``dispatcher/mcp/wake_mcp.py``)."""

    capability: str  # the experimental capability's name
    method: str  # the notification's method
    setting: str  # the ``BridgeSettings`` field that turns it on (opt-in, interactive sessions only)


@dataclass(frozen=True)
class HookAnswer:
    """What a hook prints and exits with, in the form the CLI honours (``dispatcher/wake/hooks.py``)."""

    stdout: str = ""
    stderr: str = ""
    exit_code: int = 0


SILENT = HookAnswer()


def context_answer(event: str, line: str) -> HookAnswer:
    """``hookSpecificOutput.additionalContext``: the line put in front of the model (Claude, Codex, Gemini)."""
    return HookAnswer(
        stdout=json.dumps({"hookSpecificOutput": {"hookEventName": event, "additionalContext": line}}) + "\n"
    )


class AgentCli(Protocol):
    """One agent CLI, as the dispatcher sees it. Each ``dispatcher/clis/<name>/`` package exports one."""

    name: str  # "claude", ...: the config's ``cli`` word and the ledger's ``cli`` key
    discovery: Discovery
    login: Login
    output_file: str  # the file its launch leaves in the attempt directory, read after the run
    statusline: bool  # whether `register --statusline` has a status line to write for it
    hook_events: tuple[str, ...]  # the events `register --hooks` writes (`agent-bridge hook <cli> <event>`)
    wait_events: tuple[str, ...]  # those whose hook may wait for mail in the background (wake/hook_wait.py)
    launch_variables: tuple[str, ...]  # what its launch reads from the listener's environment (binary, home, options)
    reports_cost: bool  # whether its result says what a run cost (else only an agent's prices can)
    channel: Channel | None  # its MCP channel wake path, if it has one (wake_mcp.py)

    def diagnostics(self, attempt_dir: Path, exit_code: int | None) -> dict[str, Any]:
        """Payload-free diagnostics of its run (``results.LEDGER_KEYS`` included), never raising."""
        ...

    def launch_plan(self, attempt: "Attempt") -> "LaunchPlan":
        """One worker run (pure): argv, environment, files for the attempt directory, stdin/stdout.
        Raises ``launch.Unenforceable`` (exit 78) or ValueError (a bad setting: exit 2)."""
        ...

    def launch_check(self, attempt: "Attempt", plan: "LaunchPlan") -> str | None:
        """Why the plan's level cannot be enforced on this host (a sandbox probe), or None."""
        ...

    def hook_answer(self, event: str, line: str, block: bool) -> HookAnswer:
        """The wake hook's answer for ``event`` (``block``: a Stop that should go on with the mail)."""
        ...

    def credential_variables(self, environ: Mapping[str, str]) -> tuple[str, ...]:
        """The variables that hold its credentials here (``doctor``'s login check): ``login.variables``,
        and any its user's own config names (opencode's ``{env:NAME}``)."""
        ...

    def background_process(self, environ: Mapping[str, str]) -> tuple[int, str] | None:
        """(pid, start time) of this CLI's process when it runs the hook of a ``wait_events`` event
        in the background (the waiting hook waits beside it and ends with it); None: in the
        foreground, not under this CLI, unsure, or a CLI without a waiting hook (no waiting)."""
        ...

    def rule_event(self, event: str) -> str:
        """The hook rules' name for ``event`` (UserPromptSubmit, PostToolUse, Stop, SessionStart)."""
        ...

    def enforcement(self, profile: "PermissionProfile", which: Callable[[str], str | None]) -> Enforcement | None:
        """What stops it enforcing ``profile`` here (None: it does), for ``doctor``."""
        ...

    def register(self, reg: "Registration", dry_run: bool, force: bool) -> list[str]:
        """Write the bridge's MCP server entry into its own config; lines to print."""
        ...

    def register_hooks(self, agent: str, dry_run: bool, force: bool) -> list[str]:
        """Write its wake hooks (``agent-bridge hook <cli> <event>``); lines to print."""
        ...

    def register_statusline(self, dry_run: bool, force: bool) -> list[str]:
        """Write its status line (only when ``statusline``); lines to print."""
        ...

    def statusline_setting(self) -> StatuslineSetting:
        """What its settings say about its status line (only when ``statusline``), never raising."""
        ...

    def unregister(self, agent: str | None) -> list[str]:
        """Take out what ``register`` wrote (of ``agent``, or of any agent); lines to print."""
        ...

    def registration_files(self) -> list[Path]:
        """The files ``register`` edits (``doctor`` and ``uninstall --purge`` look at them)."""
        ...


class Packaged:
    """What a CLI package's ``CLI`` object delegates to its sub-modules, loaded only when asked
    (the listener loads the registry for the credential variables alone)."""

    name: str
    login: Login
    channel: Channel | None = None

    def _part(self, part: str) -> Any:
        return importlib.import_module(f"dispatcher.clis.{self.name}.{part}")

    def launch_plan(self, attempt: "Attempt") -> "LaunchPlan":
        plan: LaunchPlan = self._part("launch").plan(attempt)
        return plan

    def launch_check(self, attempt: "Attempt", plan: "LaunchPlan") -> str | None:
        problem: str | None = self._part("launch").check(attempt, plan)
        return problem

    def rule_event(self, event: str) -> str:
        return event

    def background_process(self, environ: Mapping[str, str]) -> tuple[int, str] | None:
        return None

    def credential_variables(self, environ: Mapping[str, str]) -> tuple[str, ...]:
        return self.login.variables

    def enforcement(self, profile: "PermissionProfile", which: Callable[[str], str | None]) -> Enforcement | None:
        found: Enforcement | None = self._part("profile").enforcement(profile, which)
        return found

    def register(self, reg: "Registration", dry_run: bool, force: bool) -> list[str]:
        lines: list[str] = self._part("registration").register(reg, dry_run, force)
        return lines

    def register_hooks(self, agent: str, dry_run: bool, force: bool) -> list[str]:
        lines: list[str] = self._part("registration").register_hooks(agent, dry_run, force)
        return lines

    def register_statusline(self, dry_run: bool, force: bool) -> list[str]:
        lines: list[str] = self._part("registration").register_statusline(dry_run, force)
        return lines

    def statusline_setting(self) -> StatuslineSetting:
        setting: StatuslineSetting = self._part("registration").statusline_setting()
        return setting

    def unregister(self, agent: str | None) -> list[str]:
        lines: list[str] = self._part("registration").unregister(agent)
        return lines

    def registration_files(self) -> list[Path]:
        found: list[Path] = self._part("registration").files()
        return found
