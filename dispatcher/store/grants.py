"""The ``task_grants`` table (schema 21): a grant for one task, given by a person's ``retry``."""

import json

from dispatcher.store.types import Connection, Row


def insert_grant(conn: Connection, *, message_id: int, retry_of: int, grants: list[str], by: str, now: float) -> None:
    conn.execute(
        "INSERT INTO task_grants (message_id, retry_of, grants, granted_by, granted_at) VALUES (?, ?, ?, ?, ?)",
        (message_id, retry_of, json.dumps(grants), by, now),
    )


def grants_of(conn: Connection, message_id: int) -> list[str]:
    """The grants given to this message's task (empty for every message not sent by ``retry``)."""
    row = conn.execute("SELECT grants FROM task_grants WHERE message_id = ?", (message_id,)).fetchone()
    return [str(g) for g in json.loads(row[0])] if row is not None else []


def grant_row(conn: Connection, message_id: int) -> Row | None:
    row: Row | None = conn.execute(
        "SELECT message_id, retry_of, grants, granted_by, granted_at FROM task_grants WHERE message_id = ?",
        (message_id,),
    ).fetchone()
    return row
