"""The dispatch rule, defined once: the predicate case by case, then each of its users on a
real store (the listener's scan, the barrier, ``pending``, ``recover --dispatch``)."""

import dataclasses
import json
import time

import pytest

from dispatcher.bridge import claims, conversations, messages
from dispatcher.bridge.worker_scope import attempt_claim_owner
from dispatcher.core.config import AgentConfig, BridgeConfig
from dispatcher.core.errors import AlreadyAttempted, BridgeError, DispatchRefused
from dispatcher.core.settings import BridgeSettings
from dispatcher.dispatch import queue
from dispatcher.dispatch.attempts import begin_attempt, get_attempt
from dispatcher.dispatch.control import pending
from dispatcher.dispatch.recover import recover
from dispatcher.store import open_store

NOW = 1_800_000_000.0
MAX_AGE = 3600
AGENTS = {"claude", "kimi"}


def _config(claude_auto=True, kimi_auto=False) -> BridgeConfig:
    return BridgeConfig(
        agents={
            "claude": AgentConfig(launcher="launchers/command_headless.sh", auto=claude_auto),
            "kimi": AgentConfig(launcher="launchers/command_headless.sh", auto=kimi_auto),
        },
        dispatch_max_age_seconds=MAX_AGE,
    )


CONFIG = _config()
TASK = queue.Candidate(
    message_id=7,
    sender="kimi",
    recipient="claude",
    kind="task",
    created_at=NOW - 10,
    acknowledged=False,
    claim_active=False,
    attempted=False,
    conversation_id=None,
    conversation_state=None,
    conversation_initiator=None,
    in_flight=True,
)
CONV_TASK = dataclasses.replace(TASK, conversation_id=3, conversation_state="active", conversation_initiator="kimi")
REVIEW = dataclasses.replace(
    TASK, kind="result", conversation_id=3, conversation_state="active", conversation_initiator="claude"
)

#   case                                       facts                                              automatic   manual
PREDICATE_TABLE = [
    ("standalone task", TASK, None, None),
    ("task in an active conversation", CONV_TASK, None, None),
    ("review turn", REVIEW, None, None),
    ("undeclared recipient", dataclasses.replace(TASK, recipient="codex"), "unknown_agent", "unknown_agent"),
    ("attempted", dataclasses.replace(TASK, attempted=True), "already_attempted", "already_attempted"),
    ("notice", dataclasses.replace(TASK, kind="notice"), "not_dispatchable", "not_dispatchable"),
    ("plain message", dataclasses.replace(TASK, kind=None), "not_dispatchable", "not_dispatchable"),
    ("standalone result", dataclasses.replace(TASK, kind="result"), "not_dispatchable", "not_dispatchable"),
    (
        "result to the conversation's recipient",
        dataclasses.replace(REVIEW, conversation_initiator="kimi"),
        "not_dispatchable",
        "not_dispatchable",
    ),
    ("acknowledged", dataclasses.replace(TASK, acknowledged=True), "already_acknowledged", "already_acknowledged"),
    ("actively claimed", dataclasses.replace(TASK, claim_active=True), "claimed_by_other", "claimed_by_other"),
    ("answered by its recipient", dataclasses.replace(TASK, answered=True), "already_answered", "already_answered"),
    (
        "answered and acknowledged: acknowledged is named",
        dataclasses.replace(TASK, answered=True, acknowledged=True),
        "already_acknowledged",
        "already_acknowledged",
    ),
    (
        "conversation blocked",
        dataclasses.replace(CONV_TASK, conversation_state="blocked"),
        "conversation_not_active",
        "conversation_not_active",
    ),
    (
        "conversation needs_human",
        dataclasses.replace(REVIEW, conversation_state="needs_human"),
        "conversation_not_active",
        "conversation_not_active",
    ),
    (
        "conversation completed",
        dataclasses.replace(CONV_TASK, conversation_state="completed"),
        "conversation_not_active",
        "conversation_not_active",
    ),
    (
        "conversation cancelled",
        dataclasses.replace(CONV_TASK, conversation_state="cancelled"),
        "conversation_not_active",
        "conversation_not_active",
    ),
    (
        "conversation expired",
        dataclasses.replace(REVIEW, conversation_state="expired"),
        "conversation_not_active",
        "conversation_not_active",
    ),
    ("answered already (not in flight)", dataclasses.replace(CONV_TASK, in_flight=False), "not_in_turn", "not_in_turn"),
    ("recipient's auto is off", dataclasses.replace(TASK, recipient="kimi", sender="claude"), "auto_off", None),
    ("older than the window", dataclasses.replace(TASK, created_at=NOW - MAX_AGE - 1), "stale", None),
    ("exactly at the window's edge", dataclasses.replace(TASK, created_at=NOW - MAX_AGE), None, None),
    ("auto off and old: auto is named", dataclasses.replace(TASK, recipient="kimi", created_at=0.0), "auto_off", None),
]


@pytest.mark.parametrize(("case", "facts", "automatic", "manual"), PREDICATE_TABLE, ids=[r[0] for r in PREDICATE_TABLE])
def test_predicate(case, facts, automatic, manual):
    assert queue.dispatch_refusal(facts, NOW, CONFIG, manual=False) == automatic
    assert queue.dispatch_refusal(facts, NOW, CONFIG, manual=True) == manual
    for code in {automatic, manual} - {None}:
        assert queue.refusal_text(code, facts, CONFIG)  # every refusal says what was wrong


# -- its users, on a real store ------------------------------------------------------------------------


def _task(conn, sender="kimi", recipient="claude", age: float = 10.0) -> int:
    return messages.send_message(
        conn, sender=sender, recipient=recipient, text="secret task", agents=AGENTS, kind="task", now=time.time() - age
    )["id"]


def _begin(conn, message_id: int, *, config=CONFIG, manual=False):
    return begin_attempt(
        conn,
        message_id=message_id,
        config=config,
        now=time.time(),
        manual=manual,
        supervisor_pid=1,
        supervisor_start=None,
        worker_token="t",
    )


def test_scan_takes_the_oldest_dispatchable_and_skips_the_rest(conn):
    stale = _task(conn, age=MAX_AGE + 60)
    claimed = _task(conn)
    claims.claim_message(conn, agent="claude", worker_id="session", message_id=claimed)
    messages.send_message(conn, sender="kimi", recipient="claude", text="fyi", agents=AGENTS, kind="notice")
    for_kimi = _task(conn, sender="claude", recipient="kimi")
    wanted = _task(conn)
    picked = queue.next_dispatchable(conn, "claude", CONFIG, time.time())
    assert picked is not None and picked.message_id == wanted and picked.sender == "kimi"
    assert queue.next_dispatchable(conn, "kimi", CONFIG, time.time()) is None  # kimi's auto is off
    _begin(conn, wanted)
    assert queue.next_dispatchable(conn, "claude", CONFIG, time.time()) is None
    assert get_attempt(conn, stale) is None and get_attempt(conn, for_kimi) is None


def test_an_answered_conversation_task_is_not_dispatched(conn):
    """claude answered the root task in a session but never acknowledged it: a worker for it could
    not reply (the result is in flight), so launching one would only fail and block the conversation."""
    conv = conversations.start_conversation(
        conn, initiator="kimi", recipient="claude", goal="g", agents=AGENTS, max_body_bytes=100
    )
    messages.send_message(
        conn, sender="claude", recipient="kimi", text="done", agents=AGENTS, kind="result", reply_to=conv["message_id"]
    )
    assert queue.next_dispatchable(conn, "claude", CONFIG, time.time()) is None
    with pytest.raises(DispatchRefused) as info:
        _begin(conn, conv["message_id"], manual=True)
    assert info.value.code == "not_in_turn"


def test_an_answered_standalone_task_is_never_dispatched_and_pending_shows_it(conn, tmp_path):
    """A session of claude answered a standalone task but never acknowledged it. Launching a worker
    for it would credit that worker with the session's answer (and bill its cost against it): the
    listener's scan, the barrier (manual too) and ``pending`` all refuse it, as already_answered."""
    task = _task(conn)
    messages.send_message(
        conn, sender="claude", recipient="kimi", text="done", agents=AGENTS, kind="result", reply_to=task
    )
    assert queue.next_dispatchable(conn, "claude", CONFIG, time.time()) is None
    with pytest.raises(DispatchRefused) as info:
        _begin(conn, task, manual=True)
    assert info.value.code == "already_answered" and f"#{task}" in info.value.message
    assert get_attempt(conn, task) is None
    report = pending(_settings(tmp_path, CONFIG), "claude")
    assert [m["id"] for m in report["already_answered"]] == [task] and report["dispatchable"] == []


def test_the_barrier_takes_the_claim_for_the_attempt(conn, tmp_path):
    """Once the attempt row is committed, a session of the same agent cannot claim the task (it
    would be refused its own work's credit otherwise: the worker refused, the session's answer
    recorded as the worker's success). The claim is the attempt's; only its worker's server,
    which claims as the attempt, renews it."""
    task = _task(conn)
    _begin(conn, task)
    session = open_store(tmp_path / "bridge.db")
    with pytest.raises(BridgeError) as info:
        claims.claim_message(session, agent="claude", worker_id="claude-99-session", message_id=task)
    assert info.value.code == "claimed_by_other"
    worker = claims.claim_message(
        session, agent="claude", worker_id=attempt_claim_owner("claude", task), message_id=task
    )
    assert worker["renewed"] is True
    session.close()


def test_the_barrier_applies_the_rule_and_manual_overrides_only_auto_and_age(conn):
    for_kimi = _task(conn, sender="claude", recipient="kimi")
    old = _task(conn, age=MAX_AGE + 60)
    claimed = _task(conn)
    claims.claim_message(conn, agent="claude", worker_id="session", message_id=claimed)
    for message_id, code in ((for_kimi, "auto_off"), (old, "stale"), (claimed, "claimed_by_other")):
        with pytest.raises(DispatchRefused) as info:
            _begin(conn, message_id)
        assert info.value.code == code and str(message_id) in info.value.message
        assert (f"agent-bridge dispatch {message_id}" in info.value.message) is (code != "claimed_by_other")
        assert get_attempt(conn, message_id) is None
    assert _begin(conn, for_kimi, manual=True)["id"] == for_kimi  # a human's explicit decision
    assert _begin(conn, old, manual=True)["id"] == old
    with pytest.raises(DispatchRefused) as info:
        _begin(conn, claimed, manual=True)
    assert info.value.code == "claimed_by_other"
    with pytest.raises(AlreadyAttempted):
        _begin(conn, old, manual=True)
    with pytest.raises(DispatchRefused) as info:
        _begin(conn, 10**6, manual=True)
    assert info.value.code == "message_not_found"


def _settings(tmp_path, config: BridgeConfig) -> BridgeSettings:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config.model_dump()))
    return BridgeSettings(db=tmp_path / "bridge.db", config=path, runtime_dir=tmp_path / "runtime")


def test_pending_holds_an_auto_off_agents_tasks(conn, tmp_path):
    young = _task(conn, sender="claude", recipient="kimi")
    old = _task(conn, sender="claude", recipient="kimi", age=MAX_AGE + 60)
    report = pending(_settings(tmp_path, CONFIG), "kimi")
    assert report["auto"] is False and report["dispatchable"] == [] and report["error"] is None
    assert [m["id"] for m in report["held_auto_off"]] == [young, old]
    assert "text" not in report["held_auto_off"][0]


def test_pending_splits_dispatchable_and_stale(conn, tmp_path):
    young = _task(conn)
    old = _task(conn, age=MAX_AGE + 60)
    report = pending(_settings(tmp_path, CONFIG), "claude")
    assert [m["id"] for m in report["dispatchable"]] == [young]
    assert [m["id"] for m in report["stale"]] == [old] and report["held_auto_off"] == []


def test_recover_dispatch_launches_nothing_for_an_auto_off_agent(conn, tmp_path):
    held = _task(conn, sender="claude", recipient="kimi")
    report = recover(_settings(tmp_path, CONFIG), "kimi", dispatch=True)
    assert report["dispatched"] == [] and report["dispatchable"] == [] and report["held_auto_off"] == [held]
    assert get_attempt(conn, held) is None


def test_no_claim_lands_between_the_barriers_check_and_its_insert(conn, tmp_path):
    """The rule is checked inside the barrier's transaction. A session that tries to
    claim the task while the barrier is reading its facts waits for the barrier's commit, so
    the message is never both claimed by a session and given a worker."""
    task = _task(conn)
    session = open_store(tmp_path / "bridge.db")
    session.execute("PRAGMA busy_timeout = 100")
    tried = []

    def claim_meanwhile(statement: str) -> None:
        if not tried and "FROM messages" in statement:  # the barrier is reading the message's facts
            try:
                tried.append(claims.claim_message(session, agent="claude", worker_id="session", message_id=task))
            except Exception as exc:  # noqa: BLE001 - the barrier holds the write lock: whatever the claim raises is recorded
                tried.append(exc)

    conn.set_trace_callback(claim_meanwhile)
    try:
        _begin(conn, task)
    finally:
        conn.set_trace_callback(None)
    assert tried and isinstance(tried[0], Exception) and "locked" in str(tried[0])
    assert get_attempt(conn, task) is not None
    # Afterwards the session sees the attempt's worker as the one to leave it to (no double work).
    refused = queue.dispatch_refusal(
        queue.message_facts(conn, task, time.time(), CONFIG), time.time(), CONFIG, manual=False
    )
    assert refused == "already_attempted"
    session.close()
