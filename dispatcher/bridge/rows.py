"""Message rows as the tools see them: the kinds, the dedup rule, and the view every tool returns."""

from collections.abc import Sequence
from operator import itemgetter
from typing import Any

from dispatcher.core.clock import iso
from dispatcher.core.errors import BridgeError
from dispatcher.store import Connection, Row
from dispatcher.store.broadcasts import broadcast_by_dedup_key
from dispatcher.store.claims import lease_is_active
from dispatcher.store.messages import message_by_dedup_key

KINDS = ("task", "result", "notice")


def find_dedup(conn: Connection, sender: str, dedup_key: str | None, *, recipient: str | None = None) -> Row | None:
    """The sender's earlier message with this key; refused if it went to another ``recipient``
    or named a broadcast (answering ``duplicate`` would mean the new message is silently never
    delivered)."""
    if dedup_key is None:
        return None
    row = message_by_dedup_key(conn, sender, dedup_key)
    if row is None:
        broadcast = broadcast_by_dedup_key(conn, sender, dedup_key)
        if broadcast is not None:
            raise BridgeError(
                "dedup_conflict",
                f"this dedup_key was already used for broadcast #{broadcast['id']} (recipient '*'), so it cannot "
                "name a message to one recipient; nothing was sent. Pick a new dedup_key for this message.",
            )
    if row is not None and recipient is not None and row["recipient"] != recipient:
        raise BridgeError(
            "dedup_conflict",
            f"this dedup_key was already used for message #{row['id']} to {row['recipient']}, so it cannot "
            f"name a message to {recipient}; nothing was sent. Pick a new dedup_key for this message.",
        )
    return row


# The columns a message's view reads, in the order ``message_views`` unpacks them.
_VIEWED = (
    "id",
    "sender",
    "recipient",
    "text",
    "kind",
    "origin",
    "reply_to",
    "conversation_id",
    "broadcast_id",
    "created_at",
    "response_deadline",
    "claim_owner",
    "claim_expires_at",
)


def message_views(rows: Sequence[Row], worker_id: str, now: float) -> list[dict[str, Any]]:
    """The view every tool returns, for each of ``rows`` (one query's rows: the same columns).
    The columns are found by name once per query, not once per row and column (a receive
    shows up to 100 rows)."""
    if not rows:
        return []
    position = {name: i for i, name in enumerate(rows[0].keys())}
    viewed = itemgetter(*(position[name] for name in _VIEWED))
    views = []
    for row in rows:
        (id_, sender, recipient, text, kind, origin, reply_to, conversation_id, broadcast_id, created_at,
         response_deadline, claim_owner, claim_expires_at) = viewed(row)  # fmt: skip
        active = lease_is_active(claim_owner, claim_expires_at, now)
        views.append(
            {
                "id": id_,
                "sender": sender,
                "recipient": recipient,
                "text": text,
                "kind": kind,
                "origin": origin,
                "reply_to": reply_to,
                "conversation_id": conversation_id,
                "broadcast_id": broadcast_id,
                "created_at": iso(created_at),
                "response_deadline": iso(response_deadline),
                "claim_expires_at": iso(claim_expires_at) if active else None,
                "owned_by_current_worker": active and claim_owner == worker_id,
            }
        )
    return views


def message_view(row: Row, worker_id: str, now: float) -> dict[str, Any]:
    return message_views([row], worker_id, now)[0]
