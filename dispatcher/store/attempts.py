"""The ``dispatch_attempts`` table, and what a supervisor reads and writes around an attempt:
the worker's replies (the verdict's evidence) and the worker's claim it keeps alive.

The state machine itself (which event leaves which state) is ``dispatch.attempts.TRANSITIONS``;
the functions here apply one transition as one guarded UPDATE, inside the caller's transaction.
"""

import json
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dispatcher.core.lifecycle import FAILURE_OUTCOMES
from dispatcher.store.claims import active_claim_sql
from dispatcher.store.types import Connection, Row

OUTCOMES = ("succeeded", "blocked", *FAILURE_OUTCOMES)
# The ledger columns of an attempt (schema 4), filled from the CLI's diagnostics when it settles.
LEDGER_COLUMNS = (
    "cli_status",
    "cost_usd",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "cost_overshoot_usd",
    "denied_tools",
    "cost_source",  # schema 8
    "token_overshoot",
)


def _rows(conn: Connection) -> Connection | sqlite3.Cursor:
    """Something to execute on whose rows read by column name, whatever the connection's own row
    factory (a PostgreSQL connection's rows always do)."""
    if not isinstance(conn, sqlite3.Connection) or conn.row_factory is sqlite3.Row:
        return conn
    cur = conn.cursor()
    cur.row_factory = sqlite3.Row
    return cur


def insert_attempt(
    conn: Connection,
    *,
    message_id: int,
    agent: str,
    started_at: float,
    supervisor_pid: int,
    supervisor_start_time: str | None,
    deadline: float,
    worker_token: str,
    max_cost_usd: float | None,
    permission_level: str,
    host: str,
    lease_expires_at: float,
    max_tokens: int | None = None,
) -> None:
    """The barrier's write: the primary key refuses a second attempt (sqlite3.IntegrityError)."""
    conn.execute(
        "INSERT INTO dispatch_attempts (message_id, agent, state, started_at, supervisor_pid,"
        " supervisor_start_time, deadline, worker_token, max_cost_usd, permission_level, max_tokens,"
        " host, lease_expires_at)"
        " VALUES (?, ?, 'recorded', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            message_id,
            agent,
            started_at,
            supervisor_pid,
            supervisor_start_time,
            deadline,
            worker_token,
            max_cost_usd,
            permission_level,
            max_tokens,
            host,
            lease_expires_at,
        ),
    )


def extend_attempt_lease(conn: Connection, message_id: int, until: float) -> bool:
    """Move an unsettled attempt's lease on to ``until`` (never back); False when it is settled."""
    cur = conn.execute(
        "UPDATE dispatch_attempts SET lease_expires_at = CASE WHEN lease_expires_at > ? THEN lease_expires_at"
        " ELSE ? END WHERE message_id = ? AND state != 'finished'",
        (until, until, message_id),
    )
    return cur.rowcount == 1


def _move(
    conn: Connection,
    message_id: int,
    transition: tuple[str, tuple[str, ...]],
    assignments: Mapping[str, object],
    *,
    duration_from: float | None = None,
) -> bool:
    """One guarded UPDATE to ``transition``'s target state, from one of its allowed states;
    False when the attempt is in none. ``duration_from``: also set ``duration_seconds`` to it
    minus ``started_at`` (0 when a clock step put it before the start)."""
    target, allowed_from = transition
    columns = ", ".join(f"{column} = ?" for column in assignments)
    duration = (
        ", duration_seconds = CASE WHEN ? > started_at THEN ? - started_at ELSE 0 END"
        if duration_from is not None
        else ""
    )
    marks = ", ".join("?" * len(allowed_from))
    extra = (duration_from, duration_from) if duration_from is not None else ()
    cur = conn.execute(
        f"UPDATE dispatch_attempts SET state = ?, {columns}{duration}"  # noqa: S608 - column names are this module's constants; every value is a bound parameter
        f" WHERE message_id = ? AND state IN ({marks})",
        (target, *assignments.values(), *extra, message_id, *allowed_from),
    )
    return cur.rowcount == 1


def record_spawn(
    conn: Connection,
    message_id: int,
    transition: tuple[str, tuple[str, ...]],
    *,
    worker_pid: int,
    worker_start_time: str | None,
    worker_started_at: float,
) -> bool:
    return _move(
        conn,
        message_id,
        transition,
        {"worker_pid": worker_pid, "worker_start_time": worker_start_time, "worker_started_at": worker_started_at},
    )


def record_finish(
    conn: Connection,
    message_id: int,
    transition: tuple[str, tuple[str, ...]],
    *,
    outcome: str,
    exit_code: int | None,
    error_kind: str | None,
    finished_at: float,
    diagnostics: dict[str, Any] | None,
    ledger: Mapping[str, Any],
    duration_seconds: float | None = None,
) -> bool:
    """Settle the attempt: its outcome, duration (``duration_seconds`` as measured, else from
    ``finished_at``; never below 0), diagnostics (JSON) and ledger columns."""
    return _move(
        conn,
        message_id,
        transition,
        {
            "outcome": outcome,
            "exit_code": exit_code,
            "error_kind": error_kind,
            "finished_at": finished_at,
            "diagnostics": json.dumps(diagnostics) if diagnostics else None,
            **{column: ledger.get(column) for column in LEDGER_COLUMNS},
            **({} if duration_seconds is None else {"duration_seconds": max(0.0, duration_seconds)}),
        },
        duration_from=finished_at if duration_seconds is None else None,
    )


def get_attempt(conn: Connection, message_id: int) -> Row | None:
    row: Row | None = (
        _rows(conn).execute("SELECT * FROM dispatch_attempts WHERE message_id = ?", (message_id,)).fetchone()
    )
    return row


def unsettled_attempts(conn: Connection, agent: str | None = None) -> list[Row]:
    """Attempts not finished yet (of ``agent``), by message id."""
    if agent is None:
        return (
            _rows(conn)
            .execute("SELECT * FROM dispatch_attempts WHERE state != 'finished' ORDER BY message_id")
            .fetchall()
        )
    return (
        _rows(conn)
        .execute(
            "SELECT * FROM dispatch_attempts WHERE agent = ? AND state != 'finished' ORDER BY message_id", (agent,)
        )
        .fetchall()
    )


@dataclass(frozen=True)
class AttemptState:
    agent: str
    state: str
    finished_at: float | None


def attempt_state(conn: Connection, message_id: int) -> AttemptState | None:
    """Whose attempt it is, its state and when it finished; None without an attempt row."""
    row = conn.execute(
        "SELECT agent, state, finished_at FROM dispatch_attempts WHERE message_id = ?", (message_id,)
    ).fetchone()
    return None if row is None else AttemptState(*tuple(row))


# -- the verdict's evidence ------------------------------------------------------------------
def worker_replies(conn: Connection, message_id: int, *, sender: str, recipient: str) -> list[tuple[str, str]]:
    """(kind, text) of the tasks and results answering ``message_id`` from ``sender`` to
    ``recipient`` that the attempt at ``message_id`` wrote (its worker's side of the turn):
    an answer from anyone else, or from before the attempt, is not this attempt's evidence."""
    rows = conn.execute(
        "SELECT kind, text FROM messages WHERE reply_to = ? AND sender = ? AND recipient = ?"
        " AND kind IN ('task', 'result') AND origin = 'agent' AND sent_by_attempt = ?",
        (message_id, sender, recipient, message_id),
    )
    return [(kind, text) for kind, text in rows]


def conversation_state(conn: Connection, conversation_id: int) -> tuple[str, float] | None:
    """A conversation's stored state and expiry; None when it is gone."""
    row = conn.execute("SELECT state, expires_at FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
    return None if row is None else (row[0], row[1])


# -- the worker's claim, kept alive by its supervisor ----------------------------------------
def active_claim(conn: Connection, message_id: int, now: float) -> tuple[str, float] | None:
    """(owner, expiry) of the active claim on an unacknowledged message; None when there is none."""
    query = f"""SELECT claim_owner, claim_expires_at FROM messages
        WHERE id = :id AND acknowledged_at IS NULL AND {active_claim_sql()}"""  # noqa: S608 - constant SQL
    row = conn.execute(
        query,
        {"id": message_id, "now": now},
    ).fetchone()
    return None if row is None else (row[0], row[1])


def extend_claim(conn: Connection, message_id: int, until: float) -> None:
    conn.execute("UPDATE messages SET claim_expires_at = ? WHERE id = ?", (until, message_id))


def running_count(conn: Connection, agent: str) -> int:
    """How many of ``agent``'s attempts are not finished yet (recorded or spawned)."""
    row = conn.execute("SELECT count(*) FROM dispatch_attempts WHERE agent = ? AND state != 'finished'", (agent,))
    return int(row.fetchone()[0])
