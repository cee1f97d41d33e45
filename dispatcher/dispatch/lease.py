"""One listener per agent per store: a row in ``listeners`` is the store-side lease.

The flock on ``<runtime>/<agent>.lock`` only guards one runtime directory; two runtime
directories (or a deleted lock file), or two hosts on one PostgreSQL store, would let two
listeners dispatch for one agent. The row is taken in one write transaction, unless the
listener it names still runs: on this host, its pid with the recorded /proc start time (a
recycled pid does not count); on another host, which /proc cannot see, it renewed the row
within ``LISTENER_LEASE_SECONDS`` (``renew``, four times a lease, on a store that
``spans_hosts``; a SQLite file is one host's and is never renewed).
"""

import os

from dispatcher.core import host_lease
from dispatcher.core.processes import is_same_process, start_time, this_host
from dispatcher.store import Connection
from dispatcher.store.connection import write_transaction
from dispatcher.store.listeners import (
    ListenerHolder,
    delete_listener,
    listener_holder,
    put_listener,
    renew_listener,
)

LISTENER_LEASE_SECONDS = 60.0


def lease_seconds() -> float:
    return host_lease.host_lease(LISTENER_LEASE_SECONDS)


def renew_every() -> float:
    return host_lease.renew_every(lease_seconds())


def holder_alive(holder: ListenerHolder | None, host: str, now: float) -> bool:
    """Whether a lease row names a listener that is still running: by /proc on this host, by a
    renewal within the lease on another."""
    if holder is None:
        return False
    if holder.host != host:
        return host_lease.renewed_within(holder.renewed_at, now, lease_seconds())
    return holder.pid != os.getpid() and is_same_process(holder.pid, holder.start_time)


def acquire(conn: Connection, agent: str, runtime_dir: str, now: float) -> ListenerHolder | None:
    """Take the lease for this process; return None on success, else the live holder."""
    host, pid = this_host(), os.getpid()
    with write_transaction(conn):
        holder = listener_holder(conn, agent)
        if holder is not None and holder_alive(holder, host, now):
            return holder
        put_listener(
            conn, agent, pid=pid, start_time=start_time(pid), host=host, runtime_dir=runtime_dir, started_at=now
        )
    return None


def renew(conn: Connection, agent: str, runtime_dir: str, now: float) -> ListenerHolder | None:
    """Renew this process's lease, or take it again if nobody live holds it; None on success,
    else the live holder (it took over while this listener could not renew: this one must stop)."""
    with write_transaction(conn):
        if renew_listener(conn, agent, pid=os.getpid(), host=this_host(), now=now):
            return None
    return acquire(conn, agent, runtime_dir, now)


def release(conn: Connection, agent: str) -> None:
    """Give the lease back, if it is still ours."""
    with write_transaction(conn):
        delete_listener(conn, agent, pid=os.getpid(), host=this_host())
