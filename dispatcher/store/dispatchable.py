"""The SQL side of the dispatch rule: the facts of a message, and the scan's pre-filter.

The rule itself is ``dispatch.queue.dispatch_refusal`` (it needs the config and the
conversation rules, which live above the store). The scan below only pre-narrows, by
conditions every message that rule dispatches meets; each line names the refusal it
mirrors. ``tests/store/test_dispatchable_prefilter.py`` checks on generated stores that the scan
never drops a message the rule would dispatch: change both together.
"""

from collections.abc import Iterator
from typing import Any

from dispatcher.store.types import Connection, Cursor

_FACTS = """
SELECT m.id, m.sender, m.recipient, m.kind, m.created_at, m.acknowledged_at, m.claim_owner,
       m.claim_expires_at, m.conversation_id,
       EXISTS (SELECT 1 FROM dispatch_attempts AS a WHERE a.message_id = m.id) AS attempted,
       EXISTS (SELECT 1 FROM messages AS r WHERE r.reply_to = m.id AND r.kind = 'result'
               AND r.sender = m.recipient) AS answered,
       c.state, c.expires_at, c.initiator, c.in_flight_message_id
FROM messages AS m
LEFT JOIN conversations AS c ON c.id = m.conversation_id
"""
# Necessary conditions only (the partial index messages_unacknowledged serves the first two).
_SCAN = (
    _FACTS  # noqa: S608 - constant SQL fragments only; every value is a bound parameter
    + """
WHERE m.recipient = :agent
  AND m.acknowledged_at IS NULL
  AND m.kind IN ('task', 'result')
  AND NOT EXISTS (SELECT 1 FROM dispatch_attempts AS a WHERE a.message_id = m.id)
  AND m.created_at >= :oldest
ORDER BY m.id
"""
)
# recipient: the scan is per agent; acknowledged_at: already_acknowledged; kind:
# not_dispatchable (only a task or a review turn's result); NOT EXISTS: already_attempted;
# created_at >= :oldest: stale (the caller passes -inf to see stale messages too).
_ONE = _FACTS + "WHERE m.id = :id"


def _dicts(cursor: Cursor) -> Iterator[dict[str, Any]]:
    names = [d[0] for d in cursor.description]
    for values in cursor:
        yield dict(zip(names, values, strict=True))


def scan_facts(conn: Connection, agent: str, oldest: float) -> Iterator[dict[str, Any]]:
    """The facts of each message of ``agent`` that may be dispatchable, oldest first (lazily:
    a caller that stops early reads no further)."""
    return _dicts(conn.execute(_SCAN, {"agent": agent, "oldest": oldest}))


def message_facts(conn: Connection, message_id: int) -> dict[str, Any] | None:
    """The facts of one message, unfiltered; None when there is no such message."""
    return next(_dicts(conn.execute(_ONE, {"id": message_id})), None)
