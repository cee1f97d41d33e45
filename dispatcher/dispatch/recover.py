"""Deliberate, foreground operations: settle stale attempts, report or run the backlog,
and dispatch one message on purpose (``agent-bridge dispatch ID``).

``recover --dispatch`` runs exactly what the listener would (``auto`` and the age window
included); ``dispatch ID`` is an explicit human decision and overrides ``auto`` and the
age window, nothing else (see ``queue.dispatch_refusal``)."""

import logging
from typing import Any

from dispatcher.core.config import ConfigError, load_config
from dispatcher.core.errors import DispatchRefused
from dispatcher.core.logs import configure_logging
from dispatcher.core.settings import BridgeSettings
from dispatcher.dispatch import queue
from dispatcher.dispatch.attempts import get_attempt
from dispatcher.dispatch.paths import AgentPaths
from dispatcher.dispatch.reconcile import reconcile
from dispatcher.dispatch.supervisor import supervise
from dispatcher.store import open_store
from dispatcher.store.messages import fetch_message
from dispatcher.store.store_clock import store_now


def _log_to(settings: BridgeSettings, agent: str) -> None:
    paths = AgentPaths.of(settings, agent).ensure()
    configure_logging(stderr_level=logging.getLevelName(settings.log_level), log_file=paths.log)


def _attempt_summary(conn, message_id: int) -> dict:
    attempt = get_attempt(conn, message_id)
    if attempt is None:
        return {"message_id": message_id, "outcome": None}
    return {
        "message_id": message_id,
        "state": attempt["state"],
        "outcome": attempt["outcome"],
        "error_kind": attempt["error_kind"],
        "exit_code": attempt["exit_code"],
        "duration_seconds": None if attempt["duration_seconds"] is None else round(attempt["duration_seconds"], 1),
    }


def dispatch_one(settings: BridgeSettings, message_id: int) -> dict:
    """One manual attempt; raises ConfigError or DispatchRefused (nothing launched)."""
    config = load_config(settings.config_path())
    conn = open_store(settings.db)
    try:
        message = fetch_message(conn, message_id)
        if message is not None:
            _log_to(settings, message["recipient"])
        supervise(settings, config, message_id, manual=True)
        return _attempt_summary(conn, message_id)
    finally:
        conn.close()


def recover(settings: BridgeSettings, agent: str, *, dispatch: bool = False) -> dict:
    _log_to(settings, agent)
    try:
        config = load_config(settings.config_path())
    except ConfigError as exc:
        return {"agent": agent, "error": f"config_invalid: {exc.reason}"}
    conn = open_store(settings.db)
    still_running = bool(reconcile(conn, AgentPaths.of(settings, agent)))
    backlog = queue.classify(conn, agent, config, store_now(conn))
    report: dict[str, Any] = {
        "agent": agent,
        "attempt_still_running": still_running,
        "dispatchable": [c.message_id for c in backlog.dispatchable],
        "held_auto_off": [c.message_id for c in backlog.held_auto_off],
        "stale": [c.message_id for c in backlog.stale],
        "held_interactive": [c.message_id for c in backlog.held_interactive],
        "held_budget": [c.message_id for c in backlog.held_budget],
        "dispatched": [],
    }
    if dispatch and not still_running:
        # The same rule as the listener's (auto and age included): each supervise re-checks it
        # inside the barrier, so a message claimed or answered meanwhile is refused, not launched.
        for candidate in backlog.dispatchable:
            try:
                supervise(settings, config, candidate.message_id)
            except DispatchRefused as exc:
                report["dispatched"].append({"message_id": candidate.message_id, "error": str(exc)})
                continue
            report["dispatched"].append(_attempt_summary(conn, candidate.message_id))
    conn.close()
    return report
