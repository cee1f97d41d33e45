"""``agent-bridge doctor``: what is wrong and how to fix it, read-only.

A list of checks, each a small function returning findings. Every finding has a stable
``code``, a ``level`` (ok / warn / error), a one-line ``message`` and a one-line ``fix``.
Doctor never creates or changes anything: the store is opened ``mode=ro`` (never
``open_store``), a missing store or runtime directory is reported, not created, and the
listener's state is read from /proc/locks and its progress document.
"""

import json
import os
import shutil
import stat
import statistics
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dispatcher.core import clock
from dispatcher.core.errors import BridgeError
from dispatcher.core.locations import Locations, StoreUrl, shown
from dispatcher.core.private_files import writable_by_others
from dispatcher.dispatch.environment import AUTH_VARIABLES
from dispatcher.ops import init
from dispatcher.store import STORE_ERRORS, Connection, schema_version, views
from dispatcher.store.attempts import unsettled_attempts
from dispatcher.store.readonly import open_read_only, store_is_idle

if TYPE_CHECKING:
    from dispatcher.core.permissions import PermissionProfile

OK, WARN, ERROR = "ok", "warn", "error"
LOW_DISK_BYTES = 100 * 1024 * 1024
STATUSLINE_BUDGET_SECONDS = 0.2
# Each CLI and the version the launchers were proven with, end to end (see README, "Real launchers"):
# init's table, and init's reader of its version (one rule for both commands).
CLIS = {cli.agent: cli for cli in init.CLIS}

if TYPE_CHECKING:  # imported where used: pydantic is slow to import
    from dispatcher.core.config import BridgeConfig


@dataclass(frozen=True)
class Finding:
    code: str
    level: str
    message: str
    fix: str = ""
    agent: str | None = None


@dataclass
class Context:
    """What the checks share: the locations, the config (None when invalid) and the store (None when unusable)."""

    locations: Locations
    config: "BridgeConfig | None" = None
    conn: Connection | None = None
    schema_current: bool = False

    def valid_config(self) -> "BridgeConfig":
        """For the checks ``run_checks`` runs only once ``check_config`` read a valid config."""
        if self.config is None:
            raise RuntimeError("this check needs the valid config.json that check_config reads first")
        return self.config

    def store(self) -> Connection:
        """For the checks ``run_checks`` runs only once ``check_store`` opened the store."""
        if self.conn is None:
            raise RuntimeError("this check needs the store that check_store opens first")
        return self.conn


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


# --- the store ----------------------------------------------------------------------------


def check_store(ctx: Context) -> list[Finding]:
    if isinstance(ctx.locations.db, StoreUrl):
        return _check_postgres_store(ctx, ctx.locations.db)

    db: Path = ctx.locations.db
    found: list[Finding] = []
    directory = db.parent
    if directory.is_dir():
        found += _disk(directory)
        if _mode(directory) & 0o077:
            found.append(
                Finding(
                    "store_dir_mode",
                    WARN,
                    f"the store's directory {directory} is {_mode(directory):04o}, not 0700: other users can list it",
                    f"chmod 700 {directory}",
                )
            )
    if not db.exists():
        return found + [
            Finding(
                "store_missing",
                WARN,
                f"no store yet at {db}; it is created on first use",
                "nothing to do (any agent-bridge command or MCP server creates it)",
            )
        ]
    info = db.lstat()
    if not stat.S_ISREG(info.st_mode):
        return found + [
            Finding(
                "store_not_file",
                ERROR,
                f"{db} is not a regular file",
                "move it aside; AGENT_BRIDGE_DB must name a regular file",
            )
        ]
    if info.st_uid != os.getuid():
        found.append(
            Finding(
                "store_owner",
                ERROR,
                f"{db} belongs to uid {info.st_uid}, not to you (uid {os.getuid()})",
                f"chown {os.getuid()} {db} (or use your own AGENT_BRIDGE_DB)",
            )
        )
    for path in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
        if path.exists() and _mode(path) & 0o077:
            found.append(
                Finding(
                    "store_mode",
                    ERROR,
                    f"{path.name} is {_mode(path):04o}, not 0600: other users can read the messages",
                    f"chmod 600 {path}",
                )
            )
    try:
        conn, idle = _open_read_only(db)
    except STORE_ERRORS as exc:
        return found + [
            Finding(
                "store_unreadable",
                ERROR,
                f"cannot open {db} read-only ({_one_line(exc)})",
                "check the file's and its directory's permissions",
            )
        ]
    if conn is None:  # removed since the check above
        return found + [
            Finding(
                "store_missing",
                WARN,
                f"no store yet at {db}; it is created on first use",
                "nothing to do (any agent-bridge command or MCP server creates it)",
            )
        ]
    try:
        version = schema_version(conn)
        check = views.integrity_problems(conn, 5)
    except STORE_ERRORS as exc:
        conn.close()
        from dispatcher.store import store_corruption

        if idle and Path(f"{db}-wal").exists():  # a writer started while we read the file as immutable
            return found + [
                Finding("store_busy", WARN, f"{db} came into use while doctor read it", "run agent-bridge doctor again")
            ]
        if store_corruption(exc) is not None:
            return found + [
                Finding(
                    "store_corrupt",
                    ERROR,
                    f"{db} is not a SQLite database or is damaged ({_one_line(exc)})",
                    "move it aside with its -wal and -shm files and "
                    "restore a backup (without one, the next start creates an empty store)",
                )
            ]
        return found + [
            Finding(
                "store_unreadable",
                ERROR,
                f"cannot read {db} ({_one_line(exc)})",
                "retry; if it persists, check the store's disk and permissions",
            )
        ]
    if check != ["ok"] and idle and Path(f"{db}-wal").exists():
        conn.close()
        return found + [
            Finding("store_busy", WARN, f"{db} came into use while doctor read it", "run agent-bridge doctor again")
        ]
    if check != ["ok"]:
        conn.close()
        return found + [
            Finding(
                "store_corrupt",
                ERROR,
                f"the integrity check (PRAGMA quick_check) of {db} failed: {_one_line('; '.join(check))[:200]}",
                "move it aside with its -wal and -shm files and restore a backup",
            )
        ]
    ctx.conn = conn
    found += _schema(ctx, str(db), version)
    if not [f for f in found if f.level == ERROR]:
        found.append(Finding("store_ok", OK, f"{db}: schema {version}, quick_check ok, mode 0600, yours"))
    return found


def _schema(ctx: Context, where: str, version: int) -> list[Finding]:
    """The store's schema version against this code's (either backend)."""
    from dispatcher.store import SCHEMA_VERSION

    if version > SCHEMA_VERSION:
        return [
            Finding(
                "schema_too_new",
                ERROR,
                f"{where} has schema version {version}; this agent-bridge knows up to {SCHEMA_VERSION}",
                "upgrade agent-bridge",
            )
        ]
    if version < SCHEMA_VERSION:
        return [
            Finding(
                "schema_old",
                WARN,
                f"{where} has schema version {version} (current {SCHEMA_VERSION}); it is migrated on the next start",
                "nothing to do (or run any agent-bridge command that opens the store)",
            )
        ]
    ctx.schema_current = True
    return []


def _check_postgres_store(ctx: Context, url: StoreUrl) -> list[Finding]:
    """A PostgreSQL store: the server answers, the database holds a store, its schema is known."""

    where = shown(url)
    try:
        conn = open_read_only(url)
    except (BridgeError,) + STORE_ERRORS as exc:
        if isinstance(exc, BridgeError) and exc.code == "schema_too_new":  # refused as every process refuses it
            return [Finding("schema_too_new", ERROR, _one_line(exc), "upgrade agent-bridge")]
        return [
            Finding(
                "store_unreadable",
                ERROR,
                f"cannot reach the PostgreSQL store {where} ({_one_line(exc)})",
                "check that the server runs and accepts you, and that AGENT_BRIDGE_DB names it",
            )
        ]
    if conn is None:
        return [
            Finding(
                "store_missing",
                WARN,
                f"no store yet in {where}; it is created on first use",
                "nothing to do (any agent-bridge command or MCP server creates it)",
            )
        ]
    ctx.conn = conn
    version = schema_version(conn)
    found = _schema(ctx, where, version)
    if not [f for f in found if f.level == ERROR]:
        found.append(Finding("store_ok", OK, f"{where}: schema {version}, PostgreSQL {views.server_version(conn)}"))
    return found


def _open_read_only(db: Path) -> tuple[Connection | None, bool]:
    """A read-only connection that creates no file (None: there is no store file); True when the store was idle."""
    idle = store_is_idle(db)
    return open_read_only(db), idle


def _disk(directory: Path) -> list[Finding]:
    try:
        vfs = os.statvfs(directory)
    except OSError:
        return []
    free = vfs.f_bavail * vfs.f_frsize
    if free < LOW_DISK_BYTES:
        return [
            Finding(
                "disk_low",
                WARN,
                f"only {free // (1024 * 1024)} MiB free on the store's filesystem ({directory})",
                "free some disk space: SQLite fails writes on a full disk",
            )
        ]
    return []


def check_runtime(ctx: Context) -> list[Finding]:
    runtime = ctx.locations.private_dir()
    if not runtime.exists():
        return []
    if _mode(runtime) & 0o077:
        return [
            Finding(
                "runtime_dir_mode",
                ERROR,
                f"the runtime directory {runtime} is {_mode(runtime):04o}, not 0700",
                f"chmod 700 {runtime}",
            )
        ]
    if runtime.stat().st_uid != os.getuid():
        return [
            Finding(
                "runtime_dir_owner",
                ERROR,
                f"the runtime directory {runtime} is not yours",
                "set AGENT_BRIDGE_RUNTIME_DIR to a directory of your own",
            )
        ]
    return []


# --- config.json and the launchers -------------------------------------------------------


OTHERS_FIX = (
    "make {what} and the directories above it yours (or root's) and not group- or world-writable (chown, chmod go-w)"
)


def check_config(ctx: Context) -> list[Finding]:
    from dispatcher.core.config import ConfigError, load_config

    path = ctx.locations.config_path()
    if (why := writable_by_others(path)) is not None:  # the rule load_config (every command) refuses by
        return [
            Finding(
                "config_writable_by_others",
                ERROR,
                f"{path} could be changed by someone else: {why}",
                OTHERS_FIX.format(what=path) + "; listeners and commands refuse it until then",
            )
        ]
    try:
        ctx.config = load_config(path)
    except ConfigError as exc:
        return [
            Finding(
                "config_invalid",
                ERROR,
                f"{path} is invalid: {_one_line(exc.reason)}",
                f"fix {path} (or point AGENT_BRIDGE_CONFIG at a valid one); listeners dispatch nothing until then",
            )
        ]
    return [Finding("config_ok", OK, f"{path}: agents {', '.join(sorted(ctx.config.agents))}")]


def check_launchers(ctx: Context) -> list[Finding]:
    from dispatcher.core.locations import PROJECT_DIR

    config, found = ctx.valid_config(), []
    for agent in sorted(config.agents):
        path = config.launcher_path(agent, PROJECT_DIR)
        if not path.is_file():
            found.append(
                Finding(
                    "launcher_missing",
                    ERROR,
                    f"launcher {path} does not exist",
                    f"fix agents.{agent}.launcher in config.json",
                    agent,
                )
            )
        elif not os.access(path, os.X_OK):
            found.append(
                Finding(
                    "launcher_not_executable", ERROR, f"launcher {path} is not executable", f"chmod +x {path}", agent
                )
            )
        elif (why := writable_by_others(path)) is not None:  # the rule the supervisor refuses it by
            found.append(
                Finding(
                    "launcher_writable_by_others",
                    ERROR,
                    f"launcher {path} could be changed by someone else: {why}",
                    OTHERS_FIX.format(what=path) + "; the supervisor never runs it until then (spawn:PermissionError)",
                    agent,
                )
            )
        else:
            found.append(Finding("launcher_ok", OK, f"launcher {path}", "", agent))
    return found


# --- each agent's CLI --------------------------------------------------------------------


def cli_of(launcher: Path) -> str | None:
    """Which CLI a launcher runs, from its file name (``claude_headless.sh`` -> ``claude``)."""
    name = launcher.name.split("_", 1)[0].split(".", 1)[0]
    return name if name in CLIS else None


def check_clis(ctx: Context) -> list[Finding]:
    from dispatcher.core.locations import PROJECT_DIR

    config, found = ctx.valid_config(), []
    for agent in sorted(config.agents):
        cli = cli_of(config.launcher_path(agent, PROJECT_DIR))
        if cli is not None:
            found.append(_cli_finding(agent, cli))
    return found


def _cli_finding(agent: str, cli: str) -> Finding:
    spec = CLIS[cli]
    wanted = os.environ.get(spec.binary_env) or spec.default_binary
    binary = shutil.which(wanted)
    if binary is None:
        return Finding(
            "cli_not_found",
            ERROR,
            f"the {cli} CLI ({wanted!r}) is not found: every task for {agent} would fail with rc=127",
            f"install {cli}, or set {spec.binary_env} to its path",
            agent,
        )
    found = init.probe(spec, binary)
    if found.problem is not None:
        return Finding(
            "cli_version_unknown",
            WARN,
            f"{binary} found but does not run ({found.problem})",
            spec.runs_on or f"run `{binary} --version` by hand and fix what it says",
            agent,
        )
    if found.version is None:
        return Finding(
            "cli_version_unknown",
            WARN,
            f"{binary} --version printed no version line of {cli}",
            f"check that {binary} is the {cli} CLI",
            agent,
        )
    if not found.tested:
        return Finding(
            "cli_version_untested",
            WARN,
            f"{cli} {found.version} ({binary}); the launcher was tested with {spec.tested_version}",
            f"install {cli} {spec.tested_version}, or run a dispatch by hand and check its outcome",
            agent,
        )
    return Finding("cli_ok", OK, f"{cli} {found.version} ({binary}), the tested version", "", agent)


# --- can each agent's CLI authenticate? (never a model request) ------------------------------

# What each CLI accepts as credentials: environment variables (AUTH_VARIABLES), a credentials file in its home
# (the launchers link the user's into the worker's), and its own status command where one exists
# (`claude auth status` exits 1 when not logged in; `codex login status` likewise).
AUTH_STATUS_COMMANDS = {"claude": ("auth", "status"), "codex": ("login", "status")}
AUTH_FIXES = {
    "claude": "run `claude` as this user and /login, or set ANTHROPIC_API_KEY where the listener runs",
    "kimi": "run `kimi` as this user and /login (it writes ~/.kimi-code/credentials and config.toml)",
    "codex": "run `codex login` as this user, or set CODEX_API_KEY where the listener runs",
    "gemini": "run `gemini` as this user and choose a login, or set GEMINI_API_KEY where the listener runs",
}


def auth_files(cli: str, environ: dict[str, str]) -> list[Path]:
    """The credentials files ``cli`` reads (any one of them present will do)."""
    home = Path(environ.get("HOME") or Path.home())
    if cli == "claude":
        return [Path(environ.get("CLAUDE_CONFIG_DIR") or home / ".claude") / ".credentials.json"]
    if cli == "kimi":
        return [Path(environ.get("KIMI_CODE_HOME") or home / ".kimi-code") / "credentials"]
    if cli == "codex":
        return [Path(environ.get("CODEX_HOME") or home / ".codex") / "auth.json"]
    return [home / ".gemini" / "oauth_creds.json"]


def auth_finding(agent: str, cli: str, variable: str | None, status_ok: bool | None, file: Path | None) -> Finding:
    """The one decision: credentials by variable, by the CLI's own status command, or by file."""
    if variable is not None:
        return Finding("cli_auth_ok", OK, f"{cli} has credentials ({variable} is set)", "", agent)
    if status_ok:
        command = " ".join((cli, *AUTH_STATUS_COMMANDS[cli]))
        return Finding("cli_auth_ok", OK, f"{cli} is logged in (`{command}`)", "", agent)
    if file is not None:
        return Finding("cli_auth_ok", OK, f"{cli} has credentials ({file})", "", agent)
    return Finding(
        "cli_not_authenticated",
        WARN,
        f"{cli} has no credentials doctor can see: every task for {agent} would end auth_error",
        AUTH_FIXES[cli],
        agent,
    )


def _auth_status_ok(cli: str) -> bool | None:
    """The CLI's own status command: True (exit 0), False, or None (none, or it did not answer)."""
    binary = shutil.which(os.environ.get(f"{cli.upper()}_BIN") or cli)
    if cli not in AUTH_STATUS_COMMANDS or binary is None:
        return None
    try:
        done = subprocess.run(  # noqa: S603 - the agent's CLI (PATH or its *_BIN), its local status command only
            [binary, *AUTH_STATUS_COMMANDS[cli]],
            capture_output=True,
            timeout=init.VERSION_TIMEOUT_SECONDS * 2,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.returncode == 0


def check_auth(ctx: Context) -> list[Finding]:
    """Per declared CLI found on PATH: can it authenticate? Never sends a model request."""
    from dispatcher.core.locations import PROJECT_DIR

    config, found, environ = ctx.valid_config(), [], dict(os.environ)
    for agent in sorted(config.agents):
        cli = cli_of(config.launcher_path(agent, PROJECT_DIR))
        if cli is None or shutil.which(environ.get(f"{cli.upper()}_BIN") or cli) is None:
            continue  # no CLI to ask: check_clis reports it
        variable = next((v for v in AUTH_VARIABLES[cli] if environ.get(v)), None)
        status_ok = _auth_status_ok(cli) if variable is None else None
        file = next((f for f in auth_files(cli, environ) if f.exists()), None)
        found.append(auth_finding(agent, cli, variable, status_ok, file))
    return found


def check_permissions(ctx: Context) -> list[Finding]:
    from dispatcher.core.locations import PROJECT_DIR

    config, found = ctx.valid_config(), []
    for agent in sorted(config.agents):
        cli = cli_of(config.launcher_path(agent, PROJECT_DIR))
        if cli is not None:
            found.append(permission_finding(agent, cli, config.permissions(agent), shutil.which))
    return found


def permission_finding(
    agent: str, cli: str, profile: "PermissionProfile", which: Callable[[str], str | None]
) -> Finding:
    """What an agent's workers may do, and whether its CLI can enforce that here (pure but for ``which``).

    Error: the launcher would refuse every task (exit 78, ``permissions_unenforceable``).
    Warning: it runs, but what the level promises is not fully confined (see docs/permissions.md)."""
    from dispatcher.core.permissions import DESCRIPTIONS
    from dispatcher.dispatch.cli_profiles import claude, gemini

    level = profile.level
    needs: list[str] = []
    if cli == "claude":
        needs = claude.missing_sandbox_binaries(which, profile)
    elif cli == "gemini" and gemini.sandboxed(profile):
        needs = [name for name in ("bwrap",) if which(name) is None]
    if needs:
        return Finding(
            "permissions_unenforceable",
            ERROR,
            f"{agent}'s level {level} needs {cli}'s sandbox, but "
            f"{' and '.join(needs)} {'is' if len(needs) == 1 else 'are'} not on PATH: every task would end "
            "failed (permissions_unenforceable)",
            "install bubblewrap and socat (Debian: apt-get install bubblewrap socat), or lower the level",
            agent,
        )
    if cli == "kimi" and level == "project":
        return Finding(
            "permissions_unenforceable",
            ERROR,
            f"{agent}'s level project cannot be enforced by Kimi "
            "(prompt mode applies no workspace permission settings): every task would end failed "
            "(permissions_unenforceable)",
            "give kimi level read, edit or shell in config.json",
            agent,
        )
    if (cli, level) in (("kimi", "shell"), ("gemini", "project")):
        return Finding(
            "permissions_unconfined",
            WARN,
            f"{agent}'s workers may run commands that nothing confines to "
            f"the workspace ({cli} at level {level} has no OS sandbox)",
            "lower the level if its tasks do not need that; see docs/permissions.md",
            agent,
        )
    return Finding("permissions_ok", OK, f"{agent}'s workers may {DESCRIPTIONS[level]} (level {level})", "", agent)


def check_workspaces(ctx: Context) -> list[Finding]:
    """Each agent's workspace is an existing directory (a listener refuses to dispatch otherwise),
    whether or not its listener runs."""
    from dispatcher.core.settings import BridgeSettings

    config, default = ctx.valid_config(), BridgeSettings().workspace
    found = []
    for agent in sorted(config.agents):
        workspace = config.workspace(agent, default)
        if config.workspace_problem(agent, default, ctx.locations.config_path()) is None:
            found.append(Finding("workspace_ok", OK, f"workers of {agent} run in {workspace}", "", agent))
        else:
            found.append(
                Finding(
                    "workspace_missing",
                    ERROR,
                    f"the workspace {workspace} of {agent} is not an existing directory: nothing is dispatched",
                    f"mkdir -p {workspace}, or set agents.{agent}.workspace in {ctx.locations.config or 'config.json'}",
                    agent,
                )
            )
    return found


def check_isolation(ctx: Context) -> list[Finding]:
    """An agent whose workers need a worktree has a workspace one can be made from (docs/worktrees.md)."""
    from dispatcher.core.settings import BridgeSettings
    from dispatcher.dispatch import git_worktree as g
    from dispatcher.dispatch.isolation import ISOLATION_TEXT, use_worktree

    config, default = ctx.valid_config(), BridgeSettings().workspace
    where = ctx.locations.config or "config.json"
    found = []
    for agent in sorted(config.agents):
        declared, writes = config.agents[agent].isolation, config.permissions(agent).writes
        workspace = config.workspace(agent, default)
        if not use_worktree(declared, writes, True) or not workspace.is_dir():
            continue
        try:
            repo = g.find_repo(workspace)
            why = "workspace_not_git" if repo is None and declared == "worktree" else repo and g.repo_refusal(repo)
        except g.GitFailed as exc:
            why = exc.kind
        if why:
            fix = f'fix the repository, or set agents.{agent}.isolation to "none" in {where}'
            text = f"{why}: {ISOLATION_TEXT.get(why, why)} ({workspace}); its tasks fail"
            found.append(Finding("isolation_refused", ERROR, text, fix, agent))
        elif repo is not None:
            found.append(
                Finding("isolation_ok", OK, f"workers of {agent} get a worktree of {repo.toplevel}", "", agent)
            )
    return found


def check_worktrees(ctx: Context) -> list[Finding]:
    """Worktrees and ``agent-bridge/`` branches of ours that no attempt owns, with their size."""
    from dispatcher.core.settings import BridgeSettings
    from dispatcher.ops.branches import known_repositories, orphans

    conn = ctx.store()
    workspaces = []
    if ctx.config is not None:
        default = BridgeSettings().workspace
        workspaces = [ctx.config.workspace(agent, default) for agent in ctx.config.agents]
    left = orphans(conn, ctx.locations.private_dir(), known_repositories(conn, workspaces))
    found = [
        Finding(
            "orphan_worktree",
            WARN,
            f"worktree {w['path']} ({w['bytes'] // 1024} KiB) belongs to no attempt",
            f"rm -rf '{w['path']}', then `git worktree prune` in its repository",
        )
        for w in left["worktrees"]
    ]
    found += [
        Finding(
            "orphan_branch",
            WARN,
            f"branch {b['branch']} of {b['repository']} (at {b['commit'][:12]}) belongs to no attempt",
            f"review it, then `git --git-dir='{b['repository']}' branch -D {b['branch']}`",
        )
        for b in left["branches"]
    ]
    return found


# --- each agent's listener and systemd unit ----------------------------------------------


def check_listeners(ctx: Context) -> list[Finding]:
    from dispatcher.dispatch.control import listener_status

    found = []
    config = ctx.valid_config()
    for agent in sorted(config.agents):
        status = listener_status(ctx.locations, agent, late_results=False, totals=False)
        start = f"agent-bridge listener enable --agent {agent}"
        if not config.agents[agent].auto:
            found.append(auto_off_finding(agent, status["running"], ctx.locations.config))
        elif not status["enabled"]:
            found.append(Finding("listener_disabled", WARN, f"the listener of {agent} is disabled", start, agent))
        elif status["elsewhere"]:
            away = status["elsewhere"]
            found.append(
                Finding(
                    "listener_ok",
                    OK,
                    f"the listener of {agent} runs on host {away['host']} (pid {away['pid']}, renewed "
                    f"{away['renewed_seconds_ago']:.0f}s ago)",
                    "",
                    agent,
                )
            )
        elif not status["running"]:
            found.append(
                Finding(
                    "listener_not_running",
                    WARN,
                    f"the listener of {agent} is not running: its tasks wait",
                    start,
                    agent,
                )
            )
        elif status["stage"] in ("error", "unknown", "legacy"):
            why = status["config_error"] or (status["progress"] or {}).get("error") or status["progress_state"]
            found.append(
                Finding(
                    "listener_error",
                    ERROR,
                    f"the listener of {agent} (pid {status['pid']}) is in stage "
                    f"{status['stage']}: {_one_line(why)[:160]}",
                    f"see `agent-bridge listener status --agent {agent}`",
                    agent,
                )
            )
        else:
            found.append(
                Finding(
                    "listener_ok",
                    OK,
                    f"the listener of {agent} runs (pid {status['pid']}, stage {status['stage']})",
                    "",
                    agent,
                )
            )
        last = status["last"]
        if isinstance(last, dict) and last.get("result") not in (None, "succeeded", "blocked"):
            kind = f" ({last['error_kind']})" if last.get("error_kind") else ""
            found.append(
                Finding(
                    "last_attempt_failed",
                    WARN,
                    f"the last attempt of {agent} (message #{last.get('message_id')}) ended {last.get('result')}{kind}",
                    f"see `agent-bridge listener status --agent {agent}` and its attempt log",
                    agent,
                )
            )
    return found


def auto_off_finding(agent: str, running: bool, config: Path | None) -> Finding:
    """An agent whose ``auto`` is false: its tasks wait for a person, whether a listener runs or not."""
    where = f" in {config}" if config else " in config.json"
    return Finding(
        "auto_off",
        OK,
        f"tasks for {agent} wait for a human: auto is off (its listener {'runs' if running else 'is not running'})",
        f"to have them dispatched, set agents.{agent}.auto to true{where}; "
        f"one task by hand: agent-bridge dispatch MESSAGE_ID",
        agent,
    )


def no_manager_finding(agent: str, unit: str, enabled: bool) -> Finding:
    """No systemd user manager: what to run instead of the units (never a `systemctl` command)."""
    state = f"{unit} is enabled, but" if enabled else "no unit for it, and"
    return Finding(
        "unit_no_manager",
        OK,
        f"{state} no systemd user manager runs here: start {agent}'s listener with "
        f"`agent-bridge listener enable --agent {agent}` (detached; again after a reboot)",
        "",
        agent,
    )


def check_units(ctx: Context) -> list[Finding]:
    from dispatcher.dispatch.systemd_unit import unit_dir, unit_installed, unit_name, user_manager_available

    found = []
    installed, manager = unit_installed(), user_manager_available()
    config = ctx.valid_config()
    for agent in sorted(config.agents):
        unit = unit_name(agent)
        if not config.agents[agent].auto:
            continue  # auto_off says it: no listener is needed
        if not manager:
            linked = installed and (unit_dir() / "default.target.wants" / unit).exists()
            found.append(no_manager_finding(agent, unit, linked))
            continue
        if not installed:
            found.append(
                Finding(
                    "unit_not_installed",
                    WARN,
                    f"no systemd user unit for {agent}: its listener does not start at login",
                    f"agent-bridge systemd install --agent {agent}",
                    agent,
                )
            )
            continue
        enabled, why = _systemctl("is-enabled", unit)
        active, why_active = _systemctl("is-active", unit) if enabled == "enabled" else (None, "")
        if enabled is None or (enabled == "enabled" and active is None):
            found.append(
                Finding(
                    "unit_unknown",
                    WARN,
                    f"`systemctl --user` could not say whether {unit} is "
                    f"{'enabled' if enabled is None else 'active'}: {why or why_active}",
                    "make `systemctl --user status` work in this shell (a login session, or "
                    "`loginctl enable-linger $USER`; XDG_RUNTIME_DIR set), then rerun doctor",
                    agent,
                )
            )
        elif enabled != "enabled":
            found.append(
                Finding(
                    "unit_not_enabled", WARN, f"{unit} is {enabled}", f"systemctl --user enable --now {unit}", agent
                )
            )
        elif active != "active":
            found.append(
                Finding(
                    "unit_not_active",
                    WARN,
                    f"{unit} is enabled but {active}",
                    f"systemctl --user start {unit}; journalctl --user -u {unit}",
                    agent,
                )
            )
        else:
            found.append(Finding("unit_ok", OK, f"{unit} is enabled and active", "", agent))
    return found


def _systemctl(verb: str, unit: str) -> tuple[str | None, str]:
    """systemctl's one-word answer (``enabled``, ``inactive``, ...), or None with the reason it
    gave none (its first stderr line: e.g. "Failed to connect to bus: No medium found")."""
    try:
        done = subprocess.run(  # noqa: S603 - a fixed argv
            ["systemctl", "--user", verb, unit],  # noqa: S607 - systemctl from PATH, as the user runs it
            capture_output=True,
            text=True,
            timeout=5,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError:
        return None, "systemctl is not on PATH"
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"systemctl failed ({type(exc).__name__})"
    answer = done.stdout.strip().split("\n")[0].strip()
    if answer:
        return answer, ""
    reason = next((line.strip() for line in done.stderr.splitlines() if line.strip()), "")
    return None, _one_line(reason)[:160] or f"no answer (exit {done.returncode})"


# --- the status line ---------------------------------------------------------------------


STATUSLINE_RUNS = 5  # statusline_slow judges the median: one sample on a busy machine says little


STATUSLINE_TIMEOUT_SECONDS = 5.0


@dataclass(frozen=True)
class StatuslineRun:
    done: subprocess.CompletedProcess | None  # None: no answer within the timeout
    seconds: float  # wall-clock, what Claude Code waits
    cpu_seconds: float  # user + system: what the status line itself costs, whatever else runs


def _time_statusline() -> StatuslineRun:
    """One run of the status line: its answer, how long it took and the CPU it used."""
    from dispatcher.core.locations import PROJECT_DIR
    from dispatcher.core.processes import children_cpu_seconds

    command = [sys.executable, "-c", "from dispatcher.dispatch.statusline import main; main()"]
    began, cpu_before = clock.monotonic(), children_cpu_seconds()
    try:
        done = subprocess.run(  # noqa: S603 - our own interpreter and status line, fixed arguments
            command,
            capture_output=True,
            text=True,
            timeout=STATUSLINE_TIMEOUT_SECONDS,
            cwd=PROJECT_DIR,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return StatuslineRun(None, STATUSLINE_TIMEOUT_SECONDS, children_cpu_seconds() - cpu_before)
    return StatuslineRun(done, clock.monotonic() - began, children_cpu_seconds() - cpu_before)


def statusline_speed(seconds: float, cpu_seconds: float) -> Finding:
    """From the medians of the runs: slow only when the status line's own CPU is over budget. A
    wall-clock time over budget with little CPU is the machine's other work (said, not warned of)."""
    took = f"{seconds * 1000:.0f} ms ({cpu_seconds * 1000:.0f} ms CPU), the median of {STATUSLINE_RUNS} runs"
    if cpu_seconds > STATUSLINE_BUDGET_SECONDS:
        return Finding(
            "statusline_slow",
            WARN,
            f"the status line took {took}: over its budget of {STATUSLINE_BUDGET_SECONDS * 1000:.0f} ms CPU",
            "check the runtime directory's disk and the store's size (`agent-bridge prune`)",
        )
    busy = " (the machine is busy: most of it was waiting for a CPU)" if seconds > STATUSLINE_BUDGET_SECONDS else ""
    return Finding("statusline_ok", OK, f"the status line answers in {took}{busy}")


def check_statusline(ctx: Context) -> list[Finding]:
    runs = [_time_statusline() for _ in range(STATUSLINE_RUNS)]
    answered = [run.done for run in runs if run.done is not None]
    if len(answered) < STATUSLINE_RUNS / 2:
        return [
            Finding(
                "statusline_failed",
                ERROR,
                f"the status line did not answer within {STATUSLINE_TIMEOUT_SECONDS:g} s "
                f"in {STATUSLINE_RUNS - len(answered)} of {STATUSLINE_RUNS} runs",
                "run `agent-bridge-statusline` by hand and see what it waits for",
            )
        ]
    done = next((run for run in answered if run.returncode != 0 or not run.stdout.strip()), answered[-1])
    line = done.stdout.strip()
    found = []
    if done.returncode != 0 or not line or "unavailable" in line:
        found.append(
            Finding(
                "statusline_failed",
                ERROR,
                f"the status line answered {_one_line(line)[:120]!r} (exit {done.returncode})",
                "run `agent-bridge-statusline` by hand",
            )
        )
    else:
        found.append(
            statusline_speed(
                statistics.median(run.seconds for run in runs), statistics.median(run.cpu_seconds for run in runs)
            )
        )
    found.append(_claude_settings(ctx))
    return found


def _claude_settings(ctx: Context) -> Finding:
    base = os.environ.get("CLAUDE_CONFIG_DIR")
    path = (Path(base) if base else Path.home() / ".claude") / "settings.json"
    agents = sorted(ctx.config.agents) if ctx.config is not None else []
    agent = "claude" if "claude" in agents or not agents else agents[0]
    fix = f"agent-bridge register claude --agent {agent} --statusline"
    try:
        settings = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return Finding(
            "statusline_not_configured", WARN, f"{path} does not exist: Claude Code shows no bridge status line", fix
        )
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return Finding(
            "claude_settings_unreadable",
            WARN,
            f"cannot read {path} ({type(exc).__name__})",
            f"fix {path}: Claude Code cannot read it either",
        )
    line = settings.get("statusLine") if isinstance(settings, dict) else None
    command = line.get("command") if isinstance(line, dict) else None
    from dispatcher.ops.register import is_our_statusline

    if not is_our_statusline(command):
        return Finding("statusline_not_configured", WARN, f"{path} does not run the bridge's status line", fix)
    return Finding("statusline_configured", OK, f"{path} runs {_one_line(command)[:80]!r}")


# --- stale items -------------------------------------------------------------------------


def check_stale(ctx: Context) -> list[Finding]:
    from dispatcher.core.processes import is_same_process

    conn, found, now = ctx.store(), [], clock.now()
    agents = sorted(ctx.config.agents) if ctx.config is not None else []
    for row in unsettled_attempts(conn):
        if not is_same_process(row["supervisor_pid"], row["supervisor_start_time"]):
            agent = row["agent"]
            found.append(
                Finding(
                    "stale_attempt",
                    ERROR,
                    f"the attempt at message #{row['message_id']} for {agent} is "
                    f"unfinished and its supervisor (pid {row['supervisor_pid']}) is gone",
                    f"agent-bridge listener recover --agent {agent} (a running listener settles it too)",
                    agent,
                )
            )
    for state, code in (("needs_human", "conversation_needs_human"), ("blocked", "conversation_blocked")):
        ids = views.conversations_in_state(conn, state)
        if ids:
            shown = ", ".join(f"#{i}" for i in ids[:10]) + (" …" if len(ids) > 10 else "")
            found.append(
                Finding(
                    code,
                    ERROR,
                    f"{len(ids)} conversation(s) {state}: {shown}",
                    "decide each one: the `conversation` tool (status, then complete or cancel) in a "
                    "session of its initiator",
                )
            )
    max_age = ctx.config.dispatch_max_age_seconds if ctx.config is not None else 86400
    unread = views.unread_by_recipient(conn)
    for agent in agents:
        if agent not in unread:
            continue
        count, oldest = unread[agent]
        age = now - oldest
        if age > max_age:
            found.append(
                Finding(
                    "unread_old",
                    WARN,
                    f"{agent} has {count} unread message(s), the oldest "
                    f"{_age(age)} old (past dispatch_max_age_seconds={max_age}: never dispatched)",
                    f"read them in a session of {agent}, or see `agent-bridge listener pending --agent {agent}`",
                    agent,
                )
            )
        else:
            found.append(
                Finding("unread", OK, f"{agent} has {count} unread message(s), the oldest {_age(age)} old", "", agent)
            )
    if not any(f.level == ERROR for f in found):
        found.append(Finding("nothing_stuck", OK, "no stale attempt, no conversation waiting for a human"))
    return found


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


# --- spend: what each agent's cost is known from, and daily budgets reached ----------------


def check_spend(ctx: Context) -> list[Finding]:
    from dispatcher.core.locations import PROJECT_DIR
    from dispatcher.core.spend import knows_cost

    config, found = ctx.valid_config(), []
    for agent in sorted(config.agents):
        entry = config.agents[agent]
        cli = cli_of(config.launcher_path(agent, PROJECT_DIR))
        if knows_cost(cli, entry):
            source = "its CLI reports it" if cli == "claude" else "estimated from its prices"
            found.append(Finding("cost_known", OK, f"cost: {source}", "", agent))
            continue
        capped = entry.max_cost_usd_per_task is not None or entry.max_cost_usd_per_day is not None
        found.append(
            Finding(
                "cost_unknown",
                WARN if capped else OK,
                f"cost: unknown ({cli or 'its CLI'} reports tokens, no price, and the agent has no prices)"
                + ("; its cost caps cannot apply, only token caps do" if capped else ""),
                f'add "prices": {{"input": ..., "output": ...}} (USD per million tokens, your provider\'s) '
                f"to agents.{agent} in config.json",
                agent,
            )
        )
    if ctx.conn is not None and ctx.schema_current:
        found += _budgets_reached(ctx.conn, config)
    return found


def _budgets_reached(conn: Connection, config: "BridgeConfig") -> list[Finding]:
    from dispatcher.dispatch.control import daily_budget

    found = []
    for agent in sorted(config.agents):
        budget = daily_budget(conn, agent, config, clock.now())
        if budget is not None and budget["reached"] is not None:
            found.append(
                Finding(
                    "budget_reached",
                    WARN,
                    f"{budget['reached']} reached today: budget reached, resets at 00:00 local; "
                    "its listener holds new tasks (held_budget) until then",
                    f"raise agents.{agent}.{budget['reached']} in config.json to go on today, or wait",
                    agent,
                )
            )
    return found


# --- running them ------------------------------------------------------------------------


def run_checks() -> list[Finding]:
    from dispatcher.core.locations import InvalidSetting, Locations

    try:
        locations = Locations.from_env()
    except InvalidSetting as exc:
        return [Finding("invalid_setting", ERROR, _one_line(exc.message), f"fix or unset {exc.variable}")]
    ctx = Context(locations)
    try:
        findings = _safe(check_store, ctx) + _safe(check_runtime, ctx) + _safe(check_config, ctx)
        if ctx.config is not None:
            for check in (
                check_launchers,
                check_workspaces,
                check_isolation,
                check_clis,
                check_auth,
                check_permissions,
                check_listeners,
                check_units,
                check_spend,
            ):
                findings += _safe(check, ctx)
        findings += _safe(check_statusline, ctx)
        if ctx.conn is not None and ctx.schema_current:
            findings += _safe(check_stale, ctx)
            findings += _safe(check_worktrees, ctx)
    finally:
        if ctx.conn is not None:
            ctx.conn.close()
    return findings


def _safe(check, ctx: Context) -> list[Finding]:
    """A check that fails unexpectedly is one finding, not the end of the report."""
    try:
        return check(ctx)
    except Exception as exc:  # noqa: BLE001 - a check that fails unexpectedly is one finding, not the end of the report
        name = check.__name__.removeprefix("check_")
        return [
            Finding(
                "check_failed",
                ERROR,
                f"the {name} check failed ({type(exc).__name__}: {_one_line(exc)[:160]})",
                "run again with AGENT_BRIDGE_LOG_LEVEL=DEBUG and report it",
            )
        ]


def report(findings: list[Finding]) -> dict:
    errors = sum(f.level == ERROR for f in findings)
    warnings = sum(f.level == WARN for f in findings)
    return {"ok": errors == 0, "errors": errors, "warnings": warnings, "findings": [asdict(f) for f in findings]}


def render(findings: list[Finding]) -> str:
    lines = []
    for f in findings:
        who = f"[{f.agent}] " if f.agent else ""
        fix = f" — fix: {f.fix}" if f.fix and f.level != OK else ""
        lines.append(f"{f.level.upper():5} {f.code}: {who}{f.message}{fix}")
    errors = sum(f.level == ERROR for f in findings)
    warnings = sum(f.level == WARN for f in findings)
    lines.append(f"{errors} error(s), {warnings} warning(s)")
    return "\n".join(lines)
