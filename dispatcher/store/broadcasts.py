"""Broadcast rows: one per ``send_message(recipient="*")``, holding the sender's dedup key for
the whole set; its copies are ordinary messages pointing at it."""

from dispatcher.store.connection import inserted_id
from dispatcher.store.types import Connection, Row


def broadcast_by_dedup_key(conn: Connection, sender: str, dedup_key: str) -> Row | None:
    """``id, created_at`` of the sender's broadcast with this key."""
    row: Row | None = conn.execute(
        "SELECT id, created_at FROM broadcasts WHERE sender = ? AND dedup_key = ?", (sender, dedup_key)
    ).fetchone()
    return row


def insert_broadcast(conn: Connection, *, sender: str, dedup_key: str | None, created_at: float) -> int:
    cur = conn.execute(
        "INSERT INTO broadcasts (sender, dedup_key, created_at) VALUES (?, ?, ?) RETURNING id",
        (sender, dedup_key, created_at),
    )
    return inserted_id(cur)


def broadcast_copies(conn: Connection, broadcast_id: int) -> list[tuple[int, str]]:
    """``(id, recipient)`` of each copy, in id order."""
    return [
        (r[0], r[1])
        for r in conn.execute("SELECT id, recipient FROM messages WHERE broadcast_id = ? ORDER BY id", (broadcast_id,))
    ]
