"""The SQL of ``agent-bridge prune``: which rows may go, in id windows and batches, and
their deletion. ``prune.py`` decides the batches, the pacing and the reference check.

A dry run records what would go in the connection-local TEMP table ``prune_gone``, so later
decisions (a conversation, a broadcast) see those messages as gone.
"""

import json
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from dispatcher.core.lifecycle import TERMINAL_CONVERSATION_STATES
from dispatcher.store.claims import active_claim_sql
from dispatcher.store.metrics import fold_into_totals
from dispatcher.store.types import Connection

_TERMINAL_SQL = "(" + ", ".join(f"'{s}'" for s in TERMINAL_CONVERSATION_STATES) + ")"

# The own rule of a message (everything except "a kept message refers to it"). An attempt that is
# unfinished (or finished after the cutoff) keeps its task and every reply to it: the replies are
# the evidence its verdict reads (``evidence.gather``), whatever their own age.
MESSAGE_MAY_GO = f"""
    m.acknowledged_at IS NOT NULL AND m.acknowledged_at <= :cutoff AND m.created_at <= :cutoff
    AND NOT {active_claim_sql("m")}
    AND NOT EXISTS (SELECT 1 FROM dispatch_attempts AS a WHERE a.message_id IN (m.id, m.reply_to)
                    AND (a.state != 'finished' OR a.finished_at IS NULL OR a.finished_at > :cutoff))
    AND (m.conversation_id IS NULL
         OR EXISTS (SELECT 1 FROM conversations AS c WHERE c.id = m.conversation_id
                    AND c.state IN {_TERMINAL_SQL} AND c.updated_at <= :cutoff))
"""  # noqa: S608 - constant SQL fragments only; every value is a bound parameter

BROADCAST_MAY_GO = """
    b.created_at <= :cutoff
    AND NOT EXISTS (SELECT 1 FROM messages AS m WHERE m.broadcast_id = b.id
                    AND m.id NOT IN (SELECT id FROM temp.prune_gone))
"""

CONVERSATION_MAY_GO = f"""
    c.state IN {_TERMINAL_SQL} AND c.updated_at <= :cutoff
    AND NOT EXISTS (SELECT 1 FROM messages AS m WHERE m.conversation_id = c.id
                    AND m.id NOT IN (SELECT id FROM temp.prune_gone))
"""  # noqa: S608 - constant SQL fragments only; every value is a bound parameter


def _ids_json(ids: Iterable[int]) -> str:
    return json.dumps(sorted(ids))


# -- the run and its batches -----------------------------------------------------------------
def start_run(conn: Connection) -> None:
    """An empty ``prune_gone`` for this connection."""
    conn.execute("CREATE TEMP TABLE IF NOT EXISTS prune_gone (id INTEGER PRIMARY KEY)")
    conn.execute("DELETE FROM temp.prune_gone")


def end_run(conn: Connection) -> None:
    conn.execute("DROP TABLE IF EXISTS temp.prune_gone")


@contextmanager
def batch(conn: Connection, dry_run: bool) -> Iterator[None]:
    """One batch's transaction: the write lock up front for a real run, a plain read for a dry one."""
    conn.execute("BEGIN" if dry_run else "BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def checkpoint(conn: Connection) -> None:
    """Copy the WAL into the store without taking the write lock (PASSIVE); PostgreSQL's server
    checkpoints by itself."""
    if isinstance(conn, sqlite3.Connection):
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()


def compact(conn: Connection) -> None:
    """Rebuild the file to give freed pages back (VACUUM: holds the write lock throughout)."""
    conn.execute("VACUUM")


# -- messages and their attempts -------------------------------------------------------------
def highest_message_id(conn: Connection) -> int | None:
    top: int | None = conn.execute("SELECT MAX(id) FROM messages").fetchone()[0]
    return top


def next_window(conn: Connection, cursor: int, size: int) -> tuple[int, int] | None:
    """The next ``size`` existing ids at or below ``cursor``, as (lo, hi)."""
    rows = conn.execute("SELECT id FROM messages WHERE id <= ? ORDER BY id DESC LIMIT ?", (cursor, size)).fetchall()
    if not rows:
        return None
    return rows[-1][0], rows[0][0]


def messages_may_go(conn: Connection, lo: int, hi: int, *, cutoff: float, now: float) -> set[int]:
    """The ids in [lo, hi] whose own rule lets them go (``MESSAGE_MAY_GO``)."""
    rows = conn.execute(
        f"SELECT m.id FROM messages AS m WHERE m.id BETWEEN :lo AND :hi AND {MESSAGE_MAY_GO}",  # noqa: S608 - constant SQL fragments only; every value is a bound parameter
        {"cutoff": cutoff, "now": now, "lo": lo, "hi": hi},
    ).fetchall()
    return {r[0] for r in rows}


_IN_FLIGHT_OPEN = f"""SELECT in_flight_message_id FROM conversations
    WHERE in_flight_message_id BETWEEN ? AND ? AND state NOT IN {_TERMINAL_SQL}"""  # noqa: S608 - constant SQL fragments only; every value is a bound parameter


def in_flight_between(conn: Connection, lo: int, hi: int) -> list[int]:
    """The in-flight message ids in [lo, hi] of conversations that are not terminal (a terminal one
    has none: the move clears it; a store written before that may still name one, which binds nothing)."""
    rows = conn.execute(_IN_FLIGHT_OPEN, (lo, hi)).fetchall()
    return [r[0] for r in rows]


def replies_between(conn: Connection, lo: int, hi: int) -> list[tuple[int, int]]:
    """(reply id, the id it answers in [lo, hi]) of each reply not already gone."""
    rows = conn.execute(
        "SELECT r.id, r.reply_to FROM messages AS r WHERE r.reply_to BETWEEN ? AND ?"
        " AND r.id NOT IN (SELECT id FROM temp.prune_gone)",
        (lo, hi),
    ).fetchall()
    return [(r[0], r[1]) for r in rows]


def with_attempts(conn: Connection, ids: Iterable[int]) -> list[int]:
    """Those of ``ids`` that have an attempt row."""
    rows = conn.execute(
        "SELECT message_id FROM dispatch_attempts WHERE message_id IN (SELECT value FROM json_each(?))",
        (_ids_json(ids),),
    )
    return [r[0] for r in rows]


def mark_gone(conn: Connection, ids: Iterable[int]) -> None:
    """A dry run: later decisions see these messages as gone."""
    conn.executemany("INSERT INTO temp.prune_gone (id) VALUES (?)", ((i,) for i in ids))


def delete_messages(conn: Connection, ids: Iterable[int]) -> None:
    """These messages and what is theirs: their attempts' approval requests, their task grants
    (``retry --allow``), their attempt rows (before the messages: they refer to them). Their
    figures go into the metrics' running totals first, in the same transaction (docs/metrics.md)."""
    ids_json = _ids_json(ids)
    fold_into_totals(conn, ids_json)
    for table in ("approvals", "task_grants", "dispatch_attempts"):
        conn.execute(f"DELETE FROM {table} WHERE message_id IN (SELECT value FROM json_each(?))", (ids_json,))  # noqa: S608 - a constant table name; the ids are bound
    conn.execute("DELETE FROM messages WHERE id IN (SELECT value FROM json_each(?))", (ids_json,))


# -- conversations and broadcasts ------------------------------------------------------------
_CONVERSATIONS_AFTER = (
    f"SELECT c.id FROM conversations AS c WHERE c.id > :last AND {CONVERSATION_MAY_GO}"  # noqa: S608 - constant SQL fragments only; every value is a bound parameter
    " ORDER BY c.id LIMIT :batch"
)
_BROADCASTS_AFTER = (
    f"SELECT b.id FROM broadcasts AS b WHERE b.id > :last AND {BROADCAST_MAY_GO}"  # noqa: S608 - constant SQL fragments only; every value is a bound parameter
    " ORDER BY b.id LIMIT :batch"
)


def _ids_after(conn: Connection, select: str, after: int, limit: int, cutoff: float) -> list[int]:
    return [r[0] for r in conn.execute(select, {"cutoff": cutoff, "last": after, "batch": limit})]


def conversations_may_go(conn: Connection, after: int, limit: int, *, cutoff: float) -> list[int]:
    """Up to ``limit`` ids above ``after``, ascending, of conversations that may go now."""
    return _ids_after(conn, _CONVERSATIONS_AFTER, after, limit, cutoff)


def count_transitions(conn: Connection, conversation_ids: Iterable[int]) -> int:
    count: int = conn.execute(
        "SELECT COUNT(*) FROM conversation_transitions WHERE conversation_id IN (SELECT value FROM json_each(?))",
        (_ids_json(conversation_ids),),
    ).fetchone()[0]
    return count


def delete_conversations(conn: Connection, conversation_ids: Iterable[int]) -> None:
    """These conversations and their transitions."""
    ids_json = _ids_json(conversation_ids)
    conn.execute(
        "DELETE FROM conversation_transitions WHERE conversation_id IN (SELECT value FROM json_each(?))", (ids_json,)
    )
    conn.execute("DELETE FROM conversations WHERE id IN (SELECT value FROM json_each(?))", (ids_json,))


def broadcasts_may_go(conn: Connection, after: int, limit: int, *, cutoff: float) -> list[int]:
    """Up to ``limit`` ids above ``after``, ascending, of broadcast rows with no copy left."""
    return _ids_after(conn, _BROADCASTS_AFTER, after, limit, cutoff)


def delete_broadcasts(conn: Connection, broadcast_ids: Iterable[int]) -> None:
    conn.execute("DELETE FROM broadcasts WHERE id IN (SELECT value FROM json_each(?))", (_ids_json(broadcast_ids),))
