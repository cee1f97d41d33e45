"""The dispatch set, defined once for the listener, recovery and the backlog report.

A message wakes a worker of its recipient when it is a ``task`` (standalone, or in an
active conversation), or a ``result`` in an active conversation that goes back to its
initiator (the review turn). Notices and plain messages never do. It must also be
never attempted, unacknowledged and not actively claimed. Age splits the set: within
``dispatch_max_age_seconds`` it is dispatchable, older it is stale (left for a human).
"""

import sqlite3
from dataclasses import dataclass

_CANDIDATES = """
SELECT m.id, m.sender, m.kind, m.conversation_id, m.created_at
FROM messages AS m
LEFT JOIN conversations AS c ON c.id = m.conversation_id
WHERE m.recipient = :agent
  AND (:id IS NULL OR m.id = :id)
  AND m.acknowledged_at IS NULL
  AND (m.claim_owner IS NULL OR m.claim_expires_at <= :now)
  AND NOT EXISTS (SELECT 1 FROM dispatch_attempts AS a WHERE a.message_id = m.id)
  AND (
        (m.kind = 'task' AND (m.conversation_id IS NULL OR (c.state = 'active' AND c.expires_at > :now)))
     OR (m.kind = 'result' AND c.state = 'active' AND c.expires_at > :now AND c.initiator = :agent)
  )
  AND m.created_at {age_test} :oldest
ORDER BY m.id
LIMIT :limit
"""
_DISPATCHABLE = _CANDIDATES.format(age_test=">=")
_STALE = _CANDIDATES.format(age_test="<")


@dataclass(frozen=True)
class Candidate:
    message_id: int
    sender: str
    kind: str
    conversation_id: int | None
    created_at: float


def _query(conn: sqlite3.Connection, sql: str, agent: str, now: float, max_age: float, limit: int) -> list[Candidate]:
    rows = conn.execute(sql, {"agent": agent, "now": now, "oldest": now - max_age, "limit": limit, "id": None})
    return [Candidate(*row) for row in rows]


def dispatchable(conn: sqlite3.Connection, agent: str, now: float, max_age: float, limit: int = 1) -> list[Candidate]:
    return _query(conn, _DISPATCHABLE, agent, now, max_age, limit)


def stale(conn: sqlite3.Connection, agent: str, now: float, max_age: float, limit: int = 1000) -> list[Candidate]:
    return _query(conn, _STALE, agent, now, max_age, limit)


def is_candidate(conn: sqlite3.Connection, agent: str, message_id: int, now: float) -> bool:
    """Whether one message is in the dispatch set, ignoring age (for a deliberate manual dispatch)."""
    row = conn.execute(_DISPATCHABLE, {"agent": agent, "now": now, "oldest": float("-inf"), "limit": 1, "id": message_id})
    return row.fetchone() is not None
