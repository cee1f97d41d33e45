"""The verdict, exhaustively: every combination of the evidence, against tables written out by hand.

The tables below are the specification (README "Outcomes"); they are not derived from
the code's logic. Abbreviations: S = succeeded, B = blocked, None = no outcome (the
supervisor's fallback applies: failed, timeout or crashed).
"""

import itertools

import pytest

from dispatcher.dispatch.evidence import Evidence, is_blocked_text, judge

S, B = "succeeded", "blocked"
CONVERSATION_STATES = (None, "active", "blocked", "needs_human", "completed", "cancelled", "expired")

# A task turn, standalone. ack = acknowledged, held = claim still active,
# ok = results not starting with "blocked:", blk = results starting with "blocked:".
#   ack    held   ok blk   outcome  error_kind
TASK_TABLE = [
    (False, False, 0, 0, None, "no_evidence"),
    (False, False, 0, 1, B, None),
    (False, False, 0, 2, B, None),
    (False, False, 1, 0, None, "result_without_ack"),
    (False, False, 1, 1, B, None),
    (False, False, 1, 2, B, None),
    (False, False, 2, 0, None, "result_without_ack"),
    (False, False, 2, 1, B, None),
    (False, False, 2, 2, B, None),
    (False, True, 0, 0, None, "no_evidence"),
    (False, True, 0, 1, None, "blocked_without_release"),
    (False, True, 0, 2, None, "blocked_without_release"),
    (False, True, 1, 0, None, "result_without_ack"),
    (False, True, 1, 1, None, "blocked_without_release"),
    (False, True, 1, 2, None, "blocked_without_release"),
    (False, True, 2, 0, None, "result_without_ack"),
    (False, True, 2, 1, None, "blocked_without_release"),
    (False, True, 2, 2, None, "blocked_without_release"),
    (True, False, 0, 0, None, "ack_without_result"),
    (True, False, 0, 1, B, None),
    (True, False, 0, 2, B, None),  # two blocked: results and an ack are not success
    (True, False, 1, 0, S, None),
    (True, False, 1, 1, B, None),  # a blocked: result is never outweighed by another result
    (True, False, 1, 2, B, None),
    (True, False, 2, 0, S, None),
    (True, False, 2, 1, B, None),
    (True, False, 2, 2, B, None),
    (True, True, 0, 0, None, "ack_without_result"),
    (True, True, 0, 1, B, None),
    (True, True, 0, 2, B, None),
    (True, True, 1, 0, S, None),
    (True, True, 1, 1, B, None),
    (True, True, 1, 2, B, None),
    (True, True, 2, 0, S, None),
    (True, True, 2, 1, B, None),
    (True, True, 2, 2, B, None),
]

# A task turn in a conversation with nothing done (no ack, no result): the error kind
# says when the conversation left the worker nothing to do. Claim held or not alike.
#   state after the turn   error_kind
TASK_NOTHING_DONE_BY_STATE = {
    None: "no_evidence",
    "active": "no_evidence",
    "blocked": "conversation_blocked",
    "needs_human": "conversation_needs_human",
    "completed": "conversation_completed",
    "cancelled": "conversation_cancelled",
    "expired": "conversation_expired",
}

# A review turn (a result back to the initiator). follow = a follow-up task was sent by this
# attempt's worker; own = this attempt's worker moved the conversation to needs_human, completed
# or cancelled. A state someone else moved it to (a session's `complete` during the turn) is no
# decision of this attempt: it only says why there was nothing to do.
#   ack    follow own    state after       outcome  error_kind
REVIEW_TABLE = [
    (False, False, False, "active", None, "no_evidence"),
    (False, False, False, "blocked", None, "conversation_blocked"),
    (False, False, False, "needs_human", None, "conversation_needs_human"),
    (False, False, False, "completed", None, "conversation_completed"),
    (False, False, False, "cancelled", None, "conversation_cancelled"),
    (False, False, False, "expired", None, "conversation_expired"),
    (False, False, True, "active", None, "decision_without_ack"),
    (False, False, True, "blocked", None, "decision_without_ack"),
    (False, False, True, "needs_human", None, "decision_without_ack"),
    (False, False, True, "completed", None, "decision_without_ack"),
    (False, False, True, "cancelled", None, "decision_without_ack"),
    (False, False, True, "expired", None, "decision_without_ack"),
    (False, True, False, "active", None, "decision_without_ack"),
    (False, True, False, "blocked", None, "decision_without_ack"),
    (False, True, False, "needs_human", None, "decision_without_ack"),
    (False, True, False, "completed", None, "decision_without_ack"),
    (False, True, False, "cancelled", None, "decision_without_ack"),
    (False, True, False, "expired", None, "decision_without_ack"),
    (False, True, True, "active", None, "decision_without_ack"),
    (False, True, True, "blocked", None, "decision_without_ack"),
    (False, True, True, "needs_human", None, "decision_without_ack"),
    (False, True, True, "completed", None, "decision_without_ack"),
    (False, True, True, "cancelled", None, "decision_without_ack"),
    (False, True, True, "expired", None, "decision_without_ack"),
    (True, False, False, "active", None, "ack_without_decision"),
    (True, False, False, "blocked", None, "ack_without_decision"),
    (True, False, False, "needs_human", None, "ack_without_decision"),
    (True, False, False, "completed", None, "ack_without_decision"),
    (True, False, False, "cancelled", None, "ack_without_decision"),
    (True, False, False, "expired", None, "ack_without_decision"),
    (True, False, True, "active", S, None),
    (True, False, True, "blocked", S, None),
    (True, False, True, "needs_human", S, None),
    (True, False, True, "completed", S, None),
    (True, False, True, "cancelled", S, None),
    (True, False, True, "expired", S, None),
    (True, True, False, "active", S, None),
    (True, True, False, "blocked", S, None),
    (True, True, False, "needs_human", S, None),
    (True, True, False, "completed", S, None),
    (True, True, False, "cancelled", S, None),
    (True, True, False, "expired", S, None),
    (True, True, True, "active", S, None),
    (True, True, True, "blocked", S, None),
    (True, True, True, "needs_human", S, None),
    (True, True, True, "completed", S, None),
    (True, True, True, "cancelled", S, None),
    (True, True, True, "expired", S, None),
]


def _task(ack, held, ok, blk, state=None) -> Evidence:
    return Evidence(
        is_review=False,
        acknowledged=ack,
        claim_active=held,
        results=ok,
        blocked_results=blk,
        follow_up=False,
        moved_to_decision=False,
        conversation_state=state,
    )


def test_tables_cover_every_combination():
    assert {row[:4] for row in TASK_TABLE} == set(itertools.product((False, True), (False, True), range(3), range(3)))
    assert set(TASK_NOTHING_DONE_BY_STATE) == set(CONVERSATION_STATES)
    assert {row[:4] for row in REVIEW_TABLE} == set(
        itertools.product((False, True), (False, True), (False, True), CONVERSATION_STATES[1:])
    )


@pytest.mark.parametrize(("ack", "held", "ok", "blk", "outcome", "error_kind"), TASK_TABLE)
@pytest.mark.parametrize("state", CONVERSATION_STATES)
def test_task_turn(ack, held, ok, blk, outcome, error_kind, state):
    if (ack, ok, blk) == (False, 0, 0):
        error_kind = TASK_NOTHING_DONE_BY_STATE[state]
    assert judge(_task(ack, held, ok, blk, state)) == (outcome, error_kind)


@pytest.mark.parametrize(("ack", "follow", "own", "state", "outcome", "error_kind"), REVIEW_TABLE)
@pytest.mark.parametrize("held", [False, True])
def test_review_turn(ack, follow, own, state, outcome, error_kind, held):
    ev = Evidence(
        is_review=True,
        acknowledged=ack,
        claim_active=held,
        results=0,
        blocked_results=0,
        follow_up=follow,
        moved_to_decision=own,
        conversation_state=state,
    )
    assert judge(ev) == (outcome, error_kind)


@pytest.mark.parametrize(
    ("text", "blocked"),
    [
        ("blocked: no permission", True),
        ("BLOCKED: no permission", True),
        ("Blocked:x", True),
        ("   blocked: leading spaces", True),
        ("\n\tblocked: leading newline and tab", True),
        ("blocked:", True),
        ("blocked : a space before the colon", False),
        ("blocked without a colon", False),
        ("unblocked: the work is done", False),
        ("done: not blocked: at all", False),
        ("", False),
    ],
)
def test_blocked_prefix(text, blocked):
    assert is_blocked_text(text) is blocked
