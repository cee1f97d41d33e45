"""Kept worktrees: how long they stay, and how much disk they may use.

A succeeded attempt's worktree goes when it settles; a failed or crashed one's stays for
inspection (its branch has the supervisor's commit of whatever the worker left) until its attempt
is older than ``attempt_retention_days``, or until the kept worktrees together pass
``kept_worktrees_max_mb``: then the oldest go first. A running attempt's never goes. Branches stay
(``discard`` deletes one). ``worktrees_to_remove`` is the pure rule; ``prune_kept_worktrees`` applies
it, from the listener when idle and from ``agent-bridge prune``.
"""

from dataclasses import dataclass

from dispatcher.core.logs import get_logger
from dispatcher.dispatch.retention import DAY_SECONDS, tree_bytes
from dispatcher.store import Connection
from dispatcher.store.worktrees import worktrees_on_disk

log = get_logger("agent_bridge.dispatch")
MB = 1024 * 1024


@dataclass(frozen=True)
class KeptWorktree:
    message_id: int
    finished: bool
    outcome: str | None
    finished_at: float | None
    size: int  # bytes on disk (0 for a running attempt's: never measured, never removed)


def worktrees_to_remove(kept: list[KeptWorktree], cutoff: float, cap_bytes: int | None) -> list[int]:
    """The message ids whose worktrees go (pure): settled ones that succeeded (a supervisor died
    before removing it) or finished at or before ``cutoff``; then the oldest settled ones until
    what is left fits in ``cap_bytes`` (None: no cap)."""
    settled = sorted((k for k in kept if k.finished), key=lambda k: (k.finished_at or 0.0, k.message_id))
    going = [k for k in settled if k.outcome == "succeeded" or (k.finished_at or 0.0) <= cutoff]
    left = [k for k in settled if k not in going]
    total = sum(k.size for k in left)
    for k in left:
        if cap_bytes is None or total <= cap_bytes:
            break
        going.append(k)
        total -= k.size
    return sorted(k.message_id for k in going)


def prune_kept_worktrees(
    conn: Connection, agent: str | None, now: float, retention_days: float, cap_mb: int | None
) -> list[int]:
    """Apply the rule once (to ``agent``'s worktrees, or everyone's); returns the ids removed."""
    from dispatcher.dispatch.isolation import close_worktree, drop_worktree  # (git loads only here)

    rows = {row["message_id"]: row for row in worktrees_on_disk(conn, agent)}
    kept = [
        KeptWorktree(
            message_id=row["message_id"],
            finished=row["state"] == "finished",
            outcome=row["outcome"],
            finished_at=row["finished_at"],
            size=tree_bytes(row["worktree_path"]) if row["state"] == "finished" else 0,
        )
        for row in rows.values()
    ]
    going = worktrees_to_remove(kept, now - retention_days * DAY_SECONDS, None if cap_mb is None else cap_mb * MB)
    for message_id in going:
        close_worktree(conn, message_id)  # (a crash before the commit: made now, once)
        drop_worktree(conn, rows[message_id])
    if going:
        log.info("worktrees_pruned", agent=agent, count=len(going))
    return going
