"""Message rows: the insert, the fetch, what an active claim is, and the view every tool returns."""

import sqlite3
from collections.abc import Mapping
from typing import Any

from .clock import iso
from .errors import BridgeError
from .store import inserted_id

KINDS = ("task", "result", "notice")
# No lease outlives this from the moment the bridge reads it: one taken while the clock
# was far ahead would otherwise hide its message for that long.
LEASE_CAP_SECONDS = 3600


def insert_message(
    conn: sqlite3.Connection,
    *,
    sender: str,
    recipient: str,
    text: str,
    created_at: float,
    kind: str | None = None,
    reply_to: int | None = None,
    conversation_id: int | None = None,
    dedup_key: str | None = None,
    response_deadline: float | None = None,
    origin: str = "agent",
    broadcast_id: int | None = None,
) -> int:
    """``origin='system'`` marks the dispatcher's own notices; no tool can write one."""
    cur = conn.execute(
        "INSERT INTO messages (sender, recipient, kind, text, reply_to, conversation_id,"
        " dedup_key, created_at, response_deadline, origin, broadcast_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            sender,
            recipient,
            kind,
            text,
            reply_to,
            conversation_id,
            dedup_key,
            created_at,
            response_deadline,
            origin,
            broadcast_id,
        ),
    )
    return inserted_id(cur)


def fetch_message(conn: sqlite3.Connection, message_id: int) -> sqlite3.Row | None:
    row: sqlite3.Row | None = conn.execute("SELECT * FROM messages WHERE id = ?", (message_id,)).fetchone()
    return row


def fetch_existing_message(conn: sqlite3.Connection, message_id: int) -> sqlite3.Row:
    """``fetch_message`` for a message the caller has just read or written: it is there."""
    row = fetch_message(conn, message_id)
    if row is None:
        raise LookupError(f"message #{message_id} is gone although it was just read")
    return row


def find_dedup(
    conn: sqlite3.Connection, sender: str, dedup_key: str | None, *, recipient: str | None = None
) -> sqlite3.Row | None:
    """The sender's earlier message with this key; refused if it went to another ``recipient``
    or named a broadcast (answering ``duplicate`` would mean the new message is silently never
    delivered)."""
    if dedup_key is None:
        return None
    row: sqlite3.Row | None = conn.execute(
        "SELECT * FROM messages WHERE sender = ? AND dedup_key = ?", (sender, dedup_key)
    ).fetchone()
    if row is None:
        broadcast = conn.execute(
            "SELECT id FROM broadcasts WHERE sender = ? AND dedup_key = ?", (sender, dedup_key)
        ).fetchone()
        if broadcast is not None:
            raise BridgeError(
                "dedup_conflict",
                f"this dedup_key was already used for broadcast #{broadcast[0]} (recipient '*'), so it cannot "
                "name a message to one recipient; nothing was sent. Pick a new dedup_key for this message.",
            )
    if row is not None and recipient is not None and row["recipient"] != recipient:
        raise BridgeError(
            "dedup_conflict",
            f"this dedup_key was already used for message #{row['id']} to {row['recipient']}, so it cannot "
            f"name a message to {recipient}; nothing was sent. Pick a new dedup_key for this message.",
        )
    return row


def claim_is_active(row: sqlite3.Row | Mapping[str, Any], now: float) -> bool:
    """The one definition of an active claim (``active_claim_sql`` is its SQL twin)."""
    expires = row["claim_expires_at"]
    return row["claim_owner"] is not None and expires is not None and expires > now


def active_claim_sql(alias: str = "") -> str:
    """``claim_is_active`` as an SQL condition over ``alias.`` columns, binding ``:now``;
    never NULL, so ``NOT`` of it is safe."""
    p = f"{alias}." if alias else ""
    return f"({p}claim_owner IS NOT NULL AND IFNULL({p}claim_expires_at, 0) > :now)"


def cap_far_lease(conn: sqlite3.Connection, row: sqlite3.Row, now: float) -> sqlite3.Row:
    """Persist the lease cap on a row just read; the row as it now stands."""
    cap = now + LEASE_CAP_SECONDS
    if row["claim_expires_at"] is None or not row["claim_expires_at"] > cap:
        return row
    conn.execute(
        "UPDATE messages SET claim_expires_at = ? WHERE id = ? AND claim_expires_at > ?", (cap, row["id"], cap)
    )
    return fetch_existing_message(conn, row["id"])


def cap_far_leases(conn: sqlite3.Connection, recipient: str, now: float) -> None:
    """Persist the lease cap on every unacknowledged message of ``recipient``: a plain read
    unless a lease reaches past now + LEASE_CAP_SECONDS."""
    where = "recipient = :agent AND acknowledged_at IS NULL AND claim_expires_at > :cap"
    params = {"agent": recipient, "cap": now + LEASE_CAP_SECONDS}
    if conn.execute(f"SELECT 1 FROM messages WHERE {where} LIMIT 1", params).fetchone():  # noqa: S608 - constant SQL fragments only; every value is a bound parameter
        conn.execute(f"UPDATE messages SET claim_expires_at = :cap WHERE {where}", params)  # noqa: S608 - constant SQL fragments only; every value is a bound parameter


def message_view(row: sqlite3.Row, worker_id: str, now: float) -> dict[str, Any]:
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
