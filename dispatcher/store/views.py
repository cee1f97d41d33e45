"""The read-only queries behind the views: ``top``, ``doctor``, ``show``, ``listener status``
and the status line. Ids, enums, numbers and agent names, except where a view shows a
message on purpose (``show``). Nothing here writes."""

import sqlite3
from typing import Any, NamedTuple

from dispatcher.store.types import Connection


def limit_busy_wait(conn: Connection, milliseconds: int) -> None:
    """Wait at most this long for a writer's lock (a status line never waits long)."""
    if isinstance(conn, sqlite3.Connection):
        conn.execute(f"PRAGMA busy_timeout = {int(milliseconds)}")
    else:
        conn.execute(f"SET lock_timeout = {int(milliseconds)}")


def server_version(conn: Connection) -> str:
    """The PostgreSQL server's version (doctor's ``store_ok`` names it)."""
    return str(conn.execute("SHOW server_version").fetchone()[0])


def integrity_problems(conn: Connection, limit: int) -> list[str]:
    """SQLite's quick check: ``["ok"]`` for a sound file, else up to ``limit`` problems."""
    return [str(row[0]) for row in conn.execute("PRAGMA quick_check").fetchmany(limit)]


# -- the ledger ------------------------------------------------------------------------------
class LedgerPart(NamedTuple):
    attempts: int
    cost_usd: float | None
    input_tokens: int | None
    output_tokens: int | None
    overshoot_usd: float | None


_TOTALS = """
SELECT count(*), sum(cost_usd), sum(input_tokens), sum(output_tokens), sum(cost_overshoot_usd),
       sum(CASE WHEN finished_at >= :day THEN 1 ELSE 0 END), sum(CASE WHEN finished_at >= :day THEN cost_usd END),
       sum(CASE WHEN finished_at >= :day THEN input_tokens END),
       sum(CASE WHEN finished_at >= :day THEN output_tokens END),
       sum(CASE WHEN finished_at >= :day THEN cost_overshoot_usd END)
FROM dispatch_attempts WHERE agent = :agent AND state = 'finished'
"""


def ledger_totals(conn: Connection, agent: str, since: float) -> tuple[LedgerPart, LedgerPart]:
    """The agent's finished attempts: (all time, finished since ``since``)."""
    row = tuple(conn.execute(_TOTALS, {"agent": agent, "day": since}).fetchone())
    return LedgerPart(row[0] or 0, *row[1:5]), LedgerPart(row[5] or 0, *row[6:10])


# -- attempts, conversations, inboxes (top, doctor) ------------------------------------------
def unsettled_attempt_times(conn: Connection) -> list[tuple[int, str, str, float, float | None]]:
    """(message id, agent, state, started_at, deadline) of each unfinished attempt, oldest first."""
    return [
        tuple(row)
        for row in conn.execute(
            "SELECT message_id, agent, state, started_at, deadline FROM dispatch_attempts"
            " WHERE state != 'finished' ORDER BY started_at"
        )
    ]


def recent_outcomes(
    conn: Connection, limit: int
) -> list[tuple[int, str, str | None, str | None, float | None, float | None, str | None]]:
    """(message id, agent, outcome, error_kind, duration, cost, cli_status) of the last finished attempts."""
    return [
        tuple(row)
        for row in conn.execute(
            "SELECT message_id, agent, outcome, error_kind, duration_seconds, cost_usd, cli_status FROM dispatch_attempts"
            " WHERE state = 'finished' ORDER BY finished_at DESC, message_id DESC LIMIT ?",
            (limit,),
        )
    ]


def latest_diagnostics(conn: Connection) -> tuple[int, str, str | None] | None:
    """(message id, agent, diagnostics JSON) of the attempt started last; None without one."""
    row = conn.execute(
        "SELECT message_id, agent, diagnostics FROM dispatch_attempts ORDER BY started_at DESC, message_id DESC LIMIT 1"
    ).fetchone()
    return None if row is None else (row[0], row[1], row[2])


def active_conversation_costs(
    conn: Connection,
) -> list[tuple[int, str, str, int, int, float | None, float | None]]:
    """(id, initiator, recipient, turns, max turns, cost cap, recorded cost) of each active conversation."""
    return [
        tuple(row)
        for row in conn.execute(
            "SELECT c.id, c.initiator, c.recipient, c.turn_count, c.max_turns, c.max_cost_usd,"
            " (SELECT SUM(a.cost_usd) FROM messages AS m JOIN dispatch_attempts AS a ON a.message_id = m.id"
            "  WHERE m.conversation_id = c.id)"
            " FROM conversations AS c WHERE c.state = 'active' ORDER BY c.id"
        )
    ]


def conversations_in_state(conn: Connection, state: str) -> list[int]:
    return [int(r[0]) for r in conn.execute("SELECT id FROM conversations WHERE state = ? ORDER BY id", (state,))]


def unread_by_recipient(conn: Connection) -> dict[str, tuple[int, float]]:
    """Each recipient with unacknowledged messages: (how many, the oldest's created_at)."""
    return {
        recipient: (count, oldest)
        for recipient, count, oldest in conn.execute(
            "SELECT recipient, COUNT(*), MIN(created_at) FROM messages WHERE acknowledged_at IS NULL GROUP BY recipient"
        )
    }


# -- one message (show) ----------------------------------------------------------------------
def replies_to(conn: Connection, message_id: int) -> list[dict[str, Any]]:
    """Every reply to ``message_id``, text included (``show`` prints them), by id."""
    cur = conn.execute(
        "SELECT id, sender, kind, origin, created_at, text FROM messages WHERE reply_to = ? ORDER BY id", (message_id,)
    )
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur]
