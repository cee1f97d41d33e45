"""Retention: ``agent-bridge prune --older-than 30d [--dry-run] [--compact]``.

What may go is decided here and only here (``MESSAGE_MAY_GO``, ``CONVERSATION_MAY_GO`` and
the reference check in ``_window``):

- a **message** goes when it was acknowledged before the cutoff, holds no active claim, has
  no dispatch attempt that is unfinished or finished after the cutoff, is in no
  conversation or in a terminal one (completed, cancelled, expired) last changed before the
  cutoff, is no conversation's in-flight message, and no message that stays refers to it
  (``reply_to``, followed transitively: a kept reply keeps its whole chain);
- its **dispatch attempt** (finished, by the rule above) goes with it, and afterwards its
  **attempt directory** (removed with ``retention.remove_attempt_dir``, never through a
  link), as do orphan attempt directories (no attempt row) not modified since the cutoff;
- a **terminal conversation** last changed before the cutoff goes, with its transitions,
  once none of its messages is left;
- a **broadcast** row (the set's id and dedup key) goes once none of its copies is left
  (each copy is an ordinary message, pruned by the message rule); it is never deleted
  while a copy still points at it.

Never: an unacknowledged, claimed or in-flight message, an unfinished attempt, or a
conversation that is not terminal (nor its messages). An attempt row is never removed
without its message: it is the barrier that keeps a message from being attempted twice.

Batches: messages are walked by id, highest first (a reply always has a higher id than
what it answers, so children go before parents), ``BATCH_ROWS`` ids per ``BEGIN
IMMEDIATE`` transaction (halved, down to ``MIN_BATCH_ROWS``, while a batch holds the lock
longer than ``TARGET_HOLD_SECONDS``); the decision is re-made inside each transaction, so a
reply sent meanwhile keeps its parent. Between batches the write lock is released, the
pruner runs a PASSIVE WAL checkpoint (no lock taken, so no sender's commit inherits a big
auto-checkpoint) and pauses at least as long as it held the lock: a sender waits at most
about one batch. On 1,000,000 messages a batch holds the lock ~2 ms (median), ~80 ms at
worst on a loaded 2-core machine (tests/test_prune.py prints the measured figures).

``--dry-run`` walks the same batches read-only and records what would go in a TEMP table
(connection-local) so later decisions see it as gone: the counts equal a real run's on an
unchanged store.

``--compact`` runs ``VACUUM`` afterwards. The stores are created with ``auto_vacuum=NONE``,
so ``PRAGMA incremental_vacuum`` would free nothing (turning auto_vacuum on needs a
``VACUUM`` anyway). ``VACUUM`` holds the write lock for its whole run and needs free disk
about the size of the store, so it is opt-in and the daily timer does not use it.
"""

import json
import os
import re
import sqlite3
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from . import clock
from .clock import iso
from .errors import BridgeError
from .lifecycle import TERMINAL_CONVERSATION_STATES

BATCH_ROWS = 1000  # at most this many messages per write transaction
MIN_BATCH_ROWS = 50
TARGET_HOLD_SECONDS = 0.05
UNIT_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
MAX_DURATION_SECONDS = 100 * 365 * 86400

_TERMINAL_SQL = "(" + ", ".join(f"'{s}'" for s in TERMINAL_CONVERSATION_STATES) + ")"

# The own rule of a message (everything except "a kept message refers to it").
MESSAGE_MAY_GO = f"""
    m.acknowledged_at IS NOT NULL AND m.acknowledged_at <= :cutoff AND m.created_at <= :cutoff
    AND NOT (m.claim_owner IS NOT NULL AND IFNULL(m.claim_expires_at, 0) > :now)
    AND NOT EXISTS (SELECT 1 FROM dispatch_attempts AS a WHERE a.message_id = m.id
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


def parse_duration(text: str) -> float:
    """``30d``, ``12h``, ``90m``, ``3600s`` -> seconds; anything else is ``invalid_duration``."""
    match = re.fullmatch(r"([0-9]{1,12})([dhms])", text.strip()) if isinstance(text, str) else None
    seconds = int(match.group(1)) * UNIT_SECONDS[match.group(2)] if match else 0
    if not match or seconds <= 0 or seconds > MAX_DURATION_SECONDS:
        raise BridgeError(
            "invalid_duration",
            f"--older-than {text!r} is not a duration: write a positive whole number and one unit, "
            "d, h, m or s (e.g. 30d, 12h, 90m, 3600s), at most 100 years; nothing was pruned.",
        )
    return float(seconds)


@dataclass
class PruneReport:
    older_than_seconds: float
    cutoff: float
    dry_run: bool
    messages: int = 0
    attempts: int = 0
    attempt_dirs: int = 0
    conversations: int = 0
    transitions: int = 0
    broadcasts: int = 0
    batches: int = 0
    max_batch_seconds: float = 0.0  # longest batch, waiting for the write lock included
    max_hold_seconds: float = 0.0  # longest time the write lock was held (what a sender may wait)
    compacted: bool = False
    seconds: float = 0.0

    def as_dict(self) -> dict:
        data = asdict(self)
        data["max_batch_seconds"] = round(self.max_batch_seconds, 4)
        data["max_hold_seconds"] = round(self.max_hold_seconds, 4)
        data["seconds"] = round(self.seconds, 3)
        data["cutoff"] = iso(self.cutoff)
        return data


def _ids_json(ids) -> str:
    return json.dumps(sorted(ids))


def _window(conn: sqlite3.Connection, lo: int, hi: int, params: dict) -> list[int]:
    """The ids in [lo, hi] that may go now: own rule, not in flight, no kept reply (transitively)."""
    rows = conn.execute(
        f"SELECT m.id FROM messages AS m WHERE m.id BETWEEN :lo AND :hi AND {MESSAGE_MAY_GO}",  # noqa: S608 - constant SQL fragments only; every value is a bound parameter
        {**params, "lo": lo, "hi": hi},
    ).fetchall()
    going = {r[0] for r in rows}
    if not going:
        return []
    in_flight = conn.execute(
        "SELECT in_flight_message_id FROM conversations WHERE in_flight_message_id BETWEEN ? AND ?", (lo, hi)
    ).fetchall()
    going.difference_update(r[0] for r in in_flight)
    # Replies to a candidate; one from a message that stays (not going now, not already gone)
    # keeps its parent, and that parent then keeps its own parent, and so on.
    refs = conn.execute(
        "SELECT r.id, r.reply_to FROM messages AS r WHERE r.reply_to BETWEEN ? AND ?"
        " AND r.id NOT IN (SELECT id FROM temp.prune_gone)",
        (lo, hi),
    ).fetchall()
    changed = True
    while changed:
        changed = False
        for child, parent in refs:
            if parent in going and child not in going:
                going.discard(parent)
                changed = True
    return sorted(going)


def _next_window(conn: sqlite3.Connection, cursor: int, size: int) -> tuple[int, int] | None:
    """The next ``size`` existing ids at or below ``cursor``, as (lo, hi)."""
    rows = conn.execute("SELECT id FROM messages WHERE id <= ? ORDER BY id DESC LIMIT ?", (cursor, size)).fetchall()
    if not rows:
        return None
    return rows[-1][0], rows[0][0]


class _Pacer:
    """Between batches: checkpoint the WAL (PASSIVE: it takes no write lock) so no sender's
    commit inherits a big auto-checkpoint, then leave the lock free for at least as long as
    the batch held it. Batches shrink while one holds the lock longer than ``TARGET_HOLD_SECONDS``."""

    def __init__(self, conn: sqlite3.Connection, report: PruneReport, dry_run: bool) -> None:
        self.conn, self.report, self.dry_run = conn, report, dry_run
        self.size = BATCH_ROWS

    def held(self, started: float, acquired: float) -> None:
        ended = clock.monotonic()
        took, hold = ended - started, ended - acquired
        self.report.batches += 1
        self.report.max_batch_seconds = max(self.report.max_batch_seconds, took)
        self.report.max_hold_seconds = max(self.report.max_hold_seconds, hold)
        if hold > TARGET_HOLD_SECONDS:
            self.size = max(MIN_BATCH_ROWS, self.size // 2)
        elif hold < TARGET_HOLD_SECONDS / 4:
            self.size = min(BATCH_ROWS, self.size * 2)
        if not self.dry_run:
            self.conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        time.sleep(max(0.002, hold))


def _begin(conn: sqlite3.Connection, dry_run: bool) -> float:
    conn.execute("BEGIN" if dry_run else "BEGIN IMMEDIATE")
    return clock.monotonic()


def _prune_messages(conn, params, report: PruneReport, pacer: _Pacer, dry_run: bool) -> list[int]:
    """Delete (or count) messages and their attempts; returns the ids whose attempts went."""
    attempt_ids: list[int] = []
    top = conn.execute("SELECT MAX(id) FROM messages").fetchone()[0]
    cursor = top if top is not None else 0
    while cursor > 0:
        window = _next_window(conn, cursor, pacer.size)
        if window is None:
            break
        lo, hi = window
        started = clock.monotonic()
        acquired = _begin(conn, dry_run)
        try:
            ids = _window(conn, lo, hi, params)
            if ids:
                ids_json = _ids_json(ids)
                with_attempt = [
                    r[0]
                    for r in conn.execute(
                        "SELECT message_id FROM dispatch_attempts WHERE message_id IN (SELECT value FROM json_each(?))",
                        (ids_json,),
                    )
                ]
                if dry_run:
                    conn.executemany("INSERT INTO temp.prune_gone (id) VALUES (?)", ((i,) for i in ids))
                else:
                    conn.execute(
                        "DELETE FROM dispatch_attempts WHERE message_id IN (SELECT value FROM json_each(?))",
                        (ids_json,),
                    )
                    conn.execute("DELETE FROM messages WHERE id IN (SELECT value FROM json_each(?))", (ids_json,))
                attempt_ids.extend(with_attempt)
                report.attempts += len(with_attempt)
                report.messages += len(ids)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        pacer.held(started, acquired)
        cursor = lo - 1
    return attempt_ids


def _prune_by_id(conn, params, pacer: _Pacer, dry_run: bool, select_sql: str, act) -> None:
    """Batches of the ids ``select_sql`` picks (it binds ``:last`` and ``:batch``, ascending),
    each handed to ``act(ids, ids_json)`` inside its own transaction, until none is left."""
    last = 0
    while True:
        started = clock.monotonic()
        acquired = _begin(conn, dry_run)
        try:
            ids = [r[0] for r in conn.execute(select_sql, {**params, "last": last, "batch": pacer.size})]
            if ids:
                act(ids, _ids_json(ids))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        if not ids:
            return
        pacer.held(started, acquired)
        last = ids[-1]


def _prune_conversations(conn, params, report: PruneReport, pacer: _Pacer, dry_run: bool) -> None:
    def act(ids: list[int], ids_json: str) -> None:
        report.transitions += conn.execute(
            "SELECT COUNT(*) FROM conversation_transitions WHERE conversation_id IN (SELECT value FROM json_each(?))",
            (ids_json,),
        ).fetchone()[0]
        if not dry_run:
            conn.execute(
                "DELETE FROM conversation_transitions WHERE conversation_id IN (SELECT value FROM json_each(?))",
                (ids_json,),
            )
            conn.execute("DELETE FROM conversations WHERE id IN (SELECT value FROM json_each(?))", (ids_json,))
        report.conversations += len(ids)

    _prune_by_id(
        conn,
        params,
        pacer,
        dry_run,
        f"SELECT c.id FROM conversations AS c WHERE c.id > :last AND "  # noqa: S608 - constant SQL fragments only; every value is a bound parameter
        f"{CONVERSATION_MAY_GO} ORDER BY c.id LIMIT :batch",
        act,
    )


def _prune_broadcasts(conn, params, report: PruneReport, pacer: _Pacer, dry_run: bool) -> None:
    def act(ids: list[int], ids_json: str) -> None:
        if not dry_run:
            conn.execute("DELETE FROM broadcasts WHERE id IN (SELECT value FROM json_each(?))", (ids_json,))
        report.broadcasts += len(ids)

    _prune_by_id(
        conn,
        params,
        pacer,
        dry_run,
        f"SELECT b.id FROM broadcasts AS b WHERE b.id > :last AND "  # noqa: S608 - constant SQL fragments only; every value is a bound parameter
        f"{BROADCAST_MAY_GO} ORDER BY b.id LIMIT :batch",
        act,
    )


def _prune_attempt_dirs(conn, attempts_root: Path | None, gone: set[int], cutoff: float, dry_run: bool) -> int:
    """Directories of the attempts that went, and orphans untouched since the cutoff."""
    from .dispatch.retention import remove_attempt_dir

    if attempts_root is None:
        return 0
    try:
        entries = list(os.scandir(attempts_root))
    except (FileNotFoundError, NotADirectoryError):
        return 0
    removed = 0
    for entry in entries:
        if not entry.name.isdigit() or not entry.is_dir(follow_symlinks=False):
            continue
        message_id = int(entry.name)
        if message_id not in gone:
            has_row = conn.execute("SELECT 1 FROM dispatch_attempts WHERE message_id = ?", (message_id,)).fetchone()
            if has_row is not None or entry.stat(follow_symlinks=False).st_mtime > cutoff:
                continue
        if dry_run or remove_attempt_dir(Path(entry.path)):
            removed += 1
    return removed


def prune(
    conn: sqlite3.Connection,
    older_than_seconds: float,
    *,
    now: float | None = None,
    attempts_root: Path | None = None,
    dry_run: bool = False,
    compact: bool = False,
) -> PruneReport:
    """Apply the retention rules once on an open store connection (autocommit mode)."""
    started = clock.monotonic()
    now = clock.now() if now is None else now
    cutoff = now - older_than_seconds
    report = PruneReport(older_than_seconds=older_than_seconds, cutoff=cutoff, dry_run=dry_run)
    params = {"cutoff": cutoff, "now": now}
    pacer = _Pacer(conn, report, dry_run)
    conn.execute("CREATE TEMP TABLE IF NOT EXISTS prune_gone (id INTEGER PRIMARY KEY)")
    conn.execute("DELETE FROM temp.prune_gone")
    try:
        attempt_ids = _prune_messages(conn, params, report, pacer, dry_run)
        _prune_conversations(conn, params, report, pacer, dry_run)
        _prune_broadcasts(conn, params, report, pacer, dry_run)
        report.attempt_dirs = _prune_attempt_dirs(conn, attempts_root, set(attempt_ids), cutoff, dry_run)
    finally:
        conn.execute("DROP TABLE IF EXISTS temp.prune_gone")
    if compact and not dry_run:
        conn.execute("VACUUM")
        report.compacted = True
    report.seconds = clock.monotonic() - started
    return report


def run_prune(settings, older_than: str, *, dry_run: bool = False, compact: bool = False) -> dict:
    """The CLI's entry: parse the duration first (nothing is opened on a bad one), then prune."""
    from .store import open_store

    seconds = parse_duration(older_than)
    conn = open_store(settings.db)
    try:
        report = prune(
            conn, seconds, attempts_root=settings.private_dir() / "attempts", dry_run=dry_run, compact=compact
        )
    finally:
        conn.close()
    data = report.as_dict()
    data["older_than"] = older_than
    return data
