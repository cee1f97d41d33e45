"""Message rows: the insert, the fetch and the view every tool returns."""

import sqlite3

from .clock import iso

KINDS = ("task", "result", "notice")


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
) -> int:
    """``origin='system'`` marks the dispatcher's own notices; no tool can write one."""
    cur = conn.execute(
        "INSERT INTO messages (sender, recipient, kind, text, reply_to, conversation_id,"
        " dedup_key, created_at, response_deadline, origin) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (sender, recipient, kind, text, reply_to, conversation_id, dedup_key, created_at, response_deadline, origin),
    )
    return cur.lastrowid


def fetch_message(conn: sqlite3.Connection, message_id: int) -> sqlite3.Row | None:
    return conn.execute("SELECT * FROM messages WHERE id = ?", (message_id,)).fetchone()


def find_dedup(conn: sqlite3.Connection, sender: str, dedup_key: str | None) -> sqlite3.Row | None:
    if dedup_key is None:
        return None
    return conn.execute(
        "SELECT * FROM messages WHERE sender = ? AND dedup_key = ?", (sender, dedup_key)
    ).fetchone()


def claim_is_active(row: sqlite3.Row, now: float) -> bool:
    return row["claim_owner"] is not None and (row["claim_expires_at"] or 0) > now


def message_view(row: sqlite3.Row, worker_id: str, now: float) -> dict:
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
        "created_at": iso(row["created_at"]),
        "response_deadline": iso(row["response_deadline"]),
        "claim_expires_at": iso(row["claim_expires_at"]) if active else None,
        "owned_by_current_worker": active and row["claim_owner"] == worker_id,
    }
