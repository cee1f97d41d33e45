"""The ``listeners`` table: one row per agent, the store-side lease of its listener."""

from dataclasses import dataclass

from dispatcher.store.types import Connection


@dataclass(frozen=True)
class ListenerHolder:
    pid: int
    start_time: str | None
    host: str
    renewed_at: float | None  # when it last said it runs (a row from before leases: never)


def listener_holder(conn: Connection, agent: str) -> ListenerHolder | None:
    row = conn.execute("SELECT pid, start_time, host, renewed_at FROM listeners WHERE agent = ?", (agent,)).fetchone()
    return None if row is None else ListenerHolder(*tuple(row))


def put_listener(
    conn: Connection,
    agent: str,
    *,
    pid: int,
    start_time: str | None,
    host: str,
    runtime_dir: str,
    started_at: float,
) -> None:
    """Make this the agent's row, replacing any other (renewed as of its start)."""
    conn.execute(
        "INSERT INTO listeners (agent, pid, start_time, host, runtime_dir, started_at, renewed_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (agent) DO UPDATE SET pid = excluded.pid,"
        " start_time = excluded.start_time, host = excluded.host, runtime_dir = excluded.runtime_dir,"
        " started_at = excluded.started_at, renewed_at = excluded.renewed_at",
        (agent, pid, start_time, host, runtime_dir, started_at, started_at),
    )


def renew_listener(conn: Connection, agent: str, *, pid: int, host: str, now: float) -> bool:
    """Say the row's listener still runs, if the row still names it; False when it does not."""
    cur = conn.execute(
        "UPDATE listeners SET renewed_at = ? WHERE agent = ? AND pid = ? AND host = ?", (now, agent, pid, host)
    )
    return cur.rowcount == 1


def delete_listener(conn: Connection, agent: str, *, pid: int, host: str) -> None:
    """Remove the agent's row if it names this process."""
    conn.execute("DELETE FROM listeners WHERE agent = ? AND pid = ? AND host = ?", (agent, pid, host))
