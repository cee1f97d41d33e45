"""Every finding code the bridge reports, declared once: its level(s), its fix text and where it shows.

``agent-bridge doctor`` reports all of them; the status line and ``top`` show the few a person
must see while working (``surfaces``), with the same words (``short``). This module is the table
they all read; it imports nothing, so the status line can afford it.

How to add a check: see ``dispatcher/ops/doctor/table.py``.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field

OK, WARN, ERROR = "ok", "warn", "error"
LEVELS = (OK, WARN, ERROR)
DOCTOR, STATUSLINE, TOP = "doctor", "statusline", "top"
DOCTOR_ONLY = frozenset({DOCTOR})
STATUS_SURFACES = frozenset({DOCTOR, STATUSLINE, TOP})

OTHERS_FIX = (
    "make {what} and the directories above it yours (or root's) and not group- or world-writable (chown, chmod go-w)"
)
STORE_ASIDE = "move it aside with its -wal and -shm files and restore a backup"


@dataclass(frozen=True)
class Finding:
    code: str
    level: str
    message: str
    fix: str = ""
    agent: str | None = None


@dataclass(frozen=True)
class Code:
    """One finding code: the levels it can have, how to fix it, and which surfaces show it."""

    name: str
    levels: tuple[str, ...]
    fix: str | Mapping[str, str] = ""
    surfaces: frozenset[str] = DOCTOR_ONLY
    short: str = ""  # the words (a template) the status line and top show it by (with surfaces beyond doctor)
    fixes: Mapping[str, str] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "fixes", {"": self.fix} if isinstance(self.fix, str) else dict(self.fix))

    def fix_text(self, variant: str = "", **values: object) -> str:
        return self.fixes[variant].format(**values)

    def said(self, **values: object) -> str:
        """The words the status line and top show it by (``values`` fill their template)."""
        return self.short.format(**values)


def _table(*codes: Code) -> dict[str, Code]:
    table: dict[str, Code] = {}
    for code in codes:
        if code.name in table:
            raise ValueError(f"finding code {code.name} is declared twice")
        table[code.name] = code
    return table


_NOTHING_TO_CREATE = "nothing to do (any agent-bridge command or MCP server creates it)"
_START = "agent-bridge listener enable --agent {agent}"
_STATUS = "see `agent-bridge listener status --agent {agent}`"
_STATUSLINE_BY_HAND = "run `agent-bridge-statusline` by hand"
_DECIDE = "decide each one: the `conversation` tool (status, then complete or cancel) in a session of its initiator"

CODES: dict[str, Code] = _table(
    # the runner
    Code("invalid_setting", (ERROR,), "fix or unset {variable}"),
    Code("check_failed", (ERROR,), "run again with AGENT_BRIDGE_LOG_LEVEL=DEBUG and report it"),
    # the store and the runtime directory
    Code("store_ok", (OK,)),
    Code("store_dir_mode", (WARN,), "chmod 700 {directory}"),
    Code("store_missing", (WARN,), _NOTHING_TO_CREATE),
    Code("store_not_file", (ERROR,), "move it aside; AGENT_BRIDGE_DB must name a regular file"),
    Code("store_owner", (ERROR,), "chown {uid} {db} (or use your own AGENT_BRIDGE_DB)"),
    Code("store_mode", (ERROR,), "chmod 600 {path}"),
    Code(
        "store_unreadable",
        (ERROR,),
        {
            "open": "check the file's and its directory's permissions",
            "read": "retry; if it persists, check the store's disk and permissions",
            "postgres": "check that the server runs and accepts you, and that AGENT_BRIDGE_DB names it",
        },
    ),
    Code("store_busy", (WARN,), "run agent-bridge doctor again"),
    Code(
        "store_corrupt",
        (ERROR,),
        {
            "unreadable": STORE_ASIDE + " (without one, the next start creates an empty store)",
            "check": STORE_ASIDE,
        },
    ),
    Code("schema_too_new", (ERROR,), "upgrade agent-bridge"),
    Code("schema_old", (WARN,), "nothing to do (or run any agent-bridge command that opens the store)"),
    Code("disk_low", (WARN,), "free some disk space: SQLite fails writes on a full disk"),
    Code("runtime_dir_mode", (ERROR,), "chmod 700 {runtime}"),
    Code("runtime_dir_owner", (ERROR,), "set AGENT_BRIDGE_RUNTIME_DIR to a directory of your own"),
    # config.json, the launchers and the workspaces
    Code("config_ok", (OK,)),
    Code("config_writable_by_others", (ERROR,), OTHERS_FIX + "; listeners and commands refuse it until then"),
    Code(
        "config_invalid",
        (ERROR,),
        "fix {path} (or point AGENT_BRIDGE_CONFIG at a valid one); listeners dispatch nothing until then",
    ),
    Code("launcher_ok", (OK,)),
    Code(
        "launcher_missing",
        (ERROR,),
        "fix agents.{agent}.launcher in config.json",
        STATUS_SURFACES,
        "launcher missing: see agent-bridge doctor",
    ),
    Code(
        "launcher_not_executable",
        (ERROR,),
        "chmod +x {path}",
        STATUS_SURFACES,
        "launcher not executable: see agent-bridge doctor",
    ),
    Code(
        "launcher_writable_by_others",
        (ERROR,),
        OTHERS_FIX + "; the supervisor never runs it until then (spawn:PermissionError)",
        STATUS_SURFACES,
        "launcher writable by others: see agent-bridge doctor",
    ),
    Code("workspace_ok", (OK,)),
    Code("workspace_missing", (ERROR,), "mkdir -p {workspace}, or set agents.{agent}.workspace in {config}"),
    Code(
        "workspace_unsafe",
        (ERROR,),
        "set agents.{agent}.workspace in {config} to a project directory (e.g. ~/my-project)",
    ),
    # the git worktree each attempt of an editing agent runs in (docs/worktrees.md)
    Code("isolation_ok", (OK,)),
    Code("isolation_refused", (ERROR,), 'fix the repository, or set agents.{agent}.isolation to "none" in {config}'),
    # each agent's CLI, its credentials and its permissions
    Code("cli_ok", (OK,)),
    Code("cli_not_found", (ERROR,), "install {cli}, or set {binary_env} to its path"),
    Code(
        "cli_version_unknown",
        (WARN,),
        {
            "runs_on": "{runs_on}",  # what init's table says the CLI needs to run
            "does_not_run": "run `{binary} --version` by hand and fix what it says",
            "no_version": "check that {binary} is the {cli} CLI",
        },
    ),
    Code(
        "cli_version_untested",
        (WARN,),
        "install {cli} {tested_version}, or run a dispatch by hand and check its outcome",
    ),
    Code("cli_auth_ok", (OK,)),
    Code(
        "cli_not_authenticated",
        (WARN,),
        "{fix}",  # the CLI module's own (dispatcher/clis/<cli>/__init__.py: login.fix)
    ),
    Code("permissions_ok", (OK,)),
    Code(
        "permissions_unenforceable",
        (ERROR,),
        {
            "sandbox": "install bubblewrap and socat (Debian: apt-get install bubblewrap socat), or lower the level",
            "level": "{fix}",  # the CLI module's own fix (dispatcher/clis/<cli>/profile.py enforcement)
        },
    ),
    Code("permissions_unconfined", (WARN,), "lower the level if its tasks do not need that; see docs/permissions.md"),
    # each agent's listener and systemd unit
    Code("listener_ok", (OK,)),
    Code(
        "auto_off",
        (OK,),
        "to have them dispatched, set agents.{agent}.auto to true{where}; "
        "one task by hand: agent-bridge dispatch MESSAGE_ID",
    ),
    Code("listener_disabled", (WARN,), _START),
    Code("listener_not_running", (WARN,), _START, STATUS_SURFACES, "stopped"),
    Code(
        "listener_cli_missing",
        (ERROR,),
        "agent-bridge listener restart --agent {agent} (from a shell that finds {cli})",
    ),
    Code(
        "launcher_variable_unset",
        (WARN,),
        "export {variable}=... (docs/launchers.md), then `agent-bridge listener restart --agent {agent}`",
    ),
    Code("listener_error", (ERROR,), _STATUS),
    Code("last_attempt_failed", (WARN,), _STATUS + " and its attempt log"),
    Code("unit_ok", (OK,)),
    Code("unit_no_manager", (OK,)),
    Code("unit_not_installed", (WARN,), "agent-bridge systemd install --agent {agent}"),
    Code(
        "unit_unknown",
        (WARN,),
        "make `systemctl --user status` work in this shell (a login session, or "
        "`loginctl enable-linger $USER`; XDG_RUNTIME_DIR set), then rerun doctor",
    ),
    Code("unit_not_enabled", (WARN,), "systemctl --user enable --now {unit}"),
    Code("unit_not_active", (WARN,), "systemctl --user start {unit}; journalctl --user -u {unit}"),
    # the status line and the settings of each CLI that has one
    Code("statusline_ok", (OK,)),
    Code(
        "statusline_slow",
        (WARN,),
        "see what it loads and waits for: `python -X importtime -m dispatcher.dispatch.statusline` with this "
        "shell's settings; a large store: `agent-bridge prune`",
    ),
    Code(
        "statusline_failed",
        (ERROR,),
        {"timeout": _STATUSLINE_BY_HAND + " and see what it waits for", "answer": _STATUSLINE_BY_HAND},
    ),
    Code("statusline_configured", (OK,)),
    Code("statusline_not_configured", (WARN,), "agent-bridge register {cli} --agent {cli_agent} --statusline"),
    Code("statusline_settings_unreadable", (WARN,), "fix {path}: {cli} cannot read it either"),
    # what our registrations, hooks, status line and units name as the store
    Code("registrations_ok", (OK,)),
    Code(
        "registration_elsewhere",
        (ERROR,),
        {
            "register": "rerun `agent-bridge register ...` (with --force) in a shell whose AGENT_BRIDGE_DB names "
            "the store in use",
            "unit": "set AGENT_BRIDGE_DB={store} in {path}",
        },
    ),
    # stale items
    Code("nothing_stuck", (OK,)),
    Code(
        "stale_attempt", (ERROR,), "agent-bridge listener recover --agent {agent} (a running listener settles it too)"
    ),
    Code("conversation_needs_human", (ERROR,), _DECIDE),
    Code("conversation_blocked", (ERROR,), _DECIDE),
    Code("orphan_worktree", (WARN,), "rm -rf {path}, then `git worktree prune` in its repository"),
    Code("orphan_branch", (WARN,), "review it, then `git --git-dir={repository} branch -D {branch}`"),
    Code("unread", (OK,)),
    Code(
        "unread_old",
        (WARN,),
        "read them in a session of {agent}, or see `agent-bridge listener pending --agent {agent}`",
    ),
    # spend
    Code("cost_known", (OK,)),
    Code(
        "cost_unknown",
        (OK, WARN),  # warn only when a cost cap cannot apply
        'add "prices": {{"input": ..., "output": ...}} (USD per million tokens, your provider\'s) '
        "to agents.{agent} in config.json",
    ),
    Code(
        "budget_reached",
        (WARN,),
        "raise agents.{agent}.{cap} in config.json to go on today, or wait",
        STATUS_SURFACES,
        "budget reached, resets at 00:00 {zone}",
    ),
)


def finding(
    code: str,
    message: str,
    agent: str | None = None,
    *,
    level: str | None = None,
    variant: str = "",
    **values: object,
) -> Finding:
    """A finding of a declared ``code``: its fix from the table (``values`` fill its template);
    ``level`` is needed only for a code that has several."""
    entry = CODES[code]
    if level is None:
        if len(entry.levels) != 1:
            raise ValueError(f"{code} is declared with levels {entry.levels}: say which this finding has")
        (level,) = entry.levels
    elif level not in entry.levels:
        raise ValueError(f"{code} is declared with levels {entry.levels}, not {level}")
    return Finding(code, level, message, entry.fix_text(variant, **{"agent": agent, **values}), agent)
