"""Deliberate, foreground operations: settle stale attempts, report or run the backlog,
and dispatch one message on purpose (``agent-bridge dispatch ID``)."""

import logging
import time

from ..config import ConfigError, load_config
from ..errors import DispatchRefused
from ..logs import configure_logging
from ..settings import BridgeSettings
from ..store import open_store
from . import queue
from .attempts import get_attempt
from .paths import AgentPaths
from .reconcile import reconcile
from .supervisor import supervise


def _log_to(settings: BridgeSettings, agent: str) -> None:
    paths = AgentPaths.of(settings, agent).ensure()
    configure_logging(stderr_level=logging.getLevelName(settings.log_level), log_file=paths.log)


def _attempt_summary(conn, message_id: int) -> dict:
    attempt = get_attempt(conn, message_id)
    if attempt is None:
        return {"message_id": message_id, "outcome": None}
    return {
        "message_id": message_id, "state": attempt["state"], "outcome": attempt["outcome"],
        "error_kind": attempt["error_kind"], "exit_code": attempt["exit_code"],
        "duration_seconds": attempt["duration_seconds"],
    }


def dispatch_one(settings: BridgeSettings, message_id: int) -> dict:
    try:
        config = load_config(settings.config_path())
    except ConfigError as exc:
        return {"message_id": message_id, "outcome": None, "error": f"config: {exc.reason}"}
    conn = open_store(settings.db)
    try:
        row = conn.execute("SELECT recipient FROM messages WHERE id = ?", (message_id,)).fetchone()
        if row is not None:
            _log_to(settings, row[0])
        supervise(settings, config, message_id, manual=True)
        return _attempt_summary(conn, message_id)
    except DispatchRefused as exc:
        return {"message_id": message_id, "outcome": None, "error": str(exc)}
    finally:
        conn.close()


def recover(settings: BridgeSettings, agent: str, *, dispatch: bool = False) -> dict:
    _log_to(settings, agent)
    try:
        config = load_config(settings.config_path())
    except ConfigError as exc:
        return {"agent": agent, "error": f"config: {exc.reason}"}
    conn = open_store(settings.db)
    still_running = reconcile(conn, AgentPaths.of(settings, agent))
    now = time.time()
    ready = queue.dispatchable(conn, agent, now, config.dispatch_max_age_seconds, limit=1000)
    report = {
        "agent": agent,
        "attempt_still_running": still_running,
        "dispatchable": [c.message_id for c in ready],
        "stale": [c.message_id for c in queue.stale(conn, agent, now, config.dispatch_max_age_seconds)],
        "dispatched": [],
    }
    if dispatch and not still_running:
        for candidate in ready:
            try:
                supervise(settings, config, candidate.message_id)
            except DispatchRefused as exc:
                report["dispatched"].append({"message_id": candidate.message_id, "error": str(exc)})
                continue
            report["dispatched"].append(_attempt_summary(conn, candidate.message_id))
    conn.close()
    return report
