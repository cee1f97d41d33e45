"""Who holds a lock on a file, read from /proc/locks: takes no lock, changes nothing."""

import os
from pathlib import Path


def lock_holders(st: os.stat_result, kind: str | None = None) -> list[int] | None:
    """Pids holding (not waiting for) a lock of ``kind`` (FLOCK, POSIX, OFDLCK; any if None)
    on the file ``st`` describes; None when /proc/locks cannot be read."""
    try:
        with Path("/proc/locks").open() as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    wanted = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    holders = []
    for line in lines:
        # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; blocked waiters carry "->".
        fields = line.split()
        if "->" in fields or len(fields) < 6 or fields[5] != wanted:
            continue
        if kind is None or fields[1] == kind:
            holders.append(int(fields[4]))
    return holders
