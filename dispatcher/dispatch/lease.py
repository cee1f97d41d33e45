"""One listener per agent per store: a row in ``listeners`` is the store-side lease.

The flock on ``<runtime>/<agent>.lock`` only guards one runtime directory; two runtime
directories (or a deleted lock file) would let two listeners dispatch for one agent on
one store. The row is taken in one BEGIN IMMEDIATE, unless the process it names is
alive on this host with the recorded /proc start time (a recycled pid does not count).
"""

import os

from dispatcher.core.processes import is_same_process, start_time, this_host
from dispatcher.store import Connection
from dispatcher.store.connection import write_transaction
from dispatcher.store.listeners import ListenerHolder, delete_listener, listener_holder, put_listener


def holder_alive(holder: ListenerHolder | None, host: str) -> bool:
    """Whether a lease row names a listener that is still running (only checkable on this host)."""
    if holder is None:
        return False
    return holder.host == host and holder.pid != os.getpid() and is_same_process(holder.pid, holder.start_time)


def acquire(conn: Connection, agent: str, runtime_dir: str, now: float) -> int | None:
    """Take the lease for this process; return None on success, else the live holder's pid."""
    host, pid = this_host(), os.getpid()
    with write_transaction(conn):
        holder = listener_holder(conn, agent)
        if holder is not None and holder_alive(holder, host):
            return holder.pid
        put_listener(
            conn, agent, pid=pid, start_time=start_time(pid), host=host, runtime_dir=runtime_dir, started_at=now
        )
    return None


def release(conn: Connection, agent: str) -> None:
    """Give the lease back, if it is still ours."""
    with write_transaction(conn):
        delete_listener(conn, agent, pid=os.getpid(), host=this_host())
