"""Containment: the worker runs in a cgroup of its own where the machine delegates one
(``cgroups``); the supervisor adopts everything its worker leaves behind (a child subreaper) and
ends the whole tree (``contain``: the cgroup's ``cgroup.kill``, then ``processes.end_processes``
over its descendants, freezing and killing until none is left); every process of a worker
carries the attempt's token in its environment, so a later listener finds the tree even without
its supervisor, by sweeping ``/proc``.
"""

import contextlib
import ctypes
import os
from collections.abc import Iterator
from dataclasses import dataclass

from dispatcher.core.processes import (
    descendants,
    end_processes,
    iter_with_environment,
    reap_exited_children,
    with_environment,
)
from dispatcher.dispatch.cgroups import WorkerCgroup

TOKEN_ENV = "AGENT_BRIDGE_WORKER_TOKEN"  # noqa: S105 - the variable's name, not a token
_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Orphans of our descendants (a daemonised grandchild) are re-parented to us, not init."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def return_freed_memory() -> None:
    """Hand the heap this process has freed back to the system (glibc's ``malloc_trim``): freed
    pages in the middle of the heap otherwise stay resident in a long-lived process. Nothing
    where the C library has no such call."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)


def signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def token_processes(token: str | None) -> list[int]:
    """Pids of this user's live processes whose environment carries ``token`` (a worker tree)."""
    return with_environment(TOKEN_ENV, token) if token else []


@dataclass(frozen=True)
class WorkerTree:
    """Where one worker's processes are to be found: the attempt's ``token`` (in each one's
    environment), its ``cgroup`` (None where none was made), and whether they are ``below_us``
    (we are its supervisor, a child subreaper: nothing it starts leaves our descendants)."""

    token: str | None
    cgroup: WorkerCgroup | None = None
    below_us: bool = False


def contain(tree: WorkerTree, grace_seconds: float) -> tuple[int, int]:
    """End a worker's whole tree. Returns (found, outlived it).

    In order: its cgroup (TERM, then ``cgroup.kill``: nothing inside can fork its way out of it);
    when it is ``below_us``, every descendant of this process (what a worker daemonised, even with
    a cleared environment or out of its cgroup; no look at /proc at all once no child is left);
    otherwise (reconciliation after a supervisor crash, or a supervisor that is no subreaper)
    every process carrying its token, a sweep of every ``/proc/*/environ``. A process that forks on
    TERM, or in a loop, is frozen and killed with its children (``end_processes``)."""
    in_cgroup, outlived = tree.cgroup.end(grace_seconds) if tree.cgroup is not None else (0, False)

    def members() -> Iterator[int]:
        if tree.below_us:
            reap_exited_children()  # adopted orphans that ended by themselves: nothing to end
            yield from descendants()
        elif tree.token:
            yield from iter_with_environment(TOKEN_ENV, tree.token)

    found, left = end_processes(members, grace_seconds)
    return in_cgroup + found, left + int(outlived)


def fork_without_store() -> int:
    """``os.fork()``, refused while this process has a store connection open: SQLite's
    in-process lock bookkeeping would be copied without the locks behind it. A connection that
    nothing refers to any more (dropped in a reference cycle, say) is collected, and so closed,
    first."""
    import gc

    from dispatcher.store.connection import open_connections

    if open_connections():
        gc.collect()
    if count := open_connections():
        raise RuntimeError(f"refusing to fork with {count} store connection(s) open; close them first")
    return os.fork()
