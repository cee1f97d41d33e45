"""Settling an attempt: judge the evidence, record the outcome, and on failure tell the sender.

Shared by the supervisor (which watched the worker) and by reconciliation (which finds
attempts whose supervisor died), so both settle the same way.
"""

import sqlite3
import time

from ..conversations import block_conversation
from ..logs import get_logger
from ..rows import fetch_message, find_dedup, insert_message
from ..store import write_transaction
from .attempts import FAILURE_OUTCOMES, finish_attempt
from .evidence import judge

log = get_logger("agent_bridge.dispatch")


def notice_key(message_id: int) -> str:
    return f"agent-bridge:dispatch-notice:{message_id}"


def notify_failure(conn: sqlite3.Connection, message: sqlite3.Row, outcome: str, error_kind: str | None) -> None:
    """A short payload-free notice to the sender; a conversation is frozen as ``blocked``."""
    agent, now = message["recipient"], time.time()
    reason = f" ({error_kind})" if error_kind else ""
    text = (
        f"Dispatch of message #{message['id']} to {agent} ended: {outcome}{reason}. It is not retried "
        f"automatically; see `agent-bridge listener status --agent {agent}` and decide what to do."
    )
    with write_transaction(conn):
        if find_dedup(conn, agent, notice_key(message["id"])) is None:
            insert_message(
                conn, sender=agent, recipient=message["sender"], text=text, kind="notice",
                reply_to=message["id"], dedup_key=notice_key(message["id"]), created_at=now,
            )
    if message["conversation_id"] is not None:
        block_conversation(conn, message["conversation_id"], agent, f"dispatch_{outcome}", now)


def conclude(
    conn: sqlite3.Connection,
    message_id: int,
    *,
    fallback: str,
    error_kind: str | None = None,
    exit_code: int | None = None,
    diagnostics: dict | None = None,
) -> str:
    """Settle one attempt from the store's evidence; ``fallback`` applies when there is none."""
    now = time.time()
    outcome, evidence_kind = judge(conn, message_id, now)
    if outcome is None:
        outcome, error_kind = fallback, error_kind or evidence_kind
    if not finish_attempt(
        conn, message_id, outcome=outcome, now=now, exit_code=exit_code, error_kind=error_kind, diagnostics=diagnostics
    ):
        return outcome  # someone else settled it first; they also sent any notice
    log.info("attempt_settled", message_id=message_id, outcome=outcome, error_kind=error_kind, exit_code=exit_code)
    if outcome in FAILURE_OUTCOMES:
        message = fetch_message(conn, message_id)
        if message is not None:
            notify_failure(conn, message, outcome, error_kind)
    return outcome
