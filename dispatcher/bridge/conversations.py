"""Bounded conversations: a goal, a turn budget, an expiry and strict task/result pairing.

A conversation alternates task -> result -> follow-up task -> result ..., with exactly
one task or result in flight. Every task and result takes a turn; a notice takes none.
The budget rule: a task is accepted only when a turn is left for its result, so the
last turn is always a result and its sender's review can still decide. Only ``active``
conversations accept messages. Every state change is one row of ``TRANSITIONS``.
"""

from typing import Any

from dispatcher.bridge.rows import find_dedup
from dispatcher.core.clock import iso
from dispatcher.core.errors import BridgeError, StateChangedError
from dispatcher.core.lifecycle import TERMINAL_CONVERSATION_STATES
from dispatcher.core.validation import check_body, check_dedup_key, check_message_id, check_recipient, clamp
from dispatcher.store import Connection, Row, write_transaction
from dispatcher.store.conversations import (
    attempt_totals,
    count_turn,
    fetch_conversation,
    fetch_existing_conversation,
    insert_conversation,
    move_conversation,
    recent_transitions,
    record_transition,
    set_in_flight,
)
from dispatcher.store.messages import fetch_message_header, insert_message
from dispatcher.store.store_clock import store_now

# event -> (target state, states it may happen in). The agents' actions (complete,
# needs_human, cancel) and the rules' moves (expire when touched past the expiry,
# turn_limit on a send past the budget, dispatch_failed after a failed dispatch,
# budget_exhausted once the recorded cost of its attempts reaches its max_cost_usd).
TRANSITIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "complete": ("completed", ("active",)),
    "needs_human": ("needs_human", ("active",)),
    "cancel": ("cancelled", ("active", "blocked", "needs_human")),
    "expire": ("expired", ("active",)),
    "turn_limit": ("needs_human", ("active",)),
    "dispatch_failed": ("blocked", ("active",)),
    "budget_exhausted": ("needs_human", ("active",)),
}
STATES = ("active", "blocked", "needs_human", "completed", "cancelled", "expired")
ACCEPTS_MESSAGES = ("active",)
ACTIONS = ("status", "cancel", "complete", "needs_human")
MAX_TURNS_RANGE = (2, 20)
EXPIRY_RANGE_SECONDS = (60, 86400)
MAX_COST_USD_LIMIT = 10000.0
RECENT_TRANSITIONS = 10


def next_state(state: str, event: str) -> str | None:
    """The state ``event`` moves a conversation in ``state`` to; None when it may not happen there."""
    target, allowed_from = TRANSITIONS[event]
    return target if state in allowed_from else None


def _target(state: str, event: str) -> str:
    """``next_state`` where the caller has already made sure ``event`` may happen in ``state``."""
    target = next_state(state, event)
    if target is None:
        raise ValueError(f"{event!r} cannot happen to a conversation in state {state!r}")
    return target


def effective_state(state: str, expires_at: float, now: float) -> str:
    """The state as the next touch will see it: an active conversation past its expiry is expired."""
    if expires_at <= now and next_state(state, "expire") is not None:
        return TRANSITIONS["expire"][0]
    return state


def accepts_messages(state: str | None) -> bool:
    """None: the conversation row is missing, and accepts nothing."""
    return state in ACCEPTS_MESSAGES


def turn_available(kind: str, turn_count: int, max_turns: int) -> bool:
    """The budget rule: a result needs one turn left, a task two (its own and its result's)."""
    needed = 2 if kind == "task" else 1
    return turn_count + needed <= max_turns


def _record_transition(
    conn: Connection, conv: Row, to_state: str, actor: str, reason: str, now: float, by_attempt: int | None = None
) -> None:
    """``by_attempt``: the attempt whose worker's server makes this move (a review turn's decision is
    counted only for the attempt that took it)."""
    move_conversation(
        conn,
        conv["id"],
        from_state=conv["state"],
        to_state=to_state,
        actor=actor,
        reason=reason,
        at=now,
        ends=to_state in TERMINAL_CONVERSATION_STATES,
        by_attempt=by_attempt,
    )


def _load(conn: Connection, conversation_id: int, agent: str) -> Row:
    conv = fetch_conversation(conn, conversation_id)
    if conv is None or agent not in (conv["initiator"], conv["recipient"]):
        raise BridgeError(
            "conversation_not_found",
            f"no conversation #{conversation_id} between you ({agent}) and another agent; "
            "check the id (start_conversation returns it).",
        )
    return conv


def _settle_expiry(conn: Connection, conv: Row, actor: str, now: float) -> Row:
    """An active conversation past its expiry becomes ``expired`` when it is touched."""
    state = effective_state(conv["state"], conv["expires_at"], now)
    if state != conv["state"]:
        _record_transition(conn, conv, state, actor, "expired", now)
        return fetch_existing_conversation(conn, conv["id"])
    return conv


def start_conversation(
    conn: Connection,
    *,
    initiator: str,
    recipient: str,
    goal: str,
    agents: frozenset[str] | set[str],
    max_body_bytes: int,
    max_turns: int = 6,
    expires_in_seconds: int = 14400,
    dedup_key: str | None = None,
    max_cost_usd: float | None = None,
    now: float | None = None,
) -> dict[str, Any]:
    now = store_now(conn) if now is None else now
    check_recipient(initiator, recipient, agents)
    check_body(goal, max_body_bytes, "goal")
    dedup_key = check_dedup_key(dedup_key)
    turns = clamp(max_turns, *MAX_TURNS_RANGE, "max_turns")
    lifetime = clamp(expires_in_seconds, *EXPIRY_RANGE_SECONDS, "expires_in_seconds")
    cap = check_max_cost(max_cost_usd)
    with write_transaction(conn):
        existing = find_dedup(conn, initiator, dedup_key, recipient=recipient)
        if existing is not None and not opens_conversation(
            existing["kind"], existing["conversation_id"], existing["reply_to"]
        ):
            raise BridgeError(
                "dedup_conflict",
                f"this dedup_key was already used for message #{existing['id']}, which started no conversation; "
                "nothing was started. Pick a new dedup_key for this conversation.",
            )
        if existing is not None:
            return {
                "conversation_id": existing["conversation_id"],
                "message_id": existing["id"],
                "duplicate": True,
            }
        conversation_id = insert_conversation(
            conn,
            initiator=initiator,
            recipient=recipient,
            goal=goal,
            max_turns=turns,
            created_at=now,
            expires_at=now + lifetime,
            max_cost_usd=cap,
        )
        message_id = insert_message(
            conn,
            sender=initiator,
            recipient=recipient,
            text=goal,
            kind="task",
            conversation_id=conversation_id,
            dedup_key=dedup_key,
            created_at=now,
        )
        set_in_flight(conn, conversation_id, message_id)
        record_transition(
            conn, conversation_id, from_state=None, to_state="active", actor=initiator, reason="started", at=now
        )
    return {
        "conversation_id": conversation_id,
        "message_id": message_id,
        "duplicate": False,
        "state": "active",
        "max_turns": turns,
        "max_cost_usd": cap,
        "expires_at": iso(now + lifetime),
    }


def opens_conversation(kind: str | None, conversation_id: int | None, reply_to: int | None) -> bool:
    """Whether a message is a conversation's opening task: the one task in it that answers nothing
    (every later task must reply_to a result). Only such a message makes a dedup_key a duplicate
    of ``start_conversation``."""
    return kind == "task" and conversation_id is not None and reply_to is None


def check_max_cost(value: object) -> float | None:
    """A conversation's cost cap: None, or a finite number of US dollars above 0 (not clamped)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= MAX_COST_USD_LIMIT:
        raise BridgeError(
            "invalid_number",
            f"max_cost_usd must be a number of US dollars above 0 and at most {MAX_COST_USD_LIMIT:g}, or omitted.",
        )
    return float(value)


def conversation_totals(conn: Connection, conversation_id: int) -> dict[str, Any]:
    """The ledger of a conversation's attempts: how many, their recorded cost and tokens."""
    totals = attempt_totals(conn, conversation_id)
    return {
        "attempts": totals.attempts,
        "cost_usd": None if totals.cost_usd is None else round(totals.cost_usd, 6),
        "input_tokens": totals.input_tokens,
        "output_tokens": totals.output_tokens,
    }


def budget_exhausted(state: str, max_cost_usd: float | None, cost_usd: float | None) -> bool:
    """The conversation cost rule (pure): an active conversation with a cap whose recorded cost reached it."""
    return (
        max_cost_usd is not None
        and cost_usd is not None
        and cost_usd >= max_cost_usd
        and next_state(state, "budget_exhausted") is not None
    )


def exhaust_budget(conn: Connection, conversation_id: int, actor: str, now: float) -> dict[str, Any] | None:
    """Move the conversation to needs_human when its recorded cost reached its cap (the dispatcher's
    move, inside the caller's write transaction: it commits with the verdict that recorded the cost).
    Returns the totals and cap when it moved, else None."""
    conv = fetch_conversation(conn, conversation_id)
    if conv is None or conv["max_cost_usd"] is None:
        return None
    conv = _settle_expiry(conn, conv, actor, now)
    totals = conversation_totals(conn, conversation_id)
    if not budget_exhausted(conv["state"], conv["max_cost_usd"], totals["cost_usd"]):
        return None
    _record_transition(conn, conv, _target(conv["state"], "budget_exhausted"), actor, "budget_exhausted", now)
    return {**totals, "max_cost_usd": conv["max_cost_usd"]}


def _refusal_with_move(
    code: str, message: str, conv: Row, move: tuple[str, str], actor: str, now: float, by_attempt: int | None = None
) -> StateChangedError:
    """A refusal that keeps one rule's move (``event``, ``reason``): once the refused transaction
    has rolled back, ``conv`` takes the move in its own transaction, if it is still in the state
    this refusal saw and the move may still happen there."""
    event, reason = move

    def keep(conn: Connection) -> None:
        current = fetch_conversation(conn, conv["id"])
        if current is not None and current["state"] == conv["state"] and next_state(current["state"], event):
            _record_transition(conn, current, _target(current["state"], event), actor, reason, now, by_attempt)

    return StateChangedError(code, message, keep=keep)


def check_conversation_send(
    conn: Connection,
    *,
    conversation_id: int,
    sender: str,
    recipient: str,
    kind: str,
    reply_to: Row | None,
    now: float,
    attempt: int | None = None,
) -> bool:
    """Enforce the conversation rules for one send inside an open write transaction (``attempt``:
    the attempt whose worker sends it, recorded on a move the refusal keeps).

    Returns True when the message takes a turn (task or result). Raises BridgeError
    (nothing written) or StateChangedError (nothing written but an expiry or turn-limit move).
    """
    conv = _load(conn, conversation_id, sender)
    if effective_state(conv["state"], conv["expires_at"], now) == "expired":
        raise _refusal_with_move(
            "conversation_expired",
            f"conversation #{conversation_id} expired at {iso(conv['expires_at'])} and accepts nothing; "
            "start a new conversation if the goal still matters.",
            conv,
            ("expire", "expired"),
            sender,
            now,
        )
    if not accepts_messages(conv["state"]):
        raise BridgeError(
            "conversation_not_active",
            f"conversation #{conversation_id} is {conv['state']} and accepts no messages; "
            "check conversation(action='status') and start a new one if needed.",
        )
    other = conv["recipient"] if sender == conv["initiator"] else conv["initiator"]
    if recipient != other:
        raise BridgeError(
            "wrong_recipient",
            f"messages in conversation #{conversation_id} go to {other}, not {recipient}.",
        )
    if kind == "notice":
        return False
    in_flight = fetch_message_header(conn, conv["in_flight_message_id"])
    if in_flight is None:  # set when the conversation starts, and prune never removes it
        raise LookupError(f"conversation #{conversation_id} has no in-flight message")
    expected = "task" if kind == "result" else "result"
    if reply_to is None or reply_to["id"] != in_flight["id"]:
        raise BridgeError(
            "not_in_turn",
            f"a {kind} in conversation #{conversation_id} must reply_to the in-flight "
            f"{in_flight['kind']} #{in_flight['id']}.",
        )
    if in_flight["kind"] != expected or in_flight["recipient"] != sender:
        raise BridgeError(
            "not_in_turn",
            f"the in-flight message #{in_flight['id']} is a {in_flight['kind']} for {in_flight['recipient']}; "
            f"a {kind} must answer a {expected} sent to you. "
            + ("Wait for the result." if in_flight["recipient"] != sender else ""),
        )
    if not turn_available(kind, conv["turn_count"], conv["max_turns"]):
        room = " (a task needs a turn left for its result)" if kind == "task" else ""
        raise _refusal_with_move(
            "turn_limit_reached",
            f"conversation #{conversation_id} has used {conv['turn_count']} of {conv['max_turns']} turns, "
            f"too many for another {kind}{room}; it is now needs_human and a human decides what happens next.",
            conv,
            ("turn_limit", "turn_limit"),
            sender,
            now,
            attempt,
        )
    return True


def take_turn(conn: Connection, conversation_id: int, message_id: int, now: float) -> None:
    count_turn(conn, conversation_id, message_id, now)


def _status(conn: Connection, conv: Row) -> dict[str, Any]:
    in_flight = fetch_message_header(conn, conv["in_flight_message_id"])
    transitions = recent_transitions(conn, conv["id"], RECENT_TRANSITIONS)
    return {
        "conversation_id": conv["id"],
        "initiator": conv["initiator"],
        "recipient": conv["recipient"],
        "state": conv["state"],
        "turn_count": conv["turn_count"],
        "max_turns": conv["max_turns"],
        "created_at": iso(conv["created_at"]),
        "expires_at": iso(conv["expires_at"]),
        "in_flight": dict(in_flight) if in_flight else None,
        "max_cost_usd": conv["max_cost_usd"],
        "totals": conversation_totals(conn, conv["id"]),
        "transitions": [{**dict(t), "at": iso(t["at"])} for t in reversed(transitions)],
    }


def conversation_action(
    conn: Connection,
    *,
    agent: str,
    action: str,
    conversation_id: int,
    now: float | None = None,
    attempt: int | None = None,
) -> dict[str, Any]:
    """``attempt``: on a worker's server, its attempt (recorded on the move it makes)."""
    now = store_now(conn) if now is None else now
    if action not in ACTIONS:
        raise BridgeError("invalid_action", f"action must be one of {', '.join(ACTIONS)}.")
    check_message_id(conversation_id, "conversation_id")
    with write_transaction(conn):
        conv = _settle_expiry(conn, _load(conn, conversation_id, agent), agent, now)
        if action == "status":
            return _status(conn, conv)
        target, allowed_from = TRANSITIONS[action]
        if conv["state"] == target:
            return {**_status(conn, conv), "changed": False}
        if next_state(conv["state"], action) is None:
            raise BridgeError(
                "invalid_transition",
                f"conversation #{conversation_id} is {conv['state']}; '{action}' is allowed only from "
                f"{', '.join(allowed_from)}.",
            )
        _record_transition(conn, conv, target, agent, action, now, attempt)
        conv = fetch_existing_conversation(conn, conversation_id)
        return {**_status(conn, conv), "changed": True}


def block_conversation(conn: Connection, conversation_id: int, actor: str, reason: str, now: float) -> bool:
    """Freeze an active conversation after a failed dispatch (the dispatcher's move).

    Runs inside the caller's write transaction: it commits with the verdict it follows from.
    """
    conv = fetch_conversation(conn, conversation_id)
    if conv is None:
        return False
    conv = _settle_expiry(conn, conv, actor, now)
    target = next_state(conv["state"], "dispatch_failed")
    if target is None:
        return False
    _record_transition(conn, conv, target, actor, reason, now)
    return True
