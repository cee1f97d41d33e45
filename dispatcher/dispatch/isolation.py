"""An attempt's own git worktree: made after the barrier and before the gate opens, committed by
the supervisor once the worker has ended, removed when the attempt settles (kept for inspection
when it failed, until retention). docs/worktrees.md tells the whole story.

Each step is recorded before or right after git runs, so a crash anywhere leaves a row that says
what may be on disk: reconciliation and retention finish the job (``close_worktree`` and
``drop_worktree`` are safe to run twice). Nothing here assumes one attempt per agent at a time:
paths and branches are per message id. Git itself runs only through ``git_worktree``.
"""

from dataclasses import dataclass
from pathlib import Path

from dispatcher.core import clock
from dispatcher.core.config_view import use_worktree
from dispatcher.core.errors import BridgeError
from dispatcher.core.logs import get_logger
from dispatcher.core.private_files import ensure_private_dir
from dispatcher.dispatch import git_worktree as g
from dispatcher.dispatch import worktree_pool as pool
from dispatcher.dispatch.paths import AgentPaths
from dispatcher.store import Connection, Row, write_transaction
from dispatcher.store.attempts import get_attempt
from dispatcher.store.worktrees import (
    PLANNED,
    PRESENT,
    REMOVED,
    conversation_branch,
    forget_branch,
    record_worktree_plan,
    record_worktree_ready,
    record_worktree_removed,
    record_worktree_result,
)

log = get_logger("agent_bridge.dispatch")
BRANCH_PREFIX = "agent-bridge/"
ISOLATION_TEXT = {
    "workspace_not_git": "isolation is `worktree` but the workspace is not inside a git repository",
    "workspace_bare_repository": "the workspace is a bare repository (or a git directory): there is no checkout",
    "workspace_no_commits": "the workspace's repository has no commit yet: there is nothing to branch from",
    "workspace_mid_operation": "a merge, rebase, cherry-pick, revert or bisect is under way in the workspace",
    "workspace_detached_head": "the workspace's HEAD is detached: a result could not be applied to a branch",
    "worktree_inside_checkout": "the runtime directory is inside the workspace's checkout",
}


class IsolationRefused(BridgeError):
    """No worktree could be made: the attempt fails with this error kind, nothing runs."""


def branch_name(agent: str, message_id: int) -> str:
    return f"{BRANCH_PREFIX}{agent}/{message_id}"


def worktree_path(paths: AgentPaths, message_id: int) -> Path:
    return paths.root / "worktrees" / paths.agent / str(message_id)


def open_worktree(
    conn: Connection,
    paths: AgentPaths,
    message: Row,
    workspace: Path,
    declared: str,
    writes: bool,
    pool_size: int = 0,
) -> Path | None:
    """The attempt's worktree (None: it runs in ``workspace`` itself). Raises IsolationRefused.
    Taken from the repository's pool of ready worktrees when ``pool_size`` and one is there
    (``worktree_pool``), else checked out afresh."""
    agent, message_id = message["recipient"], message["id"]
    if (
        not use_worktree(declared, writes, True) or not workspace.is_dir()
    ):  # (a missing workspace is the launch's error to report)
        return None
    try:
        repo = g.find_repo(workspace)
    except g.GitFailed as exc:
        raise IsolationRefused(exc.kind, _refusal_text(exc.kind, workspace)) from None
    decision = use_worktree(declared, writes, repo is not None)
    if decision is None:
        raise IsolationRefused("workspace_not_git", _refusal_text("workspace_not_git", workspace))
    if not decision or repo is None:
        return None
    if (why := g.repo_refusal(repo)) is not None:
        raise IsolationRefused(why, _refusal_text(why, workspace))
    path = worktree_path(paths, message_id)
    if path.is_relative_to(repo.toplevel):
        raise IsolationRefused("worktree_inside_checkout", _refusal_text("worktree_inside_checkout", workspace))
    previous = (
        conversation_branch(conn, message["conversation_id"], agent, message_id) if message["conversation_id"] else None
    )
    follows = (
        previous is not None and previous["worktree_common_dir"] == str(repo.common_dir) and previous["worktree_head"]
    )
    branch = previous["worktree_branch"] if follows and previous is not None else branch_name(agent, message_id)
    with write_transaction(conn):
        record_worktree_plan(
            conn,
            message_id,
            path=str(path),
            branch=branch,
            common_dir=str(repo.common_dir),
            checkout=str(repo.toplevel),
        )
    ensure_private_dir(path.parent.parent, "worktrees directory")
    ensure_private_dir(path.parent, "worktrees directory")
    # (there before any worker starts, so every worker's protected paths hold it: core/protected.py)
    ensure_private_dir(pool.pool_root(paths.root), "worktree pool directory")
    try:
        if follows and previous is not None:
            drop_worktree(conn, previous, branch="keep")  # its result is on the branch; the branch moves on here
            start = g.branch_head(repo.common_dir, branch)
            if start is None:
                raise g.GitFailed("worktree_failed", f"the conversation's branch {branch} is gone")
            origin = previous["worktree_origin"]
        else:
            start = origin = g.snapshot(repo, message_id)
        new_branch = not follows
        taken = (
            pool.take(paths.root, repo.common_dir, path, branch, start, new_branch=new_branch) if pool_size else None
        )
        git_dir = taken or g.add_worktree(repo.common_dir, path, branch, start, new_branch=new_branch)
    except (g.GitFailed, OSError) as exc:
        kind = exc.kind if isinstance(exc, g.GitFailed) else "worktree_failed"
        log.warning("worktree_failed", message_id=message_id, kind=kind, detail=str(exc)[:300])
        drop_worktree(conn, get_attempt(conn, message_id))
        raise IsolationRefused(kind, f"could not make the attempt's worktree: {exc}") from None
    with write_transaction(conn):
        record_worktree_ready(conn, message_id, git_dir=str(git_dir), origin=origin, base=start)
    log.info("worktree_ready", message_id=message_id, branch=branch, follows=bool(follows), from_pool=bool(taken))
    return path


def _refusal_text(kind: str, workspace: Path) -> str:
    return (
        f"{ISOLATION_TEXT.get(kind, kind)} ({workspace}). Nothing ran. Fix the repository, or set the agent's "
        "`isolation` to `none` in config.json to let workers edit the workspace itself (docs/worktrees.md)."
    )


@dataclass(frozen=True)
class Closed:
    head: str | None
    files: int | None
    insertions: int | None
    deletions: int | None
    findings: tuple[str, ...]


def close_worktree(conn: Connection, message_id: int) -> None:
    """Commit what the worker left in its worktree and record the result, once (the worker has ended)."""
    row = get_attempt(conn, message_id)
    if row is None or row["worktree_state"] not in (PLANNED, PRESENT) or row["worktree_findings"] is not None:
        return
    closed = _commit(row)
    with write_transaction(conn):
        if record_worktree_result(
            conn,
            message_id,
            head=closed.head,
            files=closed.files,
            insertions=closed.insertions,
            deletions=closed.deletions,
            findings=",".join(closed.findings),
        ):
            log.info("worktree_committed", message_id=message_id, files=closed.files, findings=list(closed.findings))


def recorded_path_is_ours(row: Row) -> bool:
    """Whether the row's worktree path is where the bridge makes this attempt's worktree
    (``worktree_path``: ``.../worktrees/<agent>/<message id>``). On PostgreSQL an agent's role (and so its worker's server) may update the
    worktree columns: a path it moved elsewhere is never committed from, removed or run git in."""
    path = Path(row["worktree_path"])
    return path.parts[-3:] == ("worktrees", row["agent"], str(row["message_id"])) and not path.is_symlink()


def _commit(row: Row) -> Closed:
    """The supervisor's commit, through the git directory and work tree it recorded; what it found."""
    findings: list[str] = []
    common, branch, base = Path(row["worktree_common_dir"]), row["worktree_branch"], row["worktree_base"]
    path = Path(row["worktree_path"])
    if not recorded_path_is_ours(row):
        findings.append("worktree_path_moved")  # the row was rewritten: nothing there is ours to commit
    elif row["worktree_state"] == PLANNED or row["worktree_git_dir"] is None:
        findings.append("worktree_never_made")
    elif path.is_symlink() or not path.is_dir():
        findings.append("worktree_missing")  # deleted (or swapped for a link) under the attempt
    else:
        git_dir = Path(row["worktree_git_dir"])
        if not g.git_file_intact(path, git_dir):
            findings.append("git_file_changed")
        if g.special_files(path):
            findings.append("special_files")
        try:
            g.commit_worktree(git_dir, path, f"agent-bridge: {row['agent']} task #{row['message_id']}")
        except g.GitFailed as exc:
            findings.append(exc.kind)
    try:
        head = g.branch_head(common, branch) if branch else None
        stat = g.diffstat(common, base, head) if head and base else None
    except g.GitFailed as exc:
        findings.append(exc.kind)
        head, stat = None, None
    if stat is not None and stat.symlinks:
        findings.append("symlinks")
    if stat is None:
        return Closed(head, None, None, None, tuple(findings))
    return Closed(head, stat.files, stat.insertions, stat.deletions, tuple(findings))


def drop_worktree(conn: Connection, row: Row | None, *, branch: str = "if_empty") -> None:
    """Remove an attempt's worktree directory (the branch keeps its result) and record it; safe to
    run again. ``branch``: ``keep`` it, ``delete`` it, or delete it ``if_empty`` (it holds nothing of
    ours: an attempt's own branch that never moved past where it started)."""
    if row is None or row["worktree_state"] is None:
        return
    if row["worktree_state"] == REMOVED and not (branch == "delete" and row["worktree_branch"]):
        return
    if not recorded_path_is_ours(row):  # never remove, or run git in, a path the row was moved to
        log.warning("worktree_path_moved", message_id=row["message_id"])
        return
    common, path, name = Path(row["worktree_common_dir"]), Path(row["worktree_path"]), row["worktree_branch"]
    git_dir = Path(row["worktree_git_dir"]) if row["worktree_git_dir"] else None
    empty = row["worktree_origin"] is None or row["worktree_head"] == row["worktree_origin"]
    own = name == branch_name(row["agent"], row["message_id"])
    gone = bool(name) and (branch == "delete" or (branch == "if_empty" and own and empty))
    try:
        if row["worktree_state"] != REMOVED:
            g.remove_worktree(common, path, git_dir)
        if gone:
            g.delete_branch(common, name)
    except g.GitFailed as exc:  # the repository moved or broke: retried at the next pass
        log.warning("worktree_remove_failed", message_id=row["message_id"], kind=exc.kind)
        return
    with write_transaction(conn):
        record_worktree_removed(conn, row["message_id"], clock.now())
        if gone:
            forget_branch(conn, str(common), name)
    log.info("worktree_removed", message_id=row["message_id"], branch_deleted=gone)


def settle_worktree(conn: Connection, message_id: int, outcome: str) -> None:
    """After the verdict: a succeeded attempt's worktree goes at once, and so does one never made
    ready (its supervisor died making it: no worker ran there); any other stays until retention."""
    close_worktree(conn, message_id)  # (a no-op when the supervisor already committed)
    row = get_attempt(conn, message_id)
    if outcome == "succeeded" or (row is not None and row["worktree_state"] == PLANNED):
        drop_worktree(conn, row)
