"""Message rows as the tools see them: the kinds, the dedup rule, and the view every tool returns."""

from typing import Any

from dispatcher.core.clock import iso
from dispatcher.core.errors import BridgeError
from dispatcher.store import Connection, Row
from dispatcher.store.broadcasts import broadcast_by_dedup_key
from dispatcher.store.claims import claim_is_active
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


def message_view(row: Row, worker_id: str, now: float) -> dict[str, Any]:
    active = claim_is_active(row, now)
    return {
        "id": row["id"],
        "sender": row["sender"],
        "recipient": row["recipient"],
        "text": row["text"],
        "kind": row["kind"],
        "origin": row["origin"],
        "reply_to": row["reply_to"],
        "conversation_id": row["conversation_id"],
        "broadcast_id": row["broadcast_id"],
        "created_at": iso(row["created_at"]),
        "response_deadline": iso(row["response_deadline"]),
        "claim_expires_at": iso(row["claim_expires_at"]) if active else None,
        "owned_by_current_worker": active and row["claim_owner"] == worker_id,
    }
