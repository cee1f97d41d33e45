"""``agent-bridge diff|apply|discard ID``: the reviewable result of an attempt that ran in a worktree,
and ``doctor``'s and ``uninstall --purge``'s view of what we own in repositories (docs/worktrees.md).

``apply`` cherry-picks the attempt's branch (from where the conversation's first turn started,
to its head) onto the user's current branch: only the supervisor's commits, never the snapshot
of the user's own uncommitted changes the worker started from, and a linear history. It refuses a
dirty tree or an operation under way, and on a conflict aborts: branch, index and tree as before.
"""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dispatcher.core.diffstat import diffstat_text
from dispatcher.core.errors import BridgeError
from dispatcher.core.locations import LocationsLike, shown
from dispatcher.dispatch import git_worktree as g
from dispatcher.dispatch import worktree_pool as pool
from dispatcher.dispatch.isolation import BRANCH_PREFIX, drop_worktree
from dispatcher.dispatch.retention import tree_bytes
from dispatcher.store import Connection, Row, open_store
from dispatcher.store.attempts import get_attempt
from dispatcher.store.worktrees import owned_worktrees, worktrees_on_disk


def _attempt(conn: Connection, message_id: int) -> Row:
    row = get_attempt(conn, message_id)
    if row is None or row["worktree_state"] is None:
        raise BridgeError(
            "no_worktree",
            f"message #{message_id} has no attempt that ran in a worktree; `agent-bridge show {message_id}` "
            "says how it ran (docs/worktrees.md: `isolation`).",
        )
    if row["state"] != "finished":
        raise BridgeError(
            "attempt_running", f"the attempt at message #{message_id} is still running; wait for its verdict."
        )
    return row


def _with_store(settings: LocationsLike) -> Connection:
    log_to_runtime(settings)
    return open_store(settings.db)


def log_to_runtime(settings: LocationsLike, *, to_file: bool = True) -> None:
    """The dispatch modules' log lines go to the runtime's dispatcher.log where there is one, and
    warnings to stderr; never to stdout, which is this command's output."""
    import logging

    from dispatcher.core.logs import configure_logging

    runtime = settings.private_dir()
    log_file = runtime / "dispatcher.log" if to_file and runtime.is_dir() else None  # (never made for a log)
    configure_logging(stderr_level=logging.WARNING, log_file=log_file)


def diff(settings: LocationsLike, message_id: int) -> str:
    """The attempt's own changes (its base to its head), as git prints them."""
    conn = _with_store(settings)
    try:
        row = _attempt(conn, message_id)
    finally:
        conn.close()
    if row["worktree_head"] is None or row["worktree_base"] is None:
        raise BridgeError("no_result", f"the attempt at message #{message_id} recorded no commit; nothing to show.")
    try:
        return g.diff_text(Path(row["worktree_common_dir"]), row["worktree_base"], row["worktree_head"])
    except g.GitFailed as exc:
        raise BridgeError(
            "git_failed", f"{exc.detail}; is the repository {row['worktree_checkout']} still there?"
        ) from None


def apply(settings: LocationsLike, message_id: int) -> list[str]:
    """Cherry-pick the branch's work onto the user's current branch, only when that is clean."""
    conn = _with_store(settings)
    try:
        row = _attempt(conn, message_id)
    finally:
        conn.close()
    origin, head, branch = row["worktree_origin"], row["worktree_head"], row["worktree_branch"]
    if not (origin and head and branch):
        raise BridgeError("no_result", f"the attempt at message #{message_id} has no branch with a result to apply.")
    checkout = Path(row["worktree_checkout"])
    try:
        repo = g.find_repo(checkout) if checkout.is_dir() else None
    except g.GitFailed:
        repo = None
    if repo is None or str(repo.common_dir) != row["worktree_common_dir"]:
        raise BridgeError("apply_refused", f"{checkout} is no longer the repository the attempt branched from.")
    refusal = _apply_refusal(repo)
    if refusal is not None:
        raise BridgeError("apply_refused", f"{refusal} in {checkout}; nothing was changed.")
    if head == origin:
        return [f"{branch} holds no changes; nothing to apply."]
    if g.already_applied(repo.git_dir, origin, head, "HEAD"):
        return [f"{branch} is already in {repo.branch}; nothing to apply."]
    try:
        if not g.applies_cleanly(repo, origin, head):
            raise g.GitFailed("apply_conflict", "the patch does not apply")
        g.cherry_pick(repo, origin, head)
    except g.GitFailed:
        raise BridgeError(
            "apply_conflict",
            f"{branch} does not apply cleanly onto {repo.branch} (a conflict, or an untracked file in the way); "
            "the cherry-pick was aborted and your branch, index and tree are as they were. Review it with "
            f"`agent-bridge diff {message_id}`, or merge {branch} yourself.",
        ) from None
    stat = g.diffstat(repo.common_dir, origin, head)
    return [f"applied {branch} onto {repo.branch}: {diffstat_text(stat.files, stat.insertions, stat.deletions)}."]


def _apply_refusal(repo: g.Repo) -> str | None:
    if repo.in_progress is not None:
        return f"an operation is under way ({repo.in_progress})"
    if repo.branch is None:
        return "HEAD is detached: check out the branch to apply onto"
    if repo.branch.startswith(BRANCH_PREFIX):
        return f"the current branch {repo.branch} is one of ours"
    if g.dirty(repo):
        return "the tree has uncommitted changes: commit or stash them first"
    return None


def discard(settings: LocationsLike, message_id: int) -> list[str]:
    """Remove the attempt's worktree (if still on disk) and its branch."""
    conn = _with_store(settings)
    try:
        row = _attempt(conn, message_id)
        branch = row["worktree_branch"]
        drop_worktree(conn, row, branch="delete")
        after = get_attempt(conn, message_id)
    finally:
        conn.close()
    if after is not None and after["worktree_state"] != "removed":
        raise BridgeError("discard_failed", f"could not remove {row['worktree_path']}; see dispatcher.log and retry.")
    return [f"discarded {branch or 'the branch (already gone)'} and the worktree of message #{message_id}."]


# -- what we own in repositories: doctor and uninstall --purge ------------------------------------
def worktree_dirs(runtime: Path) -> Iterator[Path]:
    """Every ``<runtime>/worktrees/<agent>/<message id>`` directory on disk."""
    root = runtime / "worktrees"
    for agent_dir in sorted(root.iterdir()) if root.is_dir() else ():
        if agent_dir.is_dir() and not agent_dir.is_symlink():
            yield from sorted(p for p in agent_dir.iterdir() if p.name.isdigit())


def orphans(conn: Connection, runtime: Path, repositories: set[Path]) -> dict[str, list[dict[str, Any]]]:
    """Worktree directories and ``agent-bridge/`` branches no attempt owns, with their size."""
    paths, owned_branches = owned_worktrees(conn)
    dirs = [{"path": str(p), "bytes": tree_bytes(p)} for p in worktree_dirs(runtime) if str(p) not in paths]
    # The pool's leftovers (worktree_pool.leftovers): ready entries count as ours while their
    # repository is there; retention keeps their number and age in bounds.
    dirs += [{"path": str(left.path), "bytes": tree_bytes(left.path)} for left in pool.leftovers(runtime)]
    branches = []
    for common in sorted(repositories):
        try:
            found = g.branches(common, BRANCH_PREFIX)
        except g.GitFailed:
            continue
        for name, commit in sorted(found.items()):
            if (str(common), name) not in owned_branches:
                branches.append({"repository": str(common), "branch": name, "commit": commit})
    return {"worktrees": dirs, "branches": branches}


def known_repositories(conn: Connection, workspaces: list[Path]) -> set[Path]:
    """The common git directories of the agents' workspaces and of every attempt's worktree."""
    found = {Path(r["worktree_common_dir"]) for r in worktrees_on_disk(conn)}
    found |= {Path(d) for d in _recorded_repositories(conn)}
    for workspace in workspaces:
        try:
            repo = g.find_repo(workspace) if workspace.is_dir() else None
        except g.GitFailed:
            repo = None
        if repo is not None:
            found.add(repo.common_dir)
    return {p for p in found if p.is_dir()}


def _recorded_repositories(conn: Connection) -> set[str]:
    _paths, pairs = owned_worktrees(conn)
    return {common for common, _ in pairs}


def purge_branches(settings: LocationsLike, workspaces: list[Path]) -> list[str]:
    """For ``uninstall --purge``: remove every worktree of ours, list each unmerged branch, then
    delete every ``agent-bridge/`` branch. Lines to print."""
    lines: list[str] = []
    log_to_runtime(settings, to_file=False)  # (the runtime directory goes next)
    pool.clear(settings.private_dir(), keep=0)  # every ready worktree (they hold no branch), store or not
    try:
        conn = open_store(settings.db)
    except (BridgeError, OSError):
        return [f"no store at {shown(settings.db)}: no worktree or branch of ours is known."]
    try:
        for row in worktrees_on_disk(conn):
            drop_worktree(conn, row, branch="keep")
        repositories = known_repositories(conn, workspaces)
    finally:
        conn.close()
    for common in sorted(repositories):
        found = g.branches(common, BRANCH_PREFIX)
        everyone = g.branches(common, "")
        others = {commit for name, commit in everyone.items() if not name.startswith(BRANCH_PREFIX)}  # the user's
        for name, commit in sorted(found.items()):
            unmerged = not any(g.merged(common, commit, other) for other in others)
            if unmerged:
                lines.append(f"deleting unmerged branch {name} of {common} (was {commit[:12]})")
            g.delete_branch(common, name)
        g.prune_worktrees(common)
    return lines
