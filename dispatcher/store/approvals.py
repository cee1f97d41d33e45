"""The ``approvals`` table (schema 20): a worker's requests for a tool beyond its level, and a
person's decisions on them (docs/approvals.md). The rules are ``bridge.approvals``.

A request's input lives here only. A decision is one guarded UPDATE: it applies only to a request
nobody decided yet, before its ``expires_at``. On PostgreSQL an agent's role cannot run it at
all (no UPDATE privilege on the table): only the store's owner decides.
"""

from typing import Any

from dispatcher.store.types import Connection, Row

DECISIONS = ("allow_once", "allow_attempt", "deny")
_LISTED = "id, message_id, agent, tool, requested_at, expires_at, decision, decided_by, decided_at"


def insert_request(
    conn: Connection, *, message_id: int, agent: str, tool: str, tool_input: str, now: float, expires_at: float
) -> int:
    cur = conn.execute(
        "INSERT INTO approvals (message_id, agent, tool, input, requested_at, expires_at)"
        " VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
        (message_id, agent, tool, tool_input, now, expires_at),
    )
    row = cur.fetchone()
    return int(row[0])


def get_request(conn: Connection, approval_id: int) -> Row | None:
    """The request with its input (``approvals show``, and the waiting worker)."""
    query = f"SELECT {_LISTED}, input FROM approvals WHERE id = ?"  # noqa: S608 - constant column list
    row: Row | None = conn.execute(query, (approval_id,)).fetchone()
    return row


def waiting(conn: Connection, now: float) -> list[Row]:
    """Requests nobody decided whose worker still waits, oldest first; no input."""
    return conn.execute(
        f"SELECT {_LISTED} FROM approvals WHERE decision IS NULL AND expires_at > ? ORDER BY id",  # noqa: S608 - constant column list
        (now,),
    ).fetchall()


def waiting_summary(conn: Connection, now: float) -> list[dict[str, Any]]:
    """``waiting`` as plain dicts, whatever the connection's row factory (``top``'s read-only one)."""
    rows = conn.execute(
        "SELECT id, agent, message_id, tool, requested_at FROM approvals"
        " WHERE decision IS NULL AND expires_at > ? ORDER BY id",
        (now,),
    ).fetchall()
    return [{"id": row[0], "agent": row[1], "task_id": row[2], "tool": row[3], "requested_at": row[4]} for row in rows]


def waiting_by_agent(conn: Connection, now: float) -> dict[str, int]:
    """How many requests wait for a person, per agent (the status line)."""
    rows = conn.execute(
        "SELECT agent, count(*) FROM approvals WHERE decision IS NULL AND expires_at > ? GROUP BY agent", (now,)
    ).fetchall()
    return {str(agent): int(count) for agent, count in rows}


def of_attempt(conn: Connection, message_id: int) -> list[Row]:
    """Every request of one attempt and its decision, in order; no input (``show``)."""
    return conn.execute(
        f"SELECT {_LISTED} FROM approvals WHERE message_id = ? ORDER BY id",  # noqa: S608 - constant column list
        (message_id,),
    ).fetchall()


def allowed_for_attempt(conn: Connection, message_id: int, tool: str) -> list[str]:
    """The inputs of this attempt's requests for ``tool`` that a person allowed for the rest of
    the attempt (``bridge.approvals.covers`` says which calls they cover)."""
    rows = conn.execute(
        "SELECT input FROM approvals WHERE message_id = ? AND tool = ? AND decision = 'allow_attempt' ORDER BY id",
        (message_id, tool),
    ).fetchall()
    return [str(row[0]) for row in rows]


def decide(conn: Connection, approval_id: int, decision: str, by: str, now: float) -> bool:
    """Record a person's decision; False when the request is decided already or expired."""
    cur = conn.execute(
        "UPDATE approvals SET decision = ?, decided_by = ?, decided_at = ?"
        " WHERE id = ? AND decision IS NULL AND expires_at > ?",
        (decision, by, now, approval_id, now),
    )
    return cur.rowcount == 1
