"""Property-based bad input against the domain layer: a typed refusal or success, never a
crash. A refusal leaves the store exactly as it was, except for the two documented moves
a StateChangedError keeps: the conversation goes to ``expired`` or ``needs_human`` with one
transition row, and nothing else changes (no message inserted, no turn taken)."""

import sqlite3
import time

import pytest
from harness import db_snapshot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dispatcher.bridge import claims, conversations, messages
from dispatcher.core.errors import BridgeError, StateChangedError
from dispatcher.core.lifecycle import TERMINAL_CONVERSATION_STATES
from dispatcher.store import open_store

AGENTS = frozenset({"claude", "kimi"})
# code -> (state the conversation moves to, reason recorded with the move)
DOCUMENTED_MOVES = {"conversation_expired": ("expired", "expired"), "turn_limit_reached": ("needs_human", "turn_limit")}
DAY = 86400.0
anything = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.lists(st.integers(), max_size=3),
    st.sampled_from(["claude", "kimi", "task", "result", "notice", "status", "cancel", "", "\x00", "\ud800"]),
)
small_id = st.one_of(st.integers(min_value=-2, max_value=40), anything)


def _start(conn, initiator="claude", recipient="kimi", *, max_turns=6, now=None):
    return conversations.start_conversation(
        conn,
        initiator=initiator,
        recipient=recipient,
        goal="g",
        agents=AGENTS,
        max_body_bytes=64,
        max_turns=max_turns,
        now=now,
    )


def _answer(conn, conv, sender="kimi", recipient="claude"):
    """The in-flight task's result: the conversation's second turn."""
    return messages.send_message(
        conn, sender=sender, recipient=recipient, text="r", agents=AGENTS, kind="result", reply_to=conv["message_id"]
    )


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("prop") / "bridge.db"
    conn = open_store(path)
    # Some real history for ids to point at: a plain message, a task, and conversations in every
    # state a send can meet, including several that a send moves (past expiry; budget spent).
    messages.send_message(conn, sender="claude", recipient="kimi", text="hello", agents=AGENTS)
    messages.send_message(conn, sender="kimi", recipient="claude", text="work", kind="task", agents=AGENTS)
    _start(conn)
    for _ in range(4):
        _start(conn, now=time.time() - DAY)
        _answer(conn, _start(conn, max_turns=2))
    return path, conn


def _rows(path, table: str) -> list[dict]:
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(f"SELECT * FROM {table} ORDER BY rowid")]
    finally:
        conn.close()


def _touched_conversation(path, conversation_id, reply_to) -> int:
    """The conversation a refused send was checked against (explicit, or the reply target's)."""
    if isinstance(conversation_id, int) and not isinstance(conversation_id, bool):
        return conversation_id
    found = [m["conversation_id"] for m in _rows(path, "messages") if m["id"] == reply_to]
    assert found and found[0] is not None, "a StateChangedError from a send that names no conversation"
    return found[0]


def _expected_after_move(before: dict, after: dict, conv_id: int, code: str, actor: str) -> None:
    """Compare ``after`` with ``before`` plus exactly the documented move on ``conv_id``."""
    target, reason = DOCUMENTED_MOVES[code]
    old = next(c for c in before["conversations"] if c["id"] == conv_id)
    if old["state"] == target:  # already expired: the refusal repeats itself and writes nothing
        assert after == before, code
        return
    assert old["state"] == "active", (code, old)
    moved = next(c for c in after["conversations"] if c["id"] == conv_id)
    at = moved["updated_at"]
    ended = {"in_flight_message_id": None} if target in TERMINAL_CONVERSATION_STATES else {}  # nothing in flight
    expected = {
        **before,
        "conversations": [
            {**c, "state": target, "updated_at": at, **ended} if c["id"] == conv_id else c
            for c in before["conversations"]
        ],
        "conversation_transitions": before["conversation_transitions"]
        + [
            {
                "id": max(t["id"] for t in before["conversation_transitions"]) + 1,
                "conversation_id": conv_id,
                "from_state": "active",
                "to_state": target,
                "actor": actor,
                "reason": reason,
                "at": at,
                "by_attempt": None,  # these calls run on no worker's server
            }
        ],
    }
    assert after == expected, code


def _snapshot(path) -> dict:
    return {table: _rows(path, table) for table, _ in db_snapshot(path)}


def _check(store, call, *, conversation_id=None, reply_to=None, actor=None) -> str | None:
    """Run ``call``; on a refusal, hold the store to the rule above. Returns the refusal code."""
    path, conn = store
    before = _snapshot(path)
    try:
        call(conn)
    except StateChangedError as exc:
        assert exc.code in DOCUMENTED_MOVES and exc.message, exc.code
        conv_id = _touched_conversation(path, conversation_id, reply_to)
        _expected_after_move(before, _snapshot(path), conv_id, exc.code, actor)
        return exc.code
    except BridgeError as exc:
        assert exc.code and exc.message
        assert _snapshot(path) == before, exc.code
        return exc.code
    finally:
        assert not conn.in_transaction
    return None


# 60 examples a property: the suite's time is bounded (CONTRIBUTING); each example is a fresh store.
common = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@common
@given(
    sender=anything,
    recipient=anything,
    text=anything,
    reply_to=small_id,
    dedup=anything,
    timeout=anything,
    conv=small_id,
    kind=anything,
)
def test_send_message(store, sender, recipient, text, reply_to, dedup, timeout, conv, kind):
    _check(
        store,
        lambda c: messages.send_message(
            c,
            sender=sender,
            recipient=recipient,
            text=text,
            agents=AGENTS,
            max_body_bytes=64,
            reply_to=reply_to,
            dedup_key=dedup,
            response_timeout_seconds=timeout,
            conversation_id=conv,
            kind=kind,
        ),
        conversation_id=conv,
        reply_to=reply_to,
        actor=sender,
    )


@common
@given(
    sender=st.sampled_from(sorted(AGENTS)),
    reply_to=st.one_of(st.none(), st.integers(1, 16)),
    conv=st.one_of(st.none(), st.integers(1, 10)),
    kind=st.sampled_from(["task", "result", "notice", None]),
)
def test_sends_inside_conversations(store, sender, reply_to, conv, kind):
    # Well-typed sends aimed at the seeded conversations, so expiry and turn-limit moves happen.
    recipient = "kimi" if sender == "claude" else "claude"
    _check(
        store,
        lambda c: messages.send_message(
            c,
            sender=sender,
            recipient=recipient,
            text="t",
            agents=AGENTS,
            reply_to=reply_to,
            conversation_id=conv,
            kind=kind,
        ),
        conversation_id=conv,
        reply_to=reply_to,
        actor=sender,
    )


def test_send_into_an_expired_conversation_moves_only_its_state(store):
    path, conn = store
    conv = _start(conn, now=time.time() - DAY)
    send = lambda c: messages.send_message(  # noqa: E731
        c, sender="kimi", recipient="claude", text="late", agents=AGENTS, kind="result", reply_to=conv["message_id"]
    )
    assert _check(store, send, reply_to=conv["message_id"], actor="kimi") == "conversation_expired"
    # Touched again: still refused the same way, and now nothing at all changes.
    before = db_snapshot(path)
    assert _check(store, send, reply_to=conv["message_id"], actor="kimi") == "conversation_expired"
    assert db_snapshot(path) == before


def test_send_past_the_turn_limit_moves_only_to_needs_human(store):
    _, conn = store
    conv = _start(conn, max_turns=2)
    result = _answer(conn, conv)
    follow_up = lambda c: messages.send_message(  # noqa: E731
        c, sender="claude", recipient="kimi", text="more", agents=AGENTS, kind="task", reply_to=result["id"]
    )
    assert _check(store, follow_up, reply_to=result["id"], actor="claude") == "turn_limit_reached"


@common
@given(agent=st.sampled_from(sorted(AGENTS)), message_id=small_id, lease=anything, ids=anything)
def test_claims_and_acks(store, agent, message_id, lease, ids):
    _check(
        store, lambda c: claims.claim_message(c, agent=agent, worker_id="w", message_id=message_id, lease_seconds=lease)
    )
    _check(store, lambda c: claims.release_message(c, agent=agent, worker_id="w", message_id=message_id))
    _check(store, lambda c: messages.mark_read(c, agent=agent, worker_id="w", message_ids=ids))
    _check(store, lambda c: messages.get_message(c, agent=agent, worker_id="w", message_id=message_id))
    _check(store, lambda c: messages.receive_messages(c, agent=agent, worker_id="w", limit=lease))


@common
@given(
    initiator=st.sampled_from(sorted(AGENTS)),
    recipient=anything,
    goal=anything,
    turns=anything,
    expiry=anything,
    dedup=anything,
    action=anything,
    conv=small_id,
)
def test_conversations(store, initiator, recipient, goal, turns, expiry, dedup, action, conv):
    _check(
        store,
        lambda c: conversations.start_conversation(
            c,
            initiator=initiator,
            recipient=recipient,
            goal=goal,
            agents=AGENTS,
            max_body_bytes=64,
            max_turns=turns,
            expires_in_seconds=expiry,
            dedup_key=dedup,
        ),
    )
    _check(
        store,
        lambda c: conversations.conversation_action(c, agent=initiator, action=action, conversation_id=conv),
        conversation_id=conv,
        actor=initiator,
    )


def test_store_is_intact_after_fuzzing(store):
    path, conn = store
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    # Every conversation's turn count matches the tasks and results it holds: no refusal took a turn.
    for conv in _rows(path, "conversations"):
        turns = [m for m in _rows(path, "messages") if m["conversation_id"] == conv["id"] and m["kind"] != "notice"]
        assert conv["turn_count"] == len(turns), conv
