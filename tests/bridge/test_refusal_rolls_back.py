"""A refusal rolls back the whole transaction. A conversation refusal that keeps a rule's move
(expiry, turn limit) used to commit every earlier write of its transaction along with that
move; now those writes are gone and only the move is recorded, once."""

import pytest

from dispatcher.bridge.conversations import check_conversation_send, start_conversation, take_turn
from dispatcher.core.errors import StateChangedError
from dispatcher.store import write_transaction
from dispatcher.store.conversations import fetch_conversation, recent_transitions
from dispatcher.store.messages import fetch_message_header, insert_message

pytestmark = pytest.mark.both_backends

AGENTS = frozenset({"claude", "kimi"})
OTHER = {"claude": "kimi", "kimi": "claude"}


def _started(conn, **kw):
    return start_conversation(
        conn, initiator="claude", recipient="kimi", goal="g", agents=AGENTS, max_body_bytes=1000, now=1000.0, **kw
    )


def _send(conn, conv, *, sender, kind, reply_to, now) -> int:
    """One send as send_message makes it: the message is written, then the conversation rule runs."""
    with write_transaction(conn):
        written = insert_message(
            conn, sender=sender, recipient=OTHER[sender], text="x", kind=kind, reply_to=reply_to, created_at=now
        )
        if check_conversation_send(
            conn,
            conversation_id=conv["conversation_id"],
            sender=sender,
            recipient=OTHER[sender],
            kind=kind,
            reply_to=fetch_message_header(conn, reply_to),
            now=now,
        ):
            take_turn(conn, conv["conversation_id"], written, now)
    return written


def _refused(conn, conv, **send) -> tuple[StateChangedError, list[str]]:
    """Refused: returns the refusal and the messages left (by text) after it."""
    before = _message_count(conn)
    with pytest.raises(StateChangedError) as refused:
        _send(conn, conv, **send)
    assert not conn.in_transaction
    assert _message_count(conn) == before, "the refused transaction's earlier write was committed"
    return refused.value, [t["to_state"] for t in reversed(recent_transitions(conn, conv["conversation_id"], 10))]


def _message_count(conn) -> int:
    count = 0
    while fetch_message_header(conn, count + 1) is not None:
        count += 1
    return count


def test_an_expiry_refusal_keeps_the_expiry_and_nothing_written_before_it(conn):
    conv = _started(conn, expires_in_seconds=60)
    refused, states = _refused(conn, conv, sender="kimi", kind="result", reply_to=conv["message_id"], now=5000.0)
    assert refused.code == "conversation_expired"
    assert states == ["active", "expired"]
    assert fetch_conversation(conn, conv["conversation_id"])["state"] == "expired"


def test_a_turn_limit_refusal_keeps_the_move_and_nothing_written_before_it(conn):
    conv = _started(conn, max_turns=2)
    result = _send(conn, conv, sender="kimi", kind="result", reply_to=conv["message_id"], now=1001.0)
    refused, states = _refused(conn, conv, sender="claude", kind="task", reply_to=result, now=1002.0)
    assert refused.code == "turn_limit_reached"
    assert states == ["active", "needs_human"]


def test_the_kept_move_is_taken_once(conn):
    """A second refusal of the same expired conversation records no second move."""
    conv = _started(conn, expires_in_seconds=60)
    _refused(conn, conv, sender="kimi", kind="result", reply_to=conv["message_id"], now=5000.0)
    _, states = _refused(conn, conv, sender="kimi", kind="result", reply_to=conv["message_id"], now=5001.0)
    assert states == ["active", "expired"]
