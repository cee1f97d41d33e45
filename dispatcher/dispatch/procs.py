"""Containment: the supervisor adopts everything its worker leaves behind (a child subreaper)
and ends the whole tree (``contain``: ``processes.end_processes`` over its descendants and the
token's processes, freezing and killing until none is left); every process of a worker carries
the attempt's token in its environment, so a later listener finds the tree even without its
supervisor.
"""

import contextlib
import ctypes
import os
import signal
import subprocess
from collections.abc import Iterator

from dispatcher.core.processes import descendants, end_processes, iter_with_environment, lock_holders, with_environment

TOKEN_ENV = "AGENT_BRIDGE_WORKER_TOKEN"  # noqa: S105 - the variable's name, not a token
_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Orphans of our descendants (a daemonised grandchild) are re-parented to us, not init."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def end_worker(proc: subprocess.Popen, grace_seconds: float) -> None:
    """TERM the worker's group, KILL it after ``grace_seconds``; Popen reaps the leader, so its
    ``returncode`` is the real status (-15, -9)."""
    signal_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace_seconds)
    except subprocess.TimeoutExpired:
        signal_group(proc.pid, signal.SIGKILL)
        proc.wait()


def token_processes(token: str | None) -> list[int]:
    """Pids of this user's live processes whose environment carries ``token`` (a worker tree)."""
    return with_environment(TOKEN_ENV, token) if token else []


def contain(token: str | None, grace_seconds: float, *, below_us: bool) -> tuple[int, int]:
    """End a worker's whole tree: every process carrying ``token`` (the leader too), and with
    ``below_us`` every descendant of this process (the supervisor's: what a worker
    daemonised, even with a cleared environment). A process that forks on TERM, or in a loop,
    is frozen and killed with its children (``end_processes``). Returns (found, outlived it)."""

    def tree() -> Iterator[int]:
        if token:
            yield from iter_with_environment(TOKEN_ENV, token)
        if below_us:
            yield from descendants()

    return end_processes(tree, grace_seconds)


def flock_holder(path: str | os.PathLike) -> int | None:
    """The pid holding a flock on ``path`` (read-only: takes no lock)."""
    try:
        holders = lock_holders(os.stat(path), "FLOCK")
    except OSError:
        return None
    return holders[0] if holders else None


def fork_without_store() -> int:
    """``os.fork()``, refused while this process has a store connection open: SQLite's
    in-process lock bookkeeping would be copied without the locks behind it."""
    from dispatcher.store.connection import open_connections

    if count := open_connections():
        raise RuntimeError(f"refusing to fork with {count} store connection(s) open; close them first")
    return os.fork()
