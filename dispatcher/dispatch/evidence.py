"""Judge an attempt by what the worker left in the store, never by its exit code alone.

``gather`` reads the evidence for one message into a small frozen record (the replies it
counts are only those the attempt's own worker wrote, recorded on each reply row as
``sent_by_attempt``: an answer a session or another attempt left is not this attempt's);
``judge`` is the verdict, a pure function of that record:

- a task turn (a task, standalone or in a conversation):
  succeeded: acknowledged, at least one result to the sender and no ``blocked:`` result;
  blocked: a ``blocked:`` result and the claim released or the task acknowledged (an
  honest stop; a ``blocked:`` result is never outweighed by another result);
- a review turn (a result going back to the conversation's initiator):
  succeeded: acknowledged and a decision taken by this attempt's worker: a follow-up task, or
  the conversation moved by it to completed, needs_human or cancelled (a move a session or
  another attempt made is not this attempt's decision);
- otherwise no outcome (None) and an ``error_kind`` saying what is missing; the caller
  decides between failed, timeout and crashed.
"""

from dataclasses import dataclass

from dispatcher.bridge.conversations import TRANSITIONS, effective_state
from dispatcher.store import Connection
from dispatcher.store.attempts import conversation_state, worker_replies
from dispatcher.store.claims import claim_is_active
from dispatcher.store.conversations import states_moved_by_attempt
from dispatcher.store.messages import fetch_message

BLOCKED_PREFIX = "blocked:"
# The states a reviewer's own action leaves behind (complete, needs_human, cancel; a
# follow-up past the budget also lands in needs_human).
DECISION_STATES = frozenset(TRANSITIONS[action][0] for action in ("complete", "needs_human", "cancel"))


def is_blocked_text(text: str) -> bool:
    """A result is an honest stop when it starts with ``blocked:`` (any case, after whitespace)."""
    return text.lstrip().lower().startswith(BLOCKED_PREFIX)


@dataclass(frozen=True)
class Evidence:
    is_review: bool  # a result back to the conversation's initiator, not a task
    acknowledged: bool
    claim_active: bool  # still held by someone; False once released, expired or acknowledged
    results: int  # results to the sender answering it, not starting with ``blocked:``
    blocked_results: int  # results to the sender answering it, starting with ``blocked:``
    follow_up: bool  # a task answering it, from its recipient (a review's decision)
    moved_to_decision: bool  # this attempt's worker moved the conversation to a decision state
    conversation_state: str | None  # after the turn (expiry applied); None when standalone


def judge(ev: Evidence) -> tuple[str | None, str | None]:
    """Returns (outcome or None, error_kind or None)."""
    return _judge_review(ev) if ev.is_review else _judge_task(ev)


def _judge_task(ev: Evidence) -> tuple[str | None, str | None]:
    if ev.blocked_results:
        if ev.acknowledged or not ev.claim_active:
            return "blocked", None
        return None, "blocked_without_release"
    if ev.results:
        return ("succeeded", None) if ev.acknowledged else (None, "result_without_ack")
    if ev.acknowledged:
        return None, "ack_without_result"
    return None, _no_evidence(ev)


def _judge_review(ev: Evidence) -> tuple[str | None, str | None]:
    decided = ev.follow_up or ev.moved_to_decision
    if decided:
        return ("succeeded", None) if ev.acknowledged else (None, "decision_without_ack")
    if ev.acknowledged:
        return None, "ack_without_decision"
    return None, _no_evidence(ev)


def _no_evidence(ev: Evidence) -> str:
    """Nothing done: say so, or say that the conversation left the worker nothing to do."""
    if ev.conversation_state in (None, "active"):
        return "no_evidence"
    return f"conversation_{ev.conversation_state}"


def gather(conn: Connection, message_id: int, now: float) -> Evidence | None:
    """The evidence for one message; None when the message is gone."""
    msg = fetch_message(conn, message_id)
    if msg is None:
        return None
    replies = worker_replies(conn, message_id, sender=msg["recipient"], recipient=msg["sender"])
    results = [text for kind, text in replies if kind == "result"]
    blocked = sum(is_blocked_text(t) for t in results)
    conv_id = msg["conversation_id"]
    conv = None if conv_id is None else conversation_state(conn, conv_id)
    moved = set() if conv_id is None else states_moved_by_attempt(conn, conv_id, message_id)
    return Evidence(
        is_review=msg["kind"] == "result",
        acknowledged=msg["acknowledged_at"] is not None,
        claim_active=claim_is_active(msg, now),
        results=len(results) - blocked,
        blocked_results=blocked,
        follow_up=any(kind == "task" for kind, _ in replies),
        moved_to_decision=bool(moved & DECISION_STATES),
        conversation_state=None if conv is None else effective_state(*conv, now),
    )


def verdict(conn: Connection, message_id: int, now: float) -> tuple[str | None, str | None]:
    ev = gather(conn, message_id, now)
    return (None, "message_gone") if ev is None else judge(ev)
