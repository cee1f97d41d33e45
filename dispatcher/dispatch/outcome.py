"""Settling an attempt: judge the evidence, record the outcome, and on failure tell the sender.

Everything that follows from a verdict commits with it, in one transaction: the
attempt row, the sender's system notice and a conversation frozen as ``blocked``. A
crash at any point leaves either all of it or none of it (and then reconciliation
settles the attempt). Shared by the supervisor and by reconciliation.
"""

import sqlite3
import time
from collections.abc import Callable

from ..conversations import block_conversation
from ..logs import get_logger
from ..rows import fetch_message, insert_message
from ..store import write_transaction
from .attempts import FAILURE_OUTCOMES, finish_attempt
from .evidence import verdict

log = get_logger("agent_bridge.dispatch")


def _notify_failure(conn: sqlite3.Connection, message: sqlite3.Row, outcome: str, error_kind: str | None,
                    now: float) -> None:
    """A short payload-free system notice to the sender; a conversation is frozen as ``blocked``."""
    agent = message["recipient"]
    reason = f" ({error_kind})" if error_kind else ""
    text = (
        f"Dispatch of message #{message['id']} to {agent} ended: {outcome}{reason}. It is not retried "
        f"automatically; see `agent-bridge listener status --agent {agent}` and decide what to do."
    )
    insert_message(
        conn, sender=agent, recipient=message["sender"], text=text, kind="notice",
        reply_to=message["id"], created_at=now, origin="system",
    )
    if message["conversation_id"] is not None:
        block_conversation(conn, message["conversation_id"], agent, f"dispatch_{outcome}", now)


def settle(
    conn: sqlite3.Connection,
    message_id: int,
    *,
    fallback: str,
    error_kind: str | None = None,
    exit_code: int | None = None,
    diagnostics: dict | None = None,
    now: float | None = None,
    before_commit: Callable[[], None] | None = None,
) -> str:
    """Settle one attempt from the store's evidence; ``fallback`` applies when there is none.

    Returns the outcome; when another process settled the attempt first, theirs.
    ``before_commit`` runs inside the transaction just before COMMIT (crash-point tests).
    """
    now = time.time() if now is None else now
    with write_transaction(conn):
        outcome, evidence_kind = verdict(conn, message_id, now)
        if outcome is None:
            outcome, error_kind = fallback, error_kind or evidence_kind
        if not finish_attempt(
            conn, message_id, outcome=outcome, now=now, exit_code=exit_code, error_kind=error_kind,
            diagnostics=diagnostics,
        ):
            row = conn.execute("SELECT outcome FROM dispatch_attempts WHERE message_id = ?", (message_id,)).fetchone()
            return row["outcome"] if row else outcome
        if outcome in FAILURE_OUTCOMES and (message := fetch_message(conn, message_id)) is not None:
            _notify_failure(conn, message, outcome, error_kind, now)
        if before_commit is not None:
            before_commit()
    log.info("attempt_settled", message_id=message_id, outcome=outcome, error_kind=error_kind, exit_code=exit_code)
    return outcome
