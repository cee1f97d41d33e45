"""Process evidence from /proc (via psutil): is the process we recorded still the same one?"""

import os
import signal
import time

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


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill_group(pgid: int, grace_seconds: float) -> None:
    """TERM the process group, wait up to ``grace_seconds``, then KILL what is left."""
    for sig, wait in ((signal.SIGTERM, grace_seconds), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            _reap(pgid)
            if not group_alive(pgid):
                return
            time.sleep(0.05)


def _reap(pgid: int) -> None:
    # Our own children in that group would stay zombies (and "alive" to killpg) until reaped.
    try:
        while os.waitpid(-pgid, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass


def flock_holder(path: str | os.PathLike) -> int | None:
    """The pid holding a flock on ``path`` (read-only: takes no lock)."""
    try:
        holders = lock_holders(os.stat(path), "FLOCK")
    except OSError:
        return None
    return holders[0] if holders else None
