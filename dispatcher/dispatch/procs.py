"""Process evidence from /proc (via psutil): is the process we recorded still the same one?
And containment: the supervisor adopts everything its worker leaves behind (a child
subreaper) and ends the whole tree; every process of a worker carries the attempt's token
in its environment, so a later listener finds the tree even without its supervisor.
"""

import contextlib
import ctypes
import os
import signal
import subprocess
from pathlib import Path

from ..proclocks import lock_holders

# create_time comes from /proc/<pid>/stat in clock ticks; equal processes agree far closer.
_SAME_START_TOLERANCE = 0.05


def start_time(pid: int) -> float | None:
    import psutil  # imported here: the status line's path should not pay for it

    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return None


def is_same_process(pid: int | None, recorded_start: float | None) -> bool:
    """True when ``pid`` is alive, not a zombie, and started when we recorded it (not a recycled pid)."""
    import psutil

    if not pid or recorded_start is None:
        return False
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return abs(proc.create_time() - recorded_start) < _SAME_START_TOLERANCE
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return False


TOKEN_ENV = "AGENT_BRIDGE_WORKER_TOKEN"  # noqa: S105 - the variable's name, not a token
_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Orphans of our descendants (a daemonised grandchild) are re-parented to us, not init."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def end_worker(proc: subprocess.Popen, grace_seconds: float) -> None:
    """TERM the worker's group, KILL it after ``grace_seconds``; Popen reaps the leader, so its
    ``returncode`` is the real status (-15, -9)."""
    _signal_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace_seconds)
    except subprocess.TimeoutExpired:
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()


def sweep_descendants(grace_seconds: float) -> int:
    """End every process below us (the worker's leftovers, adopted as subreaper) and reap
    them. Returns how many there were."""
    import psutil

    try:
        left = psutil.Process().children(recursive=True)
    except psutil.Error:
        return 0
    return _terminate(left, grace_seconds)


def _terminate(procs: list, grace_seconds: float) -> int:
    import psutil

    for sig in (signal.SIGTERM, signal.SIGKILL):
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(sig)
        procs = psutil.wait_procs(procs, timeout=grace_seconds if sig == signal.SIGTERM else 5.0)[1]
        if not procs:
            break
    return len(procs)


def token_processes(token: str | None) -> list[int]:
    """Pids of this user's live processes whose environment carries ``token`` (a worker tree;
    a zombie's environ reads empty, so finished processes never match)."""
    if not token:
        return []
    needle, uid, found = f"{TOKEN_ENV}={token}".encode(), os.getuid(), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def kill_processes(pids: list[int], grace_seconds: float) -> None:
    """TERM these processes (if alive, not zombies), KILL them after ``grace_seconds``."""
    import psutil

    procs = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            if proc.status() != psutil.STATUS_ZOMBIE:
                procs.append(proc)
        except psutil.Error:
            continue
    _terminate(procs, grace_seconds)


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
    from ..store.connection import open_connections

    if count := open_connections():
        raise RuntimeError(f"refusing to fork with {count} store connection(s) open; close them first")
    return os.fork()
