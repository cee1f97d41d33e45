"""Read and steer one agent's listener from outside: status, progress line, enable, disable,
and the read-only backlog report. Shared by the CLI and the MCP ``listener`` tool.

Nothing here takes the listener's lock or writes to the store: status is read from
/proc/locks and the progress document, the backlog from a read-only connection.
"""

import os
import sys
import time
from collections.abc import Callable
from typing import Any

from dispatcher.core import clock
from dispatcher.core.config_view import budget_day_end, budget_day_start
from dispatcher.core.diffstat import worktree_summary
from dispatcher.core.locations import PROJECT_DIR, LocationsLike, is_postgres_url
from dispatcher.core.private_files import open_private_lock
from dispatcher.core.processes import age_seconds, flock_holder, this_host
from dispatcher.dispatch import lease
from dispatcher.dispatch.paths import AgentPaths
from dispatcher.dispatch.progress import read_progress, render_line
from dispatcher.store import STORE_ERRORS, Connection
from dispatcher.store.attempts import get_attempt
from dispatcher.store.listeners import listener_holder
from dispatcher.store.readonly import open_read_only
from dispatcher.store.store_clock import store_now
from dispatcher.store.views import LedgerPart, ledger_totals
from dispatcher.store.worktrees import recent_worktrees

# The status line imports this module: pydantic, the store and systemd helpers are
# imported inside the functions that need them, to keep that path fast.

# A live listener writes its first document at once; missing after this long means old code.
STARTUP_GRACE_SECONDS = 5.0


def _config_error(settings: LocationsLike, agent: str) -> str | None:
    from dispatcher.core.config import ConfigError, load_config

    try:
        config = load_config(settings.config_path())
    except ConfigError as exc:
        return exc.reason
    return None if agent in config.agents else f"agent {agent!r} is not declared in {settings.config_path()}"


def _late_result_ids(settings: LocationsLike, last: dict) -> list[int] | None:
    """Results that came after the last attempt's non-success verdict; None when the store cannot tell."""
    from dispatcher.bridge.messages import late_result_ids  # the one definition, shared with get_message

    if not isinstance(last.get("message_id"), int) or isinstance(last.get("message_id"), bool):
        return []
    try:
        conn = _read_only(settings, named_rows=True)
        if conn is None:
            return None
        try:
            attempt = get_attempt(conn, last["message_id"])
            return late_result_ids(conn, last["message_id"], attempt) if attempt else []
        finally:
            conn.close()
    except STORE_ERRORS:  # status is how one looks at a broken store: it never fails on one
        return None


def _money(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def agent_totals(conn: Connection, agent: str, now: float) -> dict:
    """The agent's ledger: finished attempts, cost and tokens, today (since 00:00 UTC) and all time."""

    def part(p: LedgerPart) -> dict:
        return {
            "attempts": p.attempts,
            "cost_usd": _money(p.cost_usd),
            "input_tokens": p.input_tokens,
            "output_tokens": p.output_tokens,
            "overshoot_usd": _money(p.overshoot_usd),
        }

    all_time, today = ledger_totals(conn, agent, now - now % 86400)
    return {"all_time": part(all_time), "today": part(today)}


def _agent_totals(settings: LocationsLike, agent: str) -> dict | None:
    """None when the store cannot tell (missing, older schema, unreadable)."""
    try:
        conn = _read_only(settings)
        if conn is None:
            return None
        try:
            return agent_totals(conn, agent, clock.now())
        finally:
            conn.close()
    except STORE_ERRORS:
        return None


def listener_status(
    settings: LocationsLike,
    agent: str,
    check_config: bool = True,
    late_results: bool = True,
    totals: bool = True,
    conn: Connection | None = None,
    elsewhere_of: Callable[[], dict | None] | None = None,
) -> dict:
    """``check_config=False`` skips validating config.json (the status line's fast path);
    a running listener still reports an invalid config through its ``error`` stage.
    ``late_results=False`` skips the one read-only store query behind ``last.late_result_ids``;
    ``totals=False`` the one behind ``totals`` (the agent's cost and tokens, today and all time)."""
    paths = AgentPaths.of(settings, agent)
    holder = flock_holder(paths.lock)
    doc, problem = read_progress(paths.progress)
    progress = doc or {}  # no document only with a problem, each handled below before it is read
    config_error = _config_error(settings, agent) if check_config else None
    state: str | None = None
    # ``elsewhere_of``: the caller read it already (the status line, from the counts it keeps).
    elsewhere = (elsewhere_of or (lambda: _listener_elsewhere(settings, agent, conn)))() if holder is None else None
    if holder is None:
        stage = "elsewhere" if elsewhere else "stopped"
    elif problem == "missing_file":
        age = age_seconds(holder)
        young = age is not None and age < STARTUP_GRACE_SECONDS
        stage, state = ("starting", None) if young else ("unknown", "missing_file")
    elif problem == "unreadable":
        stage, state = "unknown", "unreadable"
    elif problem == "no_format_version":
        stage, state = "legacy", "no_format_version"
    elif progress.get("listener_pid") != holder:
        stage, state = "unknown", "stale_pid"
    else:
        stage = progress.get("stage", "unknown")
    if config_error:
        stage = "error"
    trusted = doc if problem is None and state is None else None
    last = (trusted or {}).get("last")
    if late_results and isinstance(last, dict):
        last = {**last, "late_result_ids": _late_result_ids(settings, last)}
    return {
        "agent": agent,
        "enabled": not paths.disabled_marker.exists(),
        "running": holder is not None,  # on this host
        "pid": holder,
        "elsewhere": elsewhere,
        "stage": stage,
        "progress_state": state,
        "progress": trusted,
        "last": last,
        "config_error": config_error,
        # The launcher-relevant variables the running listener took: names only (dispatch/environment.py).
        "environment": ((trusted or {}).get("environment") or {}).get("names") if holder is not None else None,
        # The agent CLIs the running listener's PATH finds (None: not running, or it did not record them).
        "clis": ((trusted or {}).get("environment") or {}).get("clis") if holder is not None else None,
        "totals": _agent_totals(settings, agent) if totals else None,
        "budget": _daily_budget(settings, agent) if totals else None,
        "worktrees": _worktrees(settings, agent) if totals else None,
    }


RECENT_WORKTREES = 10


def worktree_rows(conn: Connection, agent: str | None, limit: int = RECENT_WORKTREES) -> list[dict]:
    """The newest attempts' branches and diffstats (``status`` and ``top``): payload-free."""
    return [
        {"message_id": row["message_id"], "agent": row["agent"], "outcome": row["outcome"], **summary}
        for row in recent_worktrees(conn, agent, limit)
        if (summary := worktree_summary(row)) is not None
    ]


def _worktrees(settings: LocationsLike, agent: str) -> list[dict] | None:
    """None when the store cannot tell (missing, older schema, unreadable)."""
    try:
        conn = _read_only(settings, named_rows=True)
        if conn is None:
            return None
        try:
            return worktree_rows(conn, agent)
        finally:
            conn.close()
    except STORE_ERRORS:
        return None


def _listener_elsewhere(settings: LocationsLike, agent: str, conn: Connection | None = None) -> dict | None:
    """The agent's listener on another host of a shared store, while it renews its lease (``host``,
    ``pid``, ``renewed_seconds_ago``); None otherwise, and on a SQLite store (one host's) without
    a query. ``conn``: the caller's open connection to read it with (else one is opened here)."""
    if not is_postgres_url(settings.db):
        return None
    own: Connection | None = None
    try:
        if conn is None:
            conn = own = _read_only(settings)
            if conn is None:
                return None
        holder, now = listener_holder(conn, agent), store_now(conn)
    except STORE_ERRORS:
        return None
    finally:
        if own is not None:
            own.close()
    here = this_host()
    if holder is None or holder.host == here or not lease.holder_alive(holder, here, now):
        return None
    return {"host": holder.host, "pid": holder.pid, "renewed_seconds_ago": round(now - (holder.renewed_at or now), 1)}


def daily_budget(conn: Connection, agent: str, config: Any, now: float) -> dict | None:
    """The agent's daily budgets and today's spend against them (since local midnight): which
    cap is reached (None: none) and when it resets. None when the agent has no daily cap."""
    from dispatcher.core.spend import daily_cap_reached, has_daily_cap
    from dispatcher.store.spend import spend_since

    agent_config = config.agents.get(agent)
    if agent_config is None or not has_daily_cap(agent_config):
        return None
    cost, tokens = spend_since(conn, agent, budget_day_start(config, now))
    return {
        "reached": daily_cap_reached(cost, tokens, agent_config),
        "today_cost_usd": _money(cost),
        "today_tokens": tokens,
        "max_cost_usd_per_day": agent_config.max_cost_usd_per_day,
        "max_tokens_per_day": agent_config.max_tokens_per_day,
        "resets_at": clock.iso(budget_day_end(config, now)),
    }


def _daily_budget(settings: LocationsLike, agent: str) -> dict | None:
    """None when the agent has no daily cap, or the config or the store cannot tell."""
    from dispatcher.core.config import ConfigError, load_config

    try:
        config = load_config(settings.config_path())
        conn = _read_only(settings)
        if conn is None:
            return None
        try:
            return daily_budget(conn, agent, config, clock.now())
        finally:
            conn.close()
    except STORE_ERRORS + (ConfigError,):
        return None


def _error_head(error: object) -> str:
    """A short name for the listener's error: the code it starts with (``config_invalid``,
    ``workspace_missing``, ``workspace_unsafe``: doctor's codes), else ``error``."""
    if not isinstance(error, str) or not error:
        return "error"
    head = error.split(":", 1)[0].strip()
    return head[:40] if head.replace("_", "").replace(" ", "").isalnum() else "error"


def progress_line(
    settings: LocationsLike,
    agent: str,
    check_config: bool = True,
    elsewhere_of: Callable[[], dict | None] | None = None,
) -> str:
    status = listener_status(settings, agent, check_config, late_results=False, totals=False, elsewhere_of=elsewhere_of)
    detail = None
    if status["config_error"]:
        detail = "config_invalid: see `agent-bridge listener status`"
    elif status["progress_state"]:
        detail = status["progress_state"]
    elif not status["enabled"]:
        detail = "disabled"
    elif status["elsewhere"]:
        detail = f"on host {status['elsewhere']['host']}"
    elif status["stage"] == "error" and status["progress"]:
        detail = f"{_error_head(status['progress'].get('error'))}: see `agent-bridge listener status`"
    elif status["progress"] and status["progress"].get("auto") is False:
        detail = "auto off"
    return render_line(agent, status["stage"], status["progress"], detail)


def disable(settings: LocationsLike, agent: str) -> dict:
    paths = AgentPaths.of(settings, agent).ensure()
    os.close(open_private_lock(paths.disabled_marker))  # a planted link or FIFO is refused
    return {
        "agent": agent,
        "enabled": False,
        "running": flock_holder(paths.lock) is not None,
        "note": "the listener takes no new task, lets a running worker finish, and exits",
    }


def enable_warnings(settings: LocationsLike, agent: str) -> list[str]:
    """What will keep the enabled listener from dispatching, as ``code: what to do`` lines."""
    from dispatcher.core.config import ConfigError, load_config
    from dispatcher.core.settings import BridgeSettings
    from dispatcher.dispatch.environment import taken, unset_for, unset_problem

    try:
        config = load_config(settings.config_path())
    except ConfigError as exc:
        return [f"config_invalid: {exc.reason}"]
    if agent not in config.agents:
        return []
    warnings = []
    if not config.agents[agent].auto:
        warnings.append(auto_off_warning(agent, settings.config_path()))
    problem = config.workspace_problem(agent, BridgeSettings().workspace, settings)
    if problem:
        warnings.append(f"{problem[0]}: {problem[1]}")
    launcher = config.launcher_path(agent, PROJECT_DIR)
    if missing := unset_for(launcher, taken(os.environ)):
        what, fix = unset_problem(agent, launcher, missing, "this shell")
        warnings.append(f"launcher_variable_unset: {what}. Fix: {fix}")
    return warnings


def auto_off_warning(agent: str, config_path: object) -> str:
    """An agent whose ``auto`` is off: its listener never starts a worker on its own."""
    return (
        f"auto_off: {agent}'s auto is off in {config_path}, so its listener dispatches nothing: its tasks wait for "
        f"a person (`agent-bridge inbox --agent {agent}`). To have them dispatched, set agents.{agent}.auto to true; "
        "one task by hand: `agent-bridge dispatch MESSAGE_ID`"
    )


def environment_warning(settings: LocationsLike, agent: str, pid: int | None) -> list[str]:
    """When the running listener (``pid``) took other launcher variables than this process has."""
    from dispatcher.dispatch.environment import difference

    doc, problem = read_progress(AgentPaths.of(settings, agent).progress)
    if pid is None or problem is not None or doc is None or doc.get("listener_pid") != pid:
        return []  # not written yet, or another listener's: nothing to compare with
    differs = difference(doc.get("environment"), os.environ)
    if differs is None:
        return []
    return [
        f"environment_differs: the running listener of {agent} (pid {pid}) took another environment than "
        f"this shell's: {differs}. Its workers get its own; to give it this one: `agent-bridge listener "
        f"disable --agent {agent}`, wait until `listener status` says it stopped, then enable it again"
    ]


def enable(settings: LocationsLike, agent: str, wait_seconds: float = 10.0) -> dict:
    """Remove the marker and start the listener (idempotent: a second one exits at once);
    ``warnings``: what will keep it from dispatching (``enable_warnings``), and a listener
    already running with another launcher environment than the caller's."""
    import subprocess  # here: the status line imports this module, and never starts a process

    from dispatcher.dispatch.systemd_unit import unit_installed, unit_name, user_manager_available

    warnings = enable_warnings(settings, agent)
    paths = AgentPaths.of(settings, agent).ensure()
    paths.disabled_marker.unlink(missing_ok=True)
    holder = flock_holder(paths.lock)
    if holder is not None:
        return {
            "agent": agent,
            "enabled": True,
            "running": True,
            "pid": holder,
            "started": "already_running",
            "warnings": warnings + environment_warning(settings, agent, holder),
        }
    how = "detached"
    if unit_installed() and user_manager_available():
        done = subprocess.run(["systemctl", "--user", "start", unit_name(agent)], capture_output=True, timeout=30)  # noqa: S603, S607 - a fixed argv; systemctl from PATH, as the user runs it
        how = "systemd" if done.returncode == 0 else "detached"
    if how == "detached":
        subprocess.Popen(  # noqa: S603 - our own interpreter and module, fixed arguments (the agent id is validated)
            [sys.executable, "-m", "dispatcher", "listener", "run", "--agent", agent],
            cwd=PROJECT_DIR,
            env=os.environ.copy(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    deadline = clock.monotonic() + wait_seconds
    while (holder := flock_holder(paths.lock)) is None and clock.monotonic() < deadline:
        time.sleep(0.05)
    return {
        "agent": agent,
        "enabled": True,
        "running": holder is not None,
        "pid": holder,
        "started": how,
        "warnings": warnings,
    }


RESTART_WAIT_SECONDS = 60.0


def restart(settings: LocationsLike, agent: str, wait_seconds: float = RESTART_WAIT_SECONDS) -> dict:
    """Stop the running listener (the disable marker: it lets a running worker finish), wait up
    to ``wait_seconds`` for it to exit, then ``enable`` a new one with this process's environment.
    ``restart_timeout`` when it is still finishing a worker: it stays disabled, and says so."""
    from dispatcher.core.errors import BridgeError

    lock = AgentPaths.of(settings, agent).ensure().lock
    old = flock_holder(lock)
    if old is not None:
        disable(settings, agent)
        deadline = clock.monotonic() + wait_seconds
        while flock_holder(lock) is not None and clock.monotonic() < deadline:
            time.sleep(0.05)
        if flock_holder(lock) is not None:
            raise BridgeError(
                "restart_timeout",
                f"the listener of {agent} (pid {old}) is still finishing its worker after {wait_seconds:g} s; it takes "
                f"no new task and exits when the worker ends. Rerun `agent-bridge listener restart --agent {agent}` "
                "then (or `listener enable` to keep the old one).",
            )
    started = enable(settings, agent)
    return {**started, "stopped_pid": old}


def _read_only(settings: LocationsLike, *, named_rows: bool = False) -> Connection | None:
    return open_read_only(settings.db, named_rows=named_rows)


def pending(settings: LocationsLike, agent: str) -> dict:
    """Never-attempted messages by what the listener would do with them (ids and ages only):
    ``dispatchable`` now, ``held_auto_off`` (the agent's ``auto`` is false: left for a
    human), ``stale`` (older than ``dispatch_max_age_seconds``: left for a human),
    ``held_interactive`` (waiting for a live interactive session to claim it, until
    ``interactive_grace_seconds`` pass: ``release_in_seconds``), ``held_budget`` (the agent
    reached a daily budget: ``release_in_seconds`` until the next local midnight; or, with
    ``budget_running``, its running workers' reservations could: until one ends), ``already_answered``
    (a result from the agent answers it but it is not acknowledged: never dispatched)."""
    from dispatcher.core.config import ConfigError, load_config
    from dispatcher.dispatch import queue
    from dispatcher.store import SCHEMA_VERSION, schema_version

    report: dict[str, Any] = {
        "agent": agent,
        "auto": None,
        "dispatchable": [],
        "held_auto_off": [],
        "stale": [],
        "held_interactive": [],
        "already_answered": [],
        "held_budget": [],
        "error": None,
    }
    try:
        config = load_config(settings.config_path())
    except ConfigError as exc:
        report["error"] = f"config_invalid: {exc.reason}"
        return report
    report["auto"] = config.agents[agent].auto if agent in config.agents else None
    conn = _read_only(settings)
    if conn is None:
        return report
    try:
        if schema_version(conn) < SCHEMA_VERSION:
            report["error"] = "the store's schema is older; start the server or listener once to migrate it"
            return report
        now = clock.now()
        backlog = queue.classify(conn, agent, config, now)
        for key in ("dispatchable", "held_auto_off", "stale"):
            report[key] = [
                {"id": c.message_id, "kind": c.kind, "sender": c.sender, "age_seconds": round(now - c.created_at, 1)}
                for c in getattr(backlog, key)
            ]
        report["held_interactive"] = [
            {
                "id": c.message_id,
                "kind": c.kind,
                "sender": c.sender,
                "age_seconds": round(now - c.created_at, 1),
                "release_in_seconds": round(max(0.0, queue.held_until(c, config) - now), 1),
            }
            for c in backlog.held_interactive
        ]
        report["already_answered"] = [
            {"id": c.message_id, "kind": c.kind, "sender": c.sender, "age_seconds": round(now - c.created_at, 1)}
            for c in backlog.answered
        ]
        release = round(budget_day_end(config, now) - now, 1)
        report["held_budget"] = [
            {
                "id": c.message_id,
                "kind": c.kind,
                "sender": c.sender,
                "age_seconds": round(now - c.created_at, 1),
                "daily_cap": c.daily_cap,
                # held while the agent's workers run (their reservations): released when one ends
                "budget_running": c.budget_running,
                "release_in_seconds": None if c.budget_running else release,
            }
            for c in backlog.held_budget
        ]
    finally:
        conn.close()
    return report
