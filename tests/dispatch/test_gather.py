"""What counts as evidence (``evidence.gather``), against tables written out by hand.

``judge`` has its own tables (test_verdict.py); these say which rows of a real store reach it.
A reply counts only when the attempt at the message wrote it (``sent_by_attempt``): an answer
a session left, or one another attempt wrote, is not this attempt's evidence.
"""

import pytest

from dispatcher.dispatch.evidence import Evidence, gather
from dispatcher.store.conversations import record_transition
from dispatcher.store.messages import insert_message

NOW = 1_800_000_000.0
M = "M"  # stands for the attempt's own message id in the table
OTHER = "OTHER"  # another message's id (another attempt)

# One reply to the task kimi -> claude (#M), then what gather counts.
#   case                                   sender   recipient kind      text           origin    by_attempt reply_to  ok blk follow
REPLY_TABLE = [
    ("the attempt's result", "claude", "kimi", "result", "done", "agent", M, M, 1, 0, False),
    ("the attempt's blocked: result", "claude", "kimi", "result", " Blocked: no", "agent", M, M, 0, 1, False),
    ("the attempt's follow-up task", "claude", "kimi", "task", "next", "agent", M, M, 0, 0, True),
    ("a session's result (no attempt)", "claude", "kimi", "result", "done", "agent", None, M, 0, 0, False),
    ("a session's blocked: result", "claude", "kimi", "result", "blocked: x", "agent", None, M, 0, 0, False),
    ("a session's follow-up task", "claude", "kimi", "task", "next", "agent", None, M, 0, 0, False),
    ("another attempt's result", "claude", "kimi", "result", "done", "agent", OTHER, M, 0, 0, False),
    ("the attempt's notice", "claude", "kimi", "notice", "fyi", "agent", M, M, 0, 0, False),
    ("the attempt's plain note", "claude", "kimi", None, "hi", "agent", M, M, 0, 0, False),
    ("a system notice", "claude", "kimi", "notice", "ended", "system", None, M, 0, 0, False),
    ("a result to someone else", "claude", "codex", "result", "done", "agent", M, M, 0, 0, False),
    ("a result from someone else", "codex", "kimi", "result", "done", "agent", M, M, 0, 0, False),
    ("the attempt's result to another message", "claude", "kimi", "result", "done", "agent", M, OTHER, 0, 0, False),
]


def _task(conn, **columns) -> int:
    return insert_message(conn, sender="kimi", recipient="claude", text="task", kind="task", created_at=NOW, **columns)


@pytest.mark.parametrize(
    ("case", "sender", "recipient", "kind", "text", "origin", "by_attempt", "reply_to", "ok", "blk", "follow"),
    REPLY_TABLE,
    ids=[row[0] for row in REPLY_TABLE],
)
def test_which_replies_count(conn, case, sender, recipient, kind, text, origin, by_attempt, reply_to, ok, blk, follow):
    own, other = _task(conn), _task(conn)
    ids = {M: own, OTHER: other, None: None}
    insert_message(
        conn,
        sender=sender,
        recipient=recipient,
        text=text,
        kind=kind,
        reply_to=ids[reply_to],
        created_at=NOW + 1,
        origin=origin,
        sent_by_attempt=ids[by_attempt],
    )
    ev = gather(conn, own, NOW + 2)
    assert ev is not None
    assert (ev.results, ev.blocked_results, ev.follow_up) == (ok, blk, follow)


def test_several_replies_of_the_attempt_add_up(conn):
    own = _task(conn)
    for text in ("one", "two", "blocked: three"):
        insert_message(
            conn, sender="claude", recipient="kimi", text=text, kind="result", reply_to=own, created_at=NOW,
            sent_by_attempt=own,
        )  # fmt: skip
    ev = gather(conn, own, NOW)
    assert ev is not None and (ev.results, ev.blocked_results) == (2, 1)


# The message's own facts.
#   case                         acknowledged_at  claim expires   conversation (state, expires_at)  -> ack  held  state
MESSAGE_TABLE = [
    ("untouched", None, None, None, False, False, None),
    ("acknowledged", NOW - 5, None, None, True, False, None),
    ("claimed", None, NOW + 30, None, False, True, None),
    ("claim expired", None, NOW - 1, None, False, False, None),
    ("in an active conversation", None, None, ("active", NOW + 60), False, False, "active"),
    ("in a conversation past its expiry", None, None, ("active", NOW - 1), False, False, "expired"),
    ("in a completed conversation", None, None, ("completed", NOW + 60), False, False, "completed"),
]


@pytest.mark.parametrize(
    ("case", "acknowledged_at", "claim_expires", "conversation", "ack", "held", "state"),
    MESSAGE_TABLE,
    ids=[row[0] for row in MESSAGE_TABLE],
)
def test_the_messages_own_facts(conn, case, acknowledged_at, claim_expires, conversation, ack, held, state):
    conversation_id = None
    if conversation is not None:
        conversation_id = conn.execute(
            "INSERT INTO conversations (initiator, recipient, goal, state, max_turns, created_at, updated_at,"
            " expires_at) VALUES ('kimi', 'claude', 'g', ?, 6, ?, ?, ?)",
            (conversation[0], NOW, NOW, conversation[1]),
        ).lastrowid
    own = _task(conn, conversation_id=conversation_id)
    conn.execute(
        "UPDATE messages SET acknowledged_at = ?, claim_owner = ?, claim_expires_at = ? WHERE id = ?",
        (acknowledged_at, None if claim_expires is None else "claude-attempt-1", claim_expires, own),
    )
    assert gather(conn, own, NOW) == Evidence(
        is_review=False,
        acknowledged=ack,
        claim_active=held,
        results=0,
        blocked_results=0,
        follow_up=False,
        moved_to_decision=False,
        conversation_state=state,
    )


def test_a_review_turn_and_a_gone_message(conn):
    review = insert_message(conn, sender="claude", recipient="kimi", text="r", kind="result", created_at=NOW)
    ev = gather(conn, review, NOW)
    assert ev is not None and ev.is_review is True
    assert gather(conn, 10**6, NOW) is None


# A review turn (#M, a result back to the initiator) and one move of its conversation: which
# moves are this attempt's decision.
#   case                                     to_state       by_attempt  own
MOVE_TABLE = [
    ("the attempt's worker completes it", "completed", M, True),
    ("the attempt's worker hands it to a human", "needs_human", M, True),
    ("the attempt's worker cancels it", "cancelled", M, True),
    ("a session completes it during the turn", "completed", None, False),
    ("another attempt's worker completes it", "completed", OTHER, False),
    ("the dispatcher blocks it", "blocked", None, False),
]


@pytest.mark.parametrize(("case", "to_state", "by_attempt", "own"), MOVE_TABLE, ids=[row[0] for row in MOVE_TABLE])
def test_which_conversation_moves_are_the_attempts_decision(conn, case, to_state, by_attempt, own):
    conversation_id = conn.execute(
        "INSERT INTO conversations (initiator, recipient, goal, state, max_turns, created_at, updated_at,"
        " expires_at) VALUES ('kimi', 'claude', 'g', 'active', 6, ?, ?, ?)",
        (NOW, NOW, NOW + 3600),
    ).lastrowid
    review = insert_message(
        conn,
        sender="claude",
        recipient="kimi",
        text="r",
        kind="result",
        created_at=NOW,
        conversation_id=conversation_id,
    )
    other = _task(conn)
    record_transition(
        conn,
        conversation_id,
        from_state="active",
        to_state=to_state,
        actor="kimi",
        reason="test",
        at=NOW + 1,
        by_attempt={M: review, OTHER: other, None: None}[by_attempt],
    )
    ev = gather(conn, review, NOW + 2)
    assert ev is not None and ev.is_review and ev.moved_to_decision is own
