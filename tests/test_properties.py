"""Property-based bad input against the domain layer: a typed refusal or success, never a
crash, and a refusal never leaves a partial write (only the two documented state moves)."""

import sqlite3

import pytest
from harness import db_snapshot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dispatcher import claims, conversations, messages
from dispatcher.errors import BridgeError, StateChangedError
from dispatcher.store import open_store

AGENTS = frozenset({"claude", "kimi"})
anything = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=40), st.lists(st.integers(), max_size=3),
    st.sampled_from(["claude", "kimi", "task", "result", "notice", "status", "cancel", "", "\x00", "\ud800"]),
)
small_id = st.one_of(st.integers(min_value=-2, max_value=12), anything)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("prop") / "bridge.db"
    conn = open_store(path)
    # Some real history for ids to point at: a plain message, a task, and a conversation.
    messages.send_message(conn, sender="claude", recipient="kimi", text="hello", agents=AGENTS)
    messages.send_message(conn, sender="kimi", recipient="claude", text="work", kind="task", agents=AGENTS)
    conversations.start_conversation(conn, initiator="claude", recipient="kimi", goal="g", agents=AGENTS, max_body_bytes=64)
    return path, conn


def _check(store, call):
    path, conn = store
    before = db_snapshot(path)
    try:
        call(conn)
    except StateChangedError:
        pass  # an expiry or turn-limit move is the documented exception to "unchanged"
    except BridgeError as exc:
        assert exc.code and exc.message
        assert db_snapshot(path) == before, exc.code
    assert not conn.in_transaction


common = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@common
@given(sender=anything, recipient=anything, text=anything, reply_to=small_id, dedup=anything,
       timeout=anything, conv=small_id, kind=anything)
def test_send_message(store, sender, recipient, text, reply_to, dedup, timeout, conv, kind):
    _check(store, lambda c: messages.send_message(
        c, sender=sender, recipient=recipient, text=text, agents=AGENTS, max_body_bytes=64, reply_to=reply_to,
        dedup_key=dedup, response_timeout_seconds=timeout, conversation_id=conv, kind=kind))


@common
@given(agent=st.sampled_from(sorted(AGENTS)), message_id=small_id, lease=anything, ids=anything)
def test_claims_and_acks(store, agent, message_id, lease, ids):
    _check(store, lambda c: claims.claim_message(c, agent=agent, worker_id="w", message_id=message_id, lease_seconds=lease))
    _check(store, lambda c: claims.release_message(c, agent=agent, worker_id="w", message_id=message_id))
    _check(store, lambda c: messages.mark_read(c, agent=agent, worker_id="w", message_ids=ids))
    _check(store, lambda c: messages.get_message(c, agent=agent, worker_id="w", message_id=message_id))
    _check(store, lambda c: messages.receive_messages(c, agent=agent, worker_id="w", limit=lease))


@common
@given(initiator=st.sampled_from(sorted(AGENTS)), recipient=anything, goal=anything, turns=anything,
       expiry=anything, dedup=anything, action=anything, conv=small_id)
def test_conversations(store, initiator, recipient, goal, turns, expiry, dedup, action, conv):
    _check(store, lambda c: conversations.start_conversation(
        c, initiator=initiator, recipient=recipient, goal=goal, agents=AGENTS, max_body_bytes=64,
        max_turns=turns, expires_in_seconds=expiry, dedup_key=dedup))
    _check(store, lambda c: conversations.conversation_action(c, agent=initiator, action=action, conversation_id=conv))


def test_integrity_after_fuzzing(store):
    _, conn = store
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert isinstance(conn, sqlite3.Connection)
