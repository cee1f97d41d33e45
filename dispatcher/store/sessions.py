"""The ``sessions`` table: one row per MCP server process (presence.py decides what a row means)."""

import json
from dataclasses import dataclass

from dispatcher.store.connection import inserted_id
from dispatcher.store.types import Connection


@dataclass(frozen=True)
class SessionRecord:
    """A session row as stored; ``wake_paths`` is the raw JSON text (presence reads it)."""

    id: int
    agent: str
    role: str
    host: str
    pid: int
    start_time: str | None
    client_pid: int | None
    client_name: str | None
    client_version: str | None
    started_at: float
    last_call_at: float | None
    wake_paths: str
    renewed_at: float | None  # when its server last said it runs (another host's evidence)


_SELECT = (
    "SELECT id, agent, role, host, pid, start_time, client_pid, client_name, client_version, started_at,"
    " last_call_at, wake_paths, renewed_at FROM sessions"
)


def session_records(conn: Connection, agent: str | None = None) -> list[SessionRecord]:
    """Every session row (of ``agent``), oldest first."""
    if agent is None:
        rows = conn.execute(_SELECT + " ORDER BY id")
    else:
        rows = conn.execute(_SELECT + " WHERE agent = ? ORDER BY id", (agent,))
    return [SessionRecord(*tuple(row)) for row in rows]


def insert_session(
    conn: Connection,
    *,
    agent: str,
    role: str,
    host: str,
    pid: int,
    start_time: str | None,
    client_pid: int | None,
    started_at: float,
) -> int:
    cur = conn.execute(
        "INSERT INTO sessions (agent, role, host, pid, start_time, client_pid, started_at, renewed_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
        (agent, role, host, pid, start_time, client_pid, started_at, started_at),
    )
    return inserted_id(cur)


def renew_session(conn: Connection, session_id: int, now: float) -> bool:
    """Say the session still runs; False when its row is gone (ended, or cleaned away)."""
    return conn.execute("UPDATE sessions SET renewed_at = ? WHERE id = ?", (now, session_id)).rowcount == 1


def delete_session(conn: Connection, session_id: int) -> bool:
    """True when the row was there (its watches go with it)."""
    conn.execute("DELETE FROM session_watches WHERE session_id = ?", (session_id,))
    return conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,)).rowcount == 1


@dataclass(frozen=True)
class WatchRecord:
    """One running ``inbox watch`` of a session: the process that provides its wake path ``monitor``."""

    id: int
    session_id: int
    pid: int
    start_time: str | None


def watch_records(conn: Connection, agent: str | None = None) -> list[WatchRecord]:
    """Every watch row (of ``agent``'s sessions), oldest first."""
    select = "SELECT w.id, w.session_id, w.pid, w.start_time FROM session_watches AS w"
    if agent is None:
        rows = conn.execute(select + " ORDER BY w.id")
    else:
        rows = conn.execute(
            select + " JOIN sessions AS s ON s.id = w.session_id WHERE s.agent = ? ORDER BY w.id", (agent,)
        )
    return [WatchRecord(*tuple(row)) for row in rows]


def insert_watch(conn: Connection, session_id: int, *, pid: int, start_time: str | None) -> int:
    cur = conn.execute(
        "INSERT INTO session_watches (session_id, pid, start_time) VALUES (?, ?, ?) RETURNING id",
        (session_id, pid, start_time),
    )
    return inserted_id(cur)


def delete_watch(conn: Connection, watch_id: int) -> None:
    conn.execute("DELETE FROM session_watches WHERE id = ?", (watch_id,))


def set_client(conn: Connection, session_id: int, name: str | None, version: str | None) -> None:
    conn.execute("UPDATE sessions SET client_name = ?, client_version = ? WHERE id = ?", (name, version, session_id))


def set_last_call(conn: Connection, session_id: int, at: float) -> None:
    conn.execute("UPDATE sessions SET last_call_at = ? WHERE id = ?", (at, session_id))


def stored_wake_paths(conn: Connection, session_id: int) -> str | None:
    """The row's raw ``wake_paths`` JSON; None when the session is gone."""
    row = conn.execute("SELECT wake_paths FROM sessions WHERE id = ?", (session_id,)).fetchone()
    return None if row is None else str(row[0])


def set_wake_paths(conn: Connection, session_id: int, paths: list[str]) -> None:
    conn.execute("UPDATE sessions SET wake_paths = ? WHERE id = ?", (json.dumps(paths), session_id))


def newest_session_of_client(conn: Connection, agent: str, client_pid: int, host: str) -> int | None:
    """The newest session of ``agent`` started by the CLI process ``client_pid`` on ``host``."""
    row = conn.execute(
        "SELECT id FROM sessions WHERE agent = ? AND client_pid = ? AND host = ? ORDER BY id DESC",
        (agent, client_pid, host),
    ).fetchone()
    return None if row is None else int(row[0])


def may_have_wakeable_session(conn: Connection, agent: str) -> bool:
    """Necessary for a wakeable session: an interactive row of ``agent`` with any wake path or any
    watch (cheap; liveness and which paths wake are presence's to judge)."""
    row = conn.execute(
        "SELECT 1 FROM sessions AS s WHERE s.agent = ? AND s.role = 'interactive' AND (s.wake_paths != '[]'"
        " OR EXISTS (SELECT 1 FROM session_watches AS w WHERE w.session_id = s.id)) LIMIT 1",
        (agent,),
    ).fetchone()
    return row is not None
