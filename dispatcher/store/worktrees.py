"""An attempt's git worktree as the store keeps it (schema 19: ``worktree_*`` columns of
``dispatch_attempts``): planned before git makes it, present once it is on disk, removed once it
is gone. The result (head, diffstat, findings) is written once: a second writer (reconciliation
after a supervisor that committed and died) changes nothing.
"""

from dispatcher.core.diffstat import WORKTREE_FIELDS
from dispatcher.store.attempts import _rows
from dispatcher.store.types import Connection, Row

PLANNED, PRESENT, REMOVED = "planned", "present", "removed"
# The columns the functions below update: the supervisor and the listener write them under the
# agent's own database role (``store.roles`` grants exactly these).
WORKTREE_COLUMNS = (
    "isolation",
    "worktree_path",
    "worktree_git_dir",
    "worktree_common_dir",
    "worktree_checkout",
    "worktree_origin",
    *WORKTREE_FIELDS,  # branch, base, head, diffstat, findings, state
    "worktree_removed_at",
)


def record_worktree_plan(
    conn: Connection, message_id: int, *, path: str, branch: str, common_dir: str, checkout: str
) -> None:
    """Before git runs: whatever happens next, reconciliation knows what to look for and remove."""
    conn.execute(
        "UPDATE dispatch_attempts SET isolation = 'worktree', worktree_path = ?, worktree_branch = ?,"
        " worktree_common_dir = ?, worktree_checkout = ?, worktree_state = ? WHERE message_id = ?",
        (path, branch, common_dir, checkout, PLANNED, message_id),
    )


def record_worktree_ready(conn: Connection, message_id: int, *, git_dir: str, origin: str, base: str) -> None:
    conn.execute(
        "UPDATE dispatch_attempts SET worktree_git_dir = ?, worktree_origin = ?, worktree_base = ?,"
        " worktree_state = ? WHERE message_id = ?",
        (git_dir, origin, base, PRESENT, message_id),
    )


def record_worktree_result(
    conn: Connection,
    message_id: int,
    *,
    head: str | None,
    files: int | None,
    insertions: int | None,
    deletions: int | None,
    findings: str | None,
) -> bool:
    """The result, once; False when it was recorded already (nothing changes)."""
    cur = conn.execute(
        "UPDATE dispatch_attempts SET worktree_head = ?, worktree_files = ?, worktree_insertions = ?,"
        " worktree_deletions = ?, worktree_findings = ? WHERE message_id = ? AND worktree_findings IS NULL",
        (head, files, insertions, deletions, findings or "none", message_id),
    )
    return cur.rowcount == 1


def record_worktree_removed(conn: Connection, message_id: int, at: float) -> bool:
    cur = conn.execute(
        "UPDATE dispatch_attempts SET worktree_state = ?, worktree_removed_at = ?"
        " WHERE message_id = ? AND worktree_state != ?",
        (REMOVED, at, message_id, REMOVED),
    )
    return cur.rowcount == 1


def forget_branch(conn: Connection, common_dir: str, branch: str) -> None:
    """The branch was deleted (``discard``, or it held nothing): no attempt owns it any more (the
    turns of one conversation share theirs)."""
    conn.execute(
        "UPDATE dispatch_attempts SET worktree_branch = NULL WHERE worktree_common_dir = ? AND worktree_branch = ?",
        (common_dir, branch),
    )


def conversation_branch(conn: Connection, conversation_id: int, agent: str, before: int) -> Row | None:
    """The latest attempt of ``agent`` in the conversation, before message ``before``, that has a
    branch with a recorded result: the one a follow-up turn continues."""
    row: Row | None = (
        _rows(conn)
        .execute(
            "SELECT a.* FROM dispatch_attempts AS a JOIN messages AS m ON m.id = a.message_id"
            " WHERE m.conversation_id = ? AND a.agent = ? AND a.message_id < ? AND a.worktree_branch IS NOT NULL"
            " ORDER BY a.message_id DESC LIMIT 1",
            (conversation_id, agent, before),
        )
        .fetchone()
    )
    return row


def worktrees_on_disk(conn: Connection, agent: str | None = None) -> list[Row]:
    """Attempts whose worktree is (or may be) on disk, oldest first; of ``agent`` when given."""
    sql = "SELECT * FROM dispatch_attempts WHERE worktree_state IN (?, ?)"
    params: tuple[object, ...] = (PLANNED, PRESENT)
    if agent is not None:
        sql, params = sql + " AND agent = ?", (*params, agent)
    return list(_rows(conn).execute(sql + " ORDER BY message_id", params).fetchall())


def owned_worktrees(conn: Connection) -> tuple[set[str], set[tuple[str, str]]]:
    """(worktree paths on disk, (common git dir, branch) pairs) that attempts own."""
    rows = conn.execute(
        "SELECT worktree_path, worktree_state, worktree_common_dir, worktree_branch FROM dispatch_attempts"
        " WHERE isolation = 'worktree'"
    ).fetchall()
    paths = {r[0] for r in rows if r[0] and r[1] != REMOVED}
    branches = {(r[2], r[3]) for r in rows if r[2] and r[3]}
    return paths, branches


def recent_worktrees(conn: Connection, agent: str | None, limit: int) -> list[Row]:
    """The newest attempts that ran in a worktree (of ``agent``, or every agent), newest first."""
    sql = "SELECT * FROM dispatch_attempts WHERE worktree_state IS NOT NULL"
    params: tuple[object, ...] = ()
    if agent is not None:
        sql, params = sql + " AND agent = ?", (agent,)
    return list(_rows(conn).execute(sql + " ORDER BY message_id DESC LIMIT ?", (*params, limit)).fetchall())
