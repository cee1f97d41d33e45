"""The machine-wide cap on running workers (``max_workers_total``): one flock per slot.

A listener takes a free slot (``slots/N.lock``, N below the cap, in the runtime directory that
all agents' listeners share) before it forks a supervisor; the supervisor inherits the locked
descriptor and the listener closes its own, so the slot is held exactly as long as the
supervisor lives: the kernel frees it when the supervisor ends, however it ends (kill -9
included), and a listener killed meanwhile frees nothing it does not hold. Lowering the cap
leaves supervisors on higher slots running; they count until they end.
"""

import fcntl
import os
from pathlib import Path

from dispatcher.core.private_files import ensure_private_dir, open_private_lock
from dispatcher.core.processes import flock_holder


def slots_dir(runtime_dir: Path) -> Path:
    return runtime_dir / "slots"


def take_slot(runtime_dir: Path, total: int) -> int | None:
    """A descriptor holding one of the ``total`` slots' locks, or None when all are held."""
    directory = ensure_private_dir(slots_dir(runtime_dir), "worker slots directory")
    for slot in range(total):
        fd = open_private_lock(directory / f"{slot}.lock")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return fd
    return None


def slots_in_use(runtime_dir: Path) -> int:
    """How many slots a live process holds (read from /proc/locks: nothing is locked here)."""
    directory = slots_dir(runtime_dir)
    if not directory.is_dir():
        return 0
    return sum(1 for path in directory.glob("*.lock") if flock_holder(path) is not None)
