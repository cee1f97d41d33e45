"""Messages: send, receive, acknowledge, look up. Plain functions over a connection."""

import secrets
from collections.abc import Callable, Collection
from functools import partial
from typing import Any, cast

from dispatcher.bridge.broadcast import BROADCAST_RECIPIENT, send_broadcast
from dispatcher.bridge.conversations import check_conversation_send, take_turn
from dispatcher.bridge.rows import KINDS, find_dedup, message_view, message_views
from dispatcher.core.clock import iso
from dispatcher.core.diffstat import WORKTREE_FIELDS, worktree_summary
from dispatcher.core.errors import BridgeError, StoreUnavailable
from dispatcher.core.lifecycle import FAILURE_OUTCOMES
from dispatcher.core.validation import (
    check_agent_id,
    check_body,
    check_dedup_key,
    check_message_id,
    check_recipient,
    clamp,
)
from dispatcher.store import CONNECTION_LOST, STORE_ERRORS, Connection, Row, write_transaction
from dispatcher.store.claims import claim_is_active
from dispatcher.store.messages import (
    cap_far_lease,
    cap_far_leases,
    dispatch_summary_row,
    fetch_message,
    insert_message,
    mark_acknowledged,
    mark_delivered,
    receivable_messages,
    reply_ids,
    result_ids_after,
)
from dispatcher.store.store_clock import store_now

RESPONSE_TIMEOUT_RANGE = (1, 3600)
RECEIVE_LIMIT_RANGE = (1, 100)
MAX_ACK_IDS = 500


def _load_reply_target(conn: Connection, reply_to: int, sender: str) -> Row:
    row = fetch_message(conn, reply_to)
    if row is None or sender not in (row["sender"], row["recipient"]):
        raise BridgeError("reply_to_not_found", f"reply_to #{reply_to} is not a message sent to or by you ({sender}).")
    return row


def _check_standalone_result(reply: Row | None, sender: str, recipient: str) -> None:
    if reply is None or reply["kind"] != "task" or reply["recipient"] != sender:
        raise BridgeError(
            "result_without_task",
            "a result must reply_to a task that was sent to you; use a plain message or a notice otherwise.",
        )
    if recipient != reply["sender"]:
        raise BridgeError("wrong_recipient", f"a result goes back to the task's sender, {reply['sender']}.")


def send_message(
    conn: Connection,
    *,
    sender: str,
    recipient: str,
    text: str,
    agents: Collection[str],
    max_body_bytes: int = 262144,
    reply_to: int | None = None,
    dedup_key: str | None = None,
    response_timeout_seconds: float | None = None,
    conversation_id: int | None = None,
    kind: str | None = None,
    now: float | None = None,
    attempt: int | None = None,
    traceparent: str | None = None,
) -> dict[str, Any]:
    """``attempt``: the attempt (its message id) whose worker's server sends this; recorded on the row.
    ``traceparent``: the send's span (docs/traces.md), stored with a message to one agent."""
    now = store_now(conn) if now is None else now
    check_agent_id(sender, "sender")
    broadcast = recipient == BROADCAST_RECIPIENT
    if not broadcast:
        check_recipient(sender, recipient, agents)
    check_body(text, max_body_bytes)
    dedup_key = check_dedup_key(dedup_key)
    if kind is not None and kind not in KINDS:
        raise BridgeError("invalid_kind", f"kind must be one of {', '.join(KINDS)}, or omitted for a plain message.")
    if reply_to is not None:
        check_message_id(reply_to, "reply_to")
    if conversation_id is not None:
        check_message_id(conversation_id, "conversation_id")
    deadline = None
    if response_timeout_seconds is not None:
        deadline = now + clamp(response_timeout_seconds, *RESPONSE_TIMEOUT_RANGE, "response_timeout_seconds")
    if broadcast:
        return send_broadcast(
            conn,
            sender=sender,
            text=text,
            agents=agents,
            kind=kind,
            reply_to=reply_to,
            conversation_id=conversation_id,
            dedup_key=dedup_key,
            deadline=deadline,
            now=now,
        )
    if conversation_id is not None and kind is None:
        raise BridgeError(
            "kind_required",
            "a message inside a conversation needs kind 'task', 'result' or 'notice'; "
            "plain messages never join a conversation.",
        )
    if dedup_key is None and reply_to is None and conversation_id is None and kind != "result":
        # Nothing to look up first: one INSERT is its own atomic transaction.
        message_id = insert_message(
            conn,
            sender=sender,
            recipient=recipient,
            text=text,
            kind=kind,
            created_at=now,
            response_deadline=deadline,
            sent_by_attempt=attempt,
            traceparent=traceparent,
        )
        return _sent(message_id, None, kind, now, deadline)
    with write_transaction(conn):
        existing = find_dedup(conn, sender, dedup_key, recipient=recipient)
        if existing is not None:
            return {"id": existing["id"], "duplicate": True, "conversation_id": existing["conversation_id"]}
        reply = _load_reply_target(conn, reply_to, sender) if reply_to is not None else None
        if kind is not None and conversation_id is None and reply is not None:
            conversation_id = reply["conversation_id"]
        takes_turn = False
        if conversation_id is not None:
            takes_turn = check_conversation_send(
                conn,
                conversation_id=conversation_id,
                sender=sender,
                recipient=recipient,
                # A str: a conversation message without a kind was refused above (kind_required),
                # and a reply lends its conversation only to a message with one.
                kind=cast(str, kind),
                reply_to=reply,
                now=now,
                attempt=attempt,
            )
        elif kind == "result":
            _check_standalone_result(reply, sender, recipient)
        message_id = insert_message(
            conn,
            sender=sender,
            recipient=recipient,
            text=text,
            kind=kind,
            reply_to=reply_to,
            conversation_id=conversation_id,
            dedup_key=dedup_key,
            created_at=now,
            response_deadline=deadline,
            sent_by_attempt=attempt,
            traceparent=traceparent,
        )
        if takes_turn and conversation_id is not None:  # takes_turn implies a conversation
            take_turn(conn, conversation_id, message_id, now)
    return _sent(message_id, conversation_id, kind, now, deadline)


def send_key(dedup_key: object) -> tuple[str, bool]:
    """The idempotency key of one send call: the caller's ``dedup_key`` (checked), else a fresh
    one made for this call; and whether it is fresh (no earlier call can have used it)."""
    key = check_dedup_key(dedup_key)
    return (key, False) if key is not None else (f"send-{secrets.token_hex(16)}", True)


def send_once(connect: Callable[[], Connection], *, dedup_key: str | None = None, **send: Any) -> dict[str, Any]:
    """``send_message`` (its other arguments in ``send``) that a lost answer cannot store twice.

    Every send carries an idempotency key (``send_key``). When the connection breaks before the
    server's answer came (it may have committed), the same send is tried once more on a new
    connection (``connect``) with the same key: a message the first try stored is found and
    returned, not stored again. When that fails too, ``send_outcome_unknown`` names the key for
    the caller's own retry."""
    key, fresh = send_key(dedup_key)
    try:
        return send_message(connect(), dedup_key=key, **send)
    except CONNECTION_LOST:
        pass
    try:
        sent = send_message(connect(), dedup_key=key, **send)
    except STORE_ERRORS + (BridgeError,) as exc:
        if isinstance(exc, BridgeError) and exc.code != "store_unavailable":  # a rule's answer (cannot connect: not)
            raise
        raise outcome_unknown(key, send.get("recipient")) from exc
    # A fresh key found means this call's first try stored it: for the caller, not a repeat.
    return {**sent, "duplicate": False} if fresh else sent


def outcome_unknown(key: str, recipient: object) -> StoreUnavailable:
    return StoreUnavailable(
        "send_outcome_unknown",
        f"the connection to the store broke before the send to {recipient} was answered, and the retry failed "
        "too: the message may have been stored, or not. `agent-bridge inbox --agent "
        f"{recipient}` (or `agent-bridge show ID`) tells. To send it safely, repeat it with dedup_key "
        f"'{key}' (`agent-bridge send ... --dedup-key {key}`): a stored message is then returned as a duplicate, "
        "never stored twice.",
    )


def _sent(
    message_id: int, conversation_id: int | None, kind: str | None, now: float, deadline: float | None
) -> dict[str, Any]:
    return {
        "id": message_id,
        "duplicate": False,
        "conversation_id": conversation_id,
        "kind": kind,
        "created_at": iso(now),
        "response_deadline": iso(deadline),
    }


def receive_messages(
    conn: Connection,
    *,
    agent: str,
    worker_id: str,
    limit: int = 20,
    now: float | None = None,
    thread_of: int | None = None,
) -> dict[str, Any]:
    """Unacknowledged messages for ``agent``, oldest first, minus those another process holds;
    with ``thread_of`` (a worker's own message), only that message's thread and conversation."""
    now = store_now(conn) if now is None else now
    limit = clamp(limit, *RECEIVE_LIMIT_RANGE, "limit")
    look = partial(
        receivable_messages, conn, agent=agent, worker_id=worker_id, now=now, limit=limit, thread_of=thread_of
    )
    rows = look()
    # A lease from a clock far ahead must not hide a task for long: the look says whether there is
    # one (an empty look cannot, so the cap's own probe runs then); capped, the rows are read again.
    if (not rows or rows[0]["far_lease"]) and cap_far_leases(conn, agent, now):
        rows = look()
    undelivered = [r["id"] for r in rows if r["delivered_at"] is None]
    if undelivered:
        with write_transaction(conn):
            mark_delivered(conn, undelivered, now)
    return {
        "messages": message_views(rows, worker_id, now),
        "cursor": rows[-1]["id"] if rows else None,
    }


def _ack_skip_reason(row: Row | None, agent: str, worker_id: str, now: float) -> str | None:
    if row is None or agent not in (row["sender"], row["recipient"]):
        return "not_found"
    if row["recipient"] != agent:
        return "not_recipient"
    if row["acknowledged_at"] is not None:
        return "already_acknowledged"
    if claim_is_active(row, now) and row["claim_owner"] != worker_id:
        return "claimed_by_other"
    return None


def mark_read(
    conn: Connection, *, agent: str, worker_id: str, message_ids: list[int], now: float | None = None
) -> dict[str, Any]:
    now = store_now(conn) if now is None else now
    if not isinstance(message_ids, list) or not message_ids or len(message_ids) > MAX_ACK_IDS:
        raise BridgeError("invalid_message_ids", f"message_ids must be a list of 1..{MAX_ACK_IDS} ids.")
    ids = list(dict.fromkeys(check_message_id(i, "message_ids[]") for i in message_ids))
    acknowledged, skipped = [], []
    with write_transaction(conn):
        for message_id in ids:
            row = fetch_message(conn, message_id)
            row = cap_far_lease(conn, row, now) if row is not None else None
            reason = _ack_skip_reason(row, agent, worker_id, now)
            if reason:
                skipped.append({"id": message_id, "reason": reason})
                continue
            mark_acknowledged(conn, message_id, now)
            acknowledged.append(message_id)
    return {"acknowledged": acknowledged, "skipped": skipped}


def late_result_ids(conn: Connection, message_id: int, attempt: Row) -> list[int]:
    """Results that answered the message after a failed verdict: the worker (or someone)
    did reply after all, and the verdict must not silently contradict it."""
    if attempt["finished_at"] is None or attempt["outcome"] not in FAILURE_OUTCOMES:
        return []
    return result_ids_after(conn, message_id, attempt["finished_at"])


def _dispatch_summary(conn: Connection, message_id: int) -> dict[str, Any] | None:
    row = dispatch_summary_row(conn, message_id)
    if row is None:
        return None
    return {
        **{key: value for key, value in dict(row).items() if key not in WORKTREE_FIELDS},
        "worktree": worktree_summary(row),
        "started_at": iso(row["started_at"]),
        "finished_at": iso(row["finished_at"]),
        "late_result_ids": late_result_ids(conn, message_id, row),
    }


def get_message(
    conn: Connection, *, agent: str, worker_id: str, message_id: int, now: float | None = None
) -> dict[str, Any]:
    now = store_now(conn) if now is None else now
    check_message_id(message_id)
    row = fetch_message(conn, message_id)
    if row is None or agent not in (row["sender"], row["recipient"]):
        raise BridgeError("message_not_found", f"no message #{message_id} sent to or by you ({agent}).")
    row = cap_far_lease(conn, row, now)
    replies = reply_ids(conn, message_id)
    return {
        **message_view(row, worker_id, now),
        "delivered_at": iso(row["delivered_at"]),
        "acknowledged_at": iso(row["acknowledged_at"]),
        "claim_owner": row["claim_owner"] if claim_is_active(row, now) else None,
        "reply_ids": replies,
        "dispatch": _dispatch_summary(conn, message_id),
    }
