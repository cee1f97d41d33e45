"""One listener per agent per store: a row in ``listeners`` is the store-side lease.

The flock on ``<runtime>/<agent>.lock`` only guards one runtime directory; two runtime
directories (or a deleted lock file) would let two listeners dispatch for one agent on
one store. The row is taken in one BEGIN IMMEDIATE, unless the process it names is
alive on this host with the recorded /proc start time (a recycled pid does not count).
"""

import os
import sqlite3

from ..processes import is_same_process, start_time, this_host
from ..store.connection import write_transaction


def holder_alive(row: sqlite3.Row | tuple | None, host: str) -> bool:
    """Whether a lease row names a listener that is still running (only checkable on this host)."""
    if row is None:
        return False
    pid, started, row_host = row[0], row[1], row[2]
    return row_host == host and pid != os.getpid() and is_same_process(pid, started)


def acquire(conn: sqlite3.Connection, agent: str, runtime_dir: str, now: float) -> int | None:
    """Take the lease for this process; return None on success, else the live holder's pid."""
    host, pid = this_host(), os.getpid()
    with write_transaction(conn):
        row = conn.execute("SELECT pid, start_time, host FROM listeners WHERE agent = ?", (agent,)).fetchone()
        if holder_alive(row, host):
            return row[0]
        conn.execute(
            "INSERT OR REPLACE INTO listeners (agent, pid, start_time, host, runtime_dir, started_at)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (agent, pid, start_time(pid), host, runtime_dir, now),
        )
    return None


def release(conn: sqlite3.Connection, agent: str) -> None:
    """Give the lease back, if it is still ours."""
    with write_transaction(conn):
        conn.execute(
            "DELETE FROM listeners WHERE agent = ? AND pid = ? AND host = ?", (agent, os.getpid(), this_host())
        )
