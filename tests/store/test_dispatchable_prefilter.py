"""The dispatch rule's two forms agree: the SQL pre-filter (``store.dispatchable``) never drops a
message the Python rule (``queue.dispatch_refusal``) would dispatch, or would report in the
backlog, on generated stores: every kind, acknowledgement, claim, attempt, age and
conversation state mixed."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dispatcher.core.config import AgentConfig, BridgeConfig
from dispatcher.dispatch import queue
from dispatcher.store import dispatchable, open_store, write_transaction

NOW = 1_800_000_000.0
MAX_AGE = 3600
AGENTS = ("claude", "kimi")
CONFIG = BridgeConfig(
    agents={
        "claude": AgentConfig(launcher="launchers/command_headless.sh", auto=True),
        "kimi": AgentConfig(launcher="launchers/command_headless.sh", auto=True, interactive_grace_seconds=60),
    },
    dispatch_max_age_seconds=MAX_AGE,
)
BACKLOG = {None, "auto_off", "stale", "held_interactive"}  # what classify reports from the scan
STATES = ["active", "active", "active", "blocked", "needs_human", "completed", "cancelled", "expired"]


def mostly(value, other):
    """Three in four draws ``value``: dispatchable messages are common enough to be found."""
    return st.sampled_from([value, value, value, other])


message = st.fixed_dictionaries(
    {
        "recipient": st.sampled_from(AGENTS),
        "kind": st.sampled_from(["task", "result", "notice", None]),
        "age": st.sampled_from([0.0, 10.0, MAX_AGE - 1.0, MAX_AGE + 1.0, 10 * MAX_AGE, -5.0]),
        "acknowledged": mostly(False, True),
        "claim": st.sampled_from([None, None, NOW - 100, NOW + 100]),  # none, expired, active
        "attempted": mostly(False, True),
        # its own conversation, or none: (state, expired, in flight, initiated by the recipient)
        "conversation": st.one_of(
            st.none(), st.tuples(st.sampled_from(STATES), mostly(False, True), mostly(True, False), st.booleans())
        ),
    }
)


@pytest.fixture(scope="module")
def conn(tmp_path_factory):
    conn = open_store(tmp_path_factory.mktemp("prefilter") / "bridge.db")
    yield conn
    conn.close()


def _build(conn, messages: list[dict]) -> None:
    with write_transaction(conn):
        for table in ("dispatch_attempts", "messages", "conversations"):
            conn.execute(f"DELETE FROM {table}")  # noqa: S608 - a constant table name
        for i, m in enumerate(messages, start=1):
            sender = "kimi" if m["recipient"] == "claude" else "claude"
            conv = None
            if m["conversation"] is not None:
                state, expired, in_flight, by_recipient = m["conversation"]
                conv = conn.execute(
                    "INSERT INTO conversations (initiator, recipient, goal, state, max_turns, in_flight_message_id,"
                    " created_at, expires_at, updated_at) VALUES (?, ?, 'g', ?, 6, ?, ?, ?, ?)",
                    (
                        m["recipient"] if by_recipient else sender,
                        sender if by_recipient else m["recipient"],
                        state,
                        i if in_flight else None,
                        NOW - 50,
                        NOW - 10 if expired else NOW + 1000,
                        NOW,
                    ),
                ).lastrowid
            conn.execute(
                "INSERT INTO messages (id, sender, recipient, kind, text, conversation_id, created_at,"
                " acknowledged_at, claim_owner, claim_expires_at) VALUES (?, ?, ?, ?, 't', ?, ?, ?, ?, ?)",
                (
                    i,
                    sender,
                    m["recipient"],
                    m["kind"],
                    conv,
                    NOW - m["age"],
                    NOW - 1 if m["acknowledged"] else None,
                    None if m["claim"] is None else "claude-1-x",
                    m["claim"],
                ),
            )
            if m["attempted"]:
                conn.execute(
                    "INSERT INTO dispatch_attempts (message_id, agent, state, started_at) VALUES (?, ?, 'recorded', ?)",
                    (i, m["recipient"], NOW - 1),
                )


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(messages=st.lists(message, min_size=1, max_size=12))
def test_the_scan_keeps_every_message_the_rule_would_dispatch(conn, messages):
    _build(conn, messages)
    for agent in AGENTS:
        refusals = {}
        for message_id in range(1, len(messages) + 1):
            facts = queue.message_facts(conn, message_id, NOW, CONFIG)
            assert facts is not None
            if facts.recipient == agent:
                refusals[message_id] = queue.dispatch_refusal(facts, NOW, CONFIG, manual=False)
        dispatch_now = sorted(i for i, code in refusals.items() if code is None)
        in_backlog = {i for i, code in refusals.items() if code in BACKLOG}
        # The listener's scan (bounded by the age window) and the backlog's (unbounded).
        windowed = {row["id"] for row in dispatchable.scan_facts(conn, agent, NOW - MAX_AGE)}
        unbounded = {row["id"] for row in dispatchable.scan_facts(conn, agent, float("-inf"))}
        assert set(dispatch_now) <= windowed, (agent, refusals)
        assert in_backlog <= unbounded, (agent, refusals)
        found = queue.next_dispatchable(conn, agent, CONFIG, NOW)
        assert (found.message_id if found else None) == (dispatch_now[0] if dispatch_now else None)
