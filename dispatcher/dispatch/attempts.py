"""The attempt barrier and the attempt record.

``dispatch_attempts.message_id`` is the primary key, so inserting the row *is* the
decision to launch: a rescan, a restart, a duplicate listener or a second supervisor
loses the insert and launches nothing. Attempts are never retried automatically.
"""

import json
import re
import sqlite3
import time
from typing import Any

from ..store import write_transaction

FAILURE_OUTCOMES = ("failed", "timeout", "crashed")
OUTCOMES = ("succeeded", "blocked", *FAILURE_OUTCOMES)
# Launcher diagnostics we keep: numbers, booleans and enum-like words, never free text.
_ENUM_WORD = re.compile(r"[A-Za-z0-9_.:-]{1,40}")
MAX_DIAGNOSTIC_KEYS = 32


class AlreadyAttempted(Exception):
    pass


def record_attempt(
    conn: sqlite3.Connection, *, message_id: int, agent: str, supervisor_pid: int,
    supervisor_start: float | None, deadline: float, now: float,
) -> None:
    try:
        with write_transaction(conn):
            conn.execute(
                "INSERT INTO dispatch_attempts (message_id, agent, state, started_at, supervisor_pid,"
                " supervisor_start_time, deadline) VALUES (?, ?, 'recorded', ?, ?, ?, ?)",
                (message_id, agent, now, supervisor_pid, supervisor_start, deadline),
            )
    except sqlite3.IntegrityError:
        raise AlreadyAttempted(message_id) from None


def mark_spawned(conn: sqlite3.Connection, message_id: int, worker_pid: int, worker_start: float | None) -> None:
    with write_transaction(conn):
        conn.execute(
            "UPDATE dispatch_attempts SET state = 'spawned', worker_pid = ?, worker_start_time = ?,"
            " worker_started_at = ? WHERE message_id = ?",
            (worker_pid, worker_start, time.time(), message_id),
        )


def finish_attempt(
    conn: sqlite3.Connection, message_id: int, *, outcome: str, now: float, exit_code: int | None = None,
    error_kind: str | None = None, diagnostics: dict[str, Any] | None = None,
) -> bool:
    """Settle an attempt once; returns False if someone else settled it first."""
    with write_transaction(conn):
        cur = conn.execute(
            "UPDATE dispatch_attempts SET state = 'finished', outcome = ?, exit_code = ?, error_kind = ?,"
            " finished_at = ?, duration_seconds = ? - started_at, diagnostics = ?"
            " WHERE message_id = ? AND state != 'finished'",
            (outcome, exit_code, error_kind, now, now, json.dumps(diagnostics) if diagnostics else None, message_id),
        )
        return cur.rowcount == 1


def get_attempt(conn: sqlite3.Connection, message_id: int) -> sqlite3.Row | None:
    return conn.execute("SELECT * FROM dispatch_attempts WHERE message_id = ?", (message_id,)).fetchone()


def unsettled_attempts(conn: sqlite3.Connection, agent: str) -> list[sqlite3.Row]:
    return conn.execute(
        "SELECT * FROM dispatch_attempts WHERE agent = ? AND state != 'finished' ORDER BY message_id", (agent,)
    ).fetchall()


def clean_diagnostics(raw: object) -> dict[str, Any] | None:
    """Keep scalar values under identifier keys: nothing a CLI wrote can smuggle text in."""
    if not isinstance(raw, dict):
        return None
    kept = {}
    for key, value in list(raw.items())[:MAX_DIAGNOSTIC_KEYS]:
        if not (isinstance(key, str) and len(key) <= 40 and key.isidentifier()):
            continue
        if value is None or isinstance(value, bool | int | float) or (
            isinstance(value, str) and _ENUM_WORD.fullmatch(value)
        ):
            kept[key] = value
    return kept or None
