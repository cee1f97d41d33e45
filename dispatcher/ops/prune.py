"""Retention: ``agent-bridge prune --older-than 30d [--dry-run] [--compact]``.

What may go is decided here and only here (``MESSAGE_MAY_GO``, ``CONVERSATION_MAY_GO`` and
``BROADCAST_MAY_GO`` in ``store.retention``, and the reference check in ``_window``):

- a **message** goes when it was acknowledged before the cutoff, holds no active claim, has
  no dispatch attempt that is unfinished or finished after the cutoff, answers no task with
  such an attempt (a reply is evidence that attempt's verdict reads), is in no conversation
  or in a terminal one (completed, cancelled, expired) last changed before the cutoff, is not
  the in-flight message of a conversation that is not terminal (a move into a terminal state
  clears it), and no message that stays refers to it (``reply_to``, followed transitively: a
  kept reply keeps its whole chain);
- its **dispatch attempt** (finished, by the rule above) goes with it, and afterwards its
  **attempt directory** (removed with ``retention.remove_attempt_dir``, never through a
  link), as do orphan attempt directories (no attempt row) not modified since the cutoff;
- a **terminal conversation** last changed before the cutoff goes, with its transitions,
  once none of its messages is left;
- a **broadcast** row (the set's id and dedup key) goes once none of its copies is left
  (each copy is an ordinary message, pruned by the message rule); it is never deleted
  while a copy still points at it.

Never: an unacknowledged or claimed message, the in-flight message of an open conversation,
an unfinished attempt or a reply to its task, or a conversation that is not terminal (nor its
messages). An attempt row is never removed
without its message: it is the barrier that keeps a message from being attempted twice.

Batches: messages are walked by id, highest first (a reply always has a higher id than
what it answers, so children go before parents), ``BATCH_ROWS`` ids per ``BEGIN
IMMEDIATE`` transaction (halved, down to ``MIN_BATCH_ROWS``, while a batch holds the lock
longer than ``TARGET_HOLD_SECONDS``); the decision is re-made inside each transaction, so a
reply sent meanwhile keeps its parent. Between batches the write lock is released, the
pruner runs a PASSIVE WAL checkpoint (no lock taken, so no sender's commit inherits a big
auto-checkpoint) and pauses at least as long as it held the lock: a sender waits at most
about one batch. On 1,000,000 messages a batch holds the lock ~2 ms (median), ~80 ms at
worst on a loaded 2-core machine (tests/ops/test_prune.py prints the measured figures).

``--dry-run`` walks the same batches read-only and records what would go in a TEMP table
(connection-local) so later decisions see it as gone: the counts equal a real run's on an
unchanged store.

``--compact`` runs ``VACUUM`` afterwards. The stores are created with ``auto_vacuum=NONE``,
so ``PRAGMA incremental_vacuum`` would free nothing (turning auto_vacuum on needs a
``VACUUM`` anyway). ``VACUUM`` holds the write lock for its whole run and needs free disk
about the size of the store, so it is opt-in and the daily timer does not use it.
"""

import os
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from dispatcher.core import clock
from dispatcher.core.clock import iso
from dispatcher.core.errors import BridgeError
from dispatcher.store import Connection
from dispatcher.store import retention as stored
from dispatcher.store.attempts import attempt_state

__all__ = ["PruneReport", "parse_duration", "prune", "run_prune"]

BATCH_ROWS = 1000  # at most this many messages per write transaction
MIN_BATCH_ROWS = 50
TARGET_HOLD_SECONDS = 0.05
UNIT_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
MAX_DURATION_SECONDS = 100 * 365 * 86400


def parse_duration(text: str, option: str = "--older-than", unchanged: str = "nothing was pruned") -> float:
    """``30d``, ``12h``, ``90m``, ``3600s`` -> seconds; anything else is ``invalid_duration``
    (its message names ``option`` and says ``unchanged``)."""
    match = re.fullmatch(r"([0-9]{1,12})([dhms])", text.strip()) if isinstance(text, str) else None
    seconds = int(match.group(1)) * UNIT_SECONDS[match.group(2)] if match else 0
    if not match or seconds <= 0 or seconds > MAX_DURATION_SECONDS:
        raise BridgeError(
            "invalid_duration",
            f"{option} {text!r} is not a duration: write a positive whole number and one unit, "
            f"d, h, m or s (e.g. 30d, 12h, 90m, 3600s), at most 100 years; {unchanged}.",
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
    worktrees: int = 0  # kept worktrees removed (their branches stay)
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


def keep_referenced(going: set[int], refs: list[tuple[int, int]]) -> list[int]:
    """``going`` less every message a staying reply refers to, transitively: a reply (child,
    parent) whose child stays keeps its parent, and that parent then keeps its own parent."""
    going = set(going)
    changed = True
    while changed:
        changed = False
        for child, parent in refs:
            if parent in going and child not in going:
                going.discard(parent)
                changed = True
    return sorted(going)


def _window(conn: Connection, lo: int, hi: int, cutoff: float, now: float) -> list[int]:
    """The ids in [lo, hi] that may go now: own rule, not in flight in an open conversation, no kept
    reply (transitively)."""
    going = stored.messages_may_go(conn, lo, hi, cutoff=cutoff, now=now)
    if not going:
        return []
    going.difference_update(stored.in_flight_between(conn, lo, hi))
    # Replies to a candidate not already gone: one that is not going now keeps its parent.
    return keep_referenced(going, stored.replies_between(conn, lo, hi))


class _Pacer:
    """Between batches: checkpoint the WAL (PASSIVE: it takes no write lock) so no sender's
    commit inherits a big auto-checkpoint, then leave the lock free for at least as long as
    the batch held it. Batches shrink while one holds the lock longer than ``TARGET_HOLD_SECONDS``."""

    def __init__(self, conn: Connection, report: PruneReport, dry_run: bool) -> None:
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
            stored.checkpoint(self.conn)
        time.sleep(max(0.002, hold))


def _prune_messages(
    conn: Connection, cutoff: float, now: float, report: PruneReport, pacer: _Pacer, dry_run: bool
) -> list[int]:
    """Delete (or count) messages and their attempts; returns the ids whose attempts went."""
    attempt_ids: list[int] = []
    top = stored.highest_message_id(conn)
    cursor = top if top is not None else 0
    while cursor > 0:
        window = stored.next_window(conn, cursor, pacer.size)
        if window is None:
            break
        lo, hi = window
        started = clock.monotonic()
        with stored.batch(conn, dry_run):
            acquired = clock.monotonic()
            ids = _window(conn, lo, hi, cutoff, now)
            if ids:
                with_attempt = stored.with_attempts(conn, ids)
                if dry_run:
                    stored.mark_gone(conn, ids)
                else:
                    stored.delete_messages(conn, ids)
                attempt_ids.extend(with_attempt)
                report.attempts += len(with_attempt)
                report.messages += len(ids)
        pacer.held(started, acquired)
        cursor = lo - 1
    return attempt_ids


def _prune_by_id(
    conn: Connection,
    pacer: _Pacer,
    dry_run: bool,
    select: Callable[[int, int], list[int]],
    act: Callable[[list[int]], None],
) -> None:
    """Batches of the ids ``select(after, limit)`` picks (ascending), each handed to ``act(ids)``
    inside its own transaction, until none is left."""
    last = 0
    while True:
        started = clock.monotonic()
        with stored.batch(conn, dry_run):
            acquired = clock.monotonic()
            ids = select(last, pacer.size)
            if ids:
                act(ids)
        if not ids:
            return
        pacer.held(started, acquired)
        last = ids[-1]


def _prune_conversations(conn: Connection, cutoff: float, report: PruneReport, pacer: _Pacer, dry_run: bool) -> None:
    def act(ids: list[int]) -> None:
        report.transitions += stored.count_transitions(conn, ids)
        if not dry_run:
            stored.delete_conversations(conn, ids)
        report.conversations += len(ids)

    _prune_by_id(
        conn, pacer, dry_run, lambda after, limit: stored.conversations_may_go(conn, after, limit, cutoff=cutoff), act
    )


def _prune_broadcasts(conn: Connection, cutoff: float, report: PruneReport, pacer: _Pacer, dry_run: bool) -> None:
    def act(ids: list[int]) -> None:
        if not dry_run:
            stored.delete_broadcasts(conn, ids)
        report.broadcasts += len(ids)

    _prune_by_id(
        conn, pacer, dry_run, lambda after, limit: stored.broadcasts_may_go(conn, after, limit, cutoff=cutoff), act
    )


def _prune_attempt_dirs(
    conn: Connection, attempts_root: Path | None, gone: set[int], cutoff: float, dry_run: bool
) -> int:
    """Directories of the attempts that went, and orphans untouched since the cutoff."""
    from dispatcher.dispatch.retention import remove_attempt_dir

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
            has_row = attempt_state(conn, message_id) is not None
            if has_row or entry.stat(follow_symlinks=False).st_mtime > cutoff:
                continue
        if dry_run or remove_attempt_dir(Path(entry.path)):
            removed += 1
    return removed


def _prune_worktrees(conn: Connection, now: float, older_than_seconds: float) -> list[int]:
    """Kept worktrees of attempts settled before the cutoff (every agent's); their branches stay."""
    from dispatcher.dispatch.retention import DAY_SECONDS
    from dispatcher.dispatch.worktree_retention import prune_kept_worktrees

    return prune_kept_worktrees(conn, None, now, older_than_seconds / DAY_SECONDS, None)


def _prune_pool(runtime: Path, cutoff: float) -> int:
    """Ready worktrees of the pool made before the cutoff, and its leftovers (docs/worktrees.md)."""
    from dispatcher.dispatch.worktree_pool import clear, pool_root

    if not pool_root(runtime).is_dir():
        return 0
    return len(clear(runtime, None, cutoff))


def prune(
    conn: Connection,
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
    pacer = _Pacer(conn, report, dry_run)
    stored.start_run(conn)
    try:
        if not dry_run:  # before their attempts' rows go: a worktree no row names is nobody's to remove
            report.worktrees = len(_prune_worktrees(conn, now, older_than_seconds))
        attempt_ids = _prune_messages(conn, cutoff, now, report, pacer, dry_run)
        _prune_conversations(conn, cutoff, report, pacer, dry_run)
        _prune_broadcasts(conn, cutoff, report, pacer, dry_run)
        report.attempt_dirs = _prune_attempt_dirs(conn, attempts_root, set(attempt_ids), cutoff, dry_run)
        if attempts_root is not None and not dry_run:
            report.worktrees += _prune_pool(attempts_root.parent, cutoff)
    finally:
        stored.end_run(conn)
    if compact and not dry_run:
        stored.compact(conn)
        report.compacted = True
    report.seconds = clock.monotonic() - started
    return report


def run_prune(settings, older_than: str, *, dry_run: bool = False, compact: bool = False) -> dict:
    """The CLI's entry: parse the duration first (nothing is opened on a bad one), then prune."""
    from dispatcher.ops.branches import log_to_runtime
    from dispatcher.store import open_store

    seconds = parse_duration(older_than)
    log_to_runtime(settings)
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
