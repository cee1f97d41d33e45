"""The transition tables, one test per (state, event), against tables written out by hand:
conversations (the agents' actions and the rules' moves), attempts, and the turn budget."""

import time

import pytest

from dispatcher.bridge import conversations
from dispatcher.bridge.conversations import STATES, TRANSITIONS, next_state, turn_available
from dispatcher.core.errors import BridgeError
from dispatcher.dispatch.attempts import finish_attempt, get_attempt, mark_spawned
from dispatcher.store import write_transaction

pytestmark = pytest.mark.both_backends

AGENTS = {"claude", "kimi"}
_ = None  # not allowed from this state

#   event:   complete     needs_human    cancel       expire     turn_limit     dispatch_failed  budget_exhausted
CONVERSATION_TABLE = {
    "active": ("completed", "needs_human", "cancelled", "expired", "needs_human", "blocked", "needs_human"),
    "blocked": (_, _, "cancelled", _, _, _, _),
    "needs_human": (_, _, "cancelled", _, _, _, _),
    "completed": (_, _, _, _, _, _, _),
    "cancelled": (_, _, _, _, _, _, _),
    "expired": (_, _, _, _, _, _, _),
}
EVENTS = ("complete", "needs_human", "cancel", "expire", "turn_limit", "dispatch_failed", "budget_exhausted")
CONVERSATION_CASES = [(s, e, CONVERSATION_TABLE[s][i]) for s in CONVERSATION_TABLE for i, e in enumerate(EVENTS)]


def test_the_table_covers_every_state_and_event():
    assert set(CONVERSATION_TABLE) == set(STATES) and set(EVENTS) == set(TRANSITIONS)


@pytest.mark.parametrize(("state", "event", "target"), CONVERSATION_CASES)
def test_conversation_transition(state, event, target):
    assert next_state(state, event) == target


def _conversation(conn, state: str, *, expires_in: float = 3600) -> int:
    cid = conversations.start_conversation(
        conn, initiator="kimi", recipient="claude", goal="g", agents=AGENTS, max_body_bytes=100
    )["conversation_id"]
    conn.execute(
        "UPDATE conversations SET state = ?, expires_at = ? WHERE id = ?", (state, time.time() + expires_in, cid)
    )
    return cid


def _state(conn, cid: int) -> str:
    return conn.execute("SELECT state FROM conversations WHERE id = ?", (cid,)).fetchone()[0]


@pytest.mark.parametrize(
    ("state", "action", "target"), [c for c in CONVERSATION_CASES if c[1] in ("complete", "needs_human", "cancel")]
)
def test_conversation_action_follows_the_table(conn, state, action, target):
    cid = _conversation(conn, state)
    if state == TRANSITIONS[action][0]:  # repeating the current state is a no-op
        assert (
            conversations.conversation_action(conn, agent="kimi", action=action, conversation_id=cid)["changed"]
            is False
        )
    elif target is None:
        with pytest.raises(BridgeError) as info:
            conversations.conversation_action(conn, agent="kimi", action=action, conversation_id=cid)
        assert info.value.code == "invalid_transition"
        assert _state(conn, cid) == state
    else:
        done = conversations.conversation_action(conn, agent="kimi", action=action, conversation_id=cid)
        assert (done["state"], done["changed"]) == (target, True)


@pytest.mark.parametrize("state", STATES)
def test_dispatch_failure_follows_the_table(conn, state):
    cid = _conversation(conn, state)
    with write_transaction(conn):
        moved = conversations.block_conversation(conn, cid, "claude", "dispatch_failed", time.time())
    assert moved is (state == "active")
    assert _state(conn, cid) == (CONVERSATION_TABLE[state][EVENTS.index("dispatch_failed")] or state)


def test_dispatch_failure_on_an_expired_conversation_records_the_expiry(conn):
    cid = _conversation(conn, "active", expires_in=-1)
    with write_transaction(conn):
        assert conversations.block_conversation(conn, cid, "claude", "dispatch_failed", time.time()) is False
    assert _state(conn, cid) == "expired"


@pytest.mark.parametrize("state", STATES)
def test_expiry_follows_the_table(conn, state):
    cid = _conversation(conn, state, expires_in=-1)
    status = conversations.conversation_action(conn, agent="kimi", action="status", conversation_id=cid)
    assert status["state"] == (CONVERSATION_TABLE[state][EVENTS.index("expire")] or state)


# -- the turn budget: a result needs one turn left, a task two (its own and its result's) ------------

#   kind      turns used  max   allowed
BUDGET_TABLE = [
    ("result", 1, 2, True),
    ("result", 2, 2, False),
    ("task", 2, 2, False),
    ("result", 2, 3, True),
    ("task", 2, 3, False),  # odd budget: the task's result would have no turn
    ("result", 3, 3, False),
    ("task", 2, 4, True),
    ("result", 3, 4, True),
    ("task", 4, 4, False),
    ("task", 3, 5, True),
    ("task", 4, 5, False),
    ("result", 4, 5, True),
    ("task", 18, 20, True),
    ("task", 19, 20, False),
    ("result", 19, 20, True),
]


@pytest.mark.parametrize(("kind", "used", "max_turns", "allowed"), BUDGET_TABLE)
def test_turn_budget(kind, used, max_turns, allowed):
    assert turn_available(kind, used, max_turns) is allowed


# -- attempts: recorded -> spawned -> finished, recorded -> finished, nothing after finished --------

#   state        event     moves to
ATTEMPT_TABLE = [
    ("recorded", "spawn", "spawned"),
    ("recorded", "finish", "finished"),
    ("spawned", "spawn", None),
    ("spawned", "finish", "finished"),
    ("finished", "spawn", None),
    ("finished", "finish", None),
]


@pytest.mark.parametrize(("state", "event", "target"), ATTEMPT_TABLE)
def test_attempt_transition(conn, state, event, target):
    conn.execute(
        "INSERT INTO messages (sender, recipient, kind, text, created_at) VALUES ('kimi', 'claude', 'task', 't', 0)"
    )
    conn.execute(
        "INSERT INTO dispatch_attempts (message_id, agent, state, started_at, outcome, worker_pid)"
        " VALUES (1, 'claude', ?, 0, ?, ?)",
        (state, "crashed" if state == "finished" else None, 11 if state != "recorded" else None),
    )
    before = dict(get_attempt(conn, 1))
    if event == "spawn":
        moved = mark_spawned(conn, 1, 4242, "boot-1:123")
    else:
        with write_transaction(conn):
            moved = finish_attempt(conn, 1, outcome="failed", now=5.0, error_kind="no_evidence")
    after = dict(get_attempt(conn, 1))
    assert moved is (target is not None)
    if target is None:
        assert after == before  # a refused move changes nothing: a settled attempt stays settled
    else:
        assert after["state"] == target
        if event == "spawn":
            assert (after["worker_pid"], after["worker_start_time"]) == (4242, "boot-1:123")
        else:
            assert (after["outcome"], after["error_kind"], after["finished_at"]) == ("failed", "no_evidence", 5.0)
