"""Judge an attempt by what the worker left in the store, never by its exit code alone.

- succeeded: the original is acknowledged and the fitting reply exists: a result to
  the task's sender, or for a review turn a follow-up task or a conversation moved to
  completed / needs_human;
- blocked: a result starting ``blocked:`` and the claim released (an honest stop);
- None: no such evidence (the caller decides between failed, timeout and crashed).
"""

import sqlite3

from ..rows import claim_is_active, fetch_message

BLOCKED_PREFIX = "blocked:"


def judge(conn: sqlite3.Connection, message_id: int, now: float) -> tuple[str | None, str | None]:
    """Returns (outcome or None, error_kind or None)."""
    msg = fetch_message(conn, message_id)
    if msg is None:
        return None, "message_gone"
    acknowledged = msg["acknowledged_at"] is not None
    if msg["kind"] == "result":
        return _judge_review(conn, msg, acknowledged)
    replies = conn.execute(
        "SELECT text FROM messages WHERE reply_to = ? AND sender = ? AND recipient = ? AND kind = 'result'",
        (message_id, msg["recipient"], msg["sender"]),
    ).fetchall()
    blocked = any(r["text"].lstrip().lower().startswith(BLOCKED_PREFIX) for r in replies)
    answered = len(replies) > (1 if blocked else 0) or (replies and not blocked)
    if acknowledged and answered:
        return "succeeded", None
    if blocked:
        if acknowledged or not claim_is_active(msg, now):
            return "blocked", None
        return None, "blocked_without_release"
    if replies and not acknowledged:
        return None, "result_without_ack"
    if acknowledged:
        return None, "ack_without_result"
    return None, "no_evidence"


def _judge_review(conn: sqlite3.Connection, msg: sqlite3.Row, acknowledged: bool) -> tuple[str | None, str | None]:
    follow_up = conn.execute(
        "SELECT 1 FROM messages WHERE reply_to = ? AND sender = ? AND kind = 'task'", (msg["id"], msg["recipient"])
    ).fetchone()
    state = conn.execute("SELECT state FROM conversations WHERE id = ?", (msg["conversation_id"],)).fetchone()
    decided = follow_up is not None or (state is not None and state["state"] in ("completed", "needs_human"))
    if acknowledged and decided:
        return "succeeded", None
    if decided:
        return None, "decision_without_ack"
    return None, "no_evidence"
