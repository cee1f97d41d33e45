"""Settling on a real SQLite file, no processes: the verdict from what a worker left in the
store, everything that follows from it in one transaction, and the system notice that
no agent can suppress."""

import sqlite3
import time

import pytest

from dispatcher.bridge import claims, conversations, messages
from dispatcher.bridge.worker_scope import attempt_claim_owner
from dispatcher.core.config import AgentConfig, BridgeConfig
from dispatcher.core.errors import BridgeError
from dispatcher.dispatch.attempts import begin_attempt, get_attempt
from dispatcher.dispatch.outcome import settle
from dispatcher.store import open_store
from dispatcher.store.messages import insert_message

AGENTS = {"claude", "kimi"}
CONFIG = BridgeConfig(
    agents={
        "claude": AgentConfig(launcher="launchers/command_headless.sh", auto=True),
        "kimi": AgentConfig(launcher="launchers/command_headless.sh", auto=True),
    }
)


def _attempt(conn, message_id: int) -> None:
    begin_attempt(
        conn,
        message_id=message_id,
        config=CONFIG,
        now=time.time(),
        manual=False,
        supervisor_pid=1,
        supervisor_start=None,
        worker_token="t",
    )


def _task(conn, text="do it") -> int:
    return messages.send_message(conn, sender="kimi", recipient="claude", text=text, agents=AGENTS, kind="task")["id"]


def _result(conn, task_id: int, text: str, *, attempt: int | None = None) -> int:
    """claude answers ``task_id``; ``attempt``: as the worker of that attempt (its server records it)."""
    return messages.send_message(
        conn, sender="claude", recipient="kimi", text=text, agents=AGENTS, kind="result", reply_to=task_id,
        attempt=attempt,
    )["id"]  # fmt: skip


def _ack(conn, agent: str, message_id: int) -> None:
    """Acknowledged by the attempt's worker (which holds the claim the barrier took)."""
    worker = attempt_claim_owner(agent, message_id)
    assert messages.mark_read(conn, agent=agent, worker_id=worker, message_ids=[message_id])["acknowledged"]


def _notices(conn, recipient="kimi") -> list[sqlite3.Row]:
    return conn.execute(
        "SELECT * FROM messages WHERE recipient = ? AND kind = 'notice' ORDER BY id", (recipient,)
    ).fetchall()


def _conversation_state(conn, cid: int) -> str:
    return conn.execute("SELECT state FROM conversations WHERE id = ?", (cid,)).fetchone()[0]


# -- the verdict from the store ------------------------------------------------------------------


def test_two_blocked_results_and_an_ack_are_blocked_not_succeeded(conn):
    task = _task(conn)
    _attempt(conn, task)
    _result(conn, task, "blocked: no permission", attempt=task)
    _result(conn, task, "Blocked: still no permission", attempt=task)
    _ack(conn, "claude", task)
    assert settle(conn, task, fallback="failed") == "blocked"
    assert _notices(conn) == []


def test_a_result_and_a_blocked_result_are_blocked(conn):
    task = _task(conn)
    _attempt(conn, task)
    _result(conn, task, "done: here it is", attempt=task)
    _result(conn, task, "  BLOCKED: actually not", attempt=task)
    claims.claim_message(conn, agent="claude", worker_id=attempt_claim_owner("claude", task), message_id=task)
    claims.release_message(conn, agent="claude", worker_id=attempt_claim_owner("claude", task), message_id=task)
    assert settle(conn, task, fallback="failed") == "blocked"


def test_blocked_result_with_the_claim_still_held_fails(conn):
    task = _task(conn)
    _attempt(conn, task)
    claims.claim_message(conn, agent="claude", worker_id=attempt_claim_owner("claude", task), message_id=task)
    _result(conn, task, "blocked: cannot", attempt=task)
    assert settle(conn, task, fallback="failed") == "failed"
    assert get_attempt(conn, task)["error_kind"] == "blocked_without_release"


def _review_turn(conn) -> tuple[int, int]:
    """kimi started a conversation, claude answered the goal: the result is kimi's review turn."""
    conv = conversations.start_conversation(
        conn, initiator="kimi", recipient="claude", goal="g", agents=AGENTS, max_body_bytes=1000
    )
    result = _result(conn, conv["message_id"], "done: step 1")
    return conv["conversation_id"], result


@pytest.mark.parametrize("action", ["cancel", "complete", "needs_human"])
def test_a_review_turn_ending_the_conversation_is_a_decision(conn, action):
    cid, result = _review_turn(conn)
    _attempt(conn, result)
    conversations.conversation_action(conn, agent="kimi", action=action, conversation_id=cid, attempt=result)
    _ack(conn, "kimi", result)
    assert settle(conn, result, fallback="failed") == "succeeded"
    assert _notices(conn, recipient="claude") == []


def test_a_review_turn_with_a_follow_up_task_succeeds(conn):
    cid, result = _review_turn(conn)
    _attempt(conn, result)
    messages.send_message(
        conn,
        sender="kimi",
        recipient="claude",
        text="next",
        agents=AGENTS,
        kind="task",
        reply_to=result,
        attempt=result,
    )
    _ack(conn, "kimi", result)
    assert settle(conn, result, fallback="failed") == "succeeded"
    assert _conversation_state(conn, cid) == "active"


def test_the_attempts_claim_ends_with_the_attempt_and_no_one_elses_does(conn):
    """The barrier claims the task for the attempt. Once the attempt is settled (say it failed
    before its worker ran), that claim ends with it, so a session of the agent can take the task
    at once instead of waiting out the lease; a session's claim taken after a release stays."""
    failed = _task(conn)
    _attempt(conn, failed)
    with pytest.raises(BridgeError, match="claimed_by_other"):
        claims.claim_message(conn, agent="claude", worker_id="claude-9-session", message_id=failed)
    assert settle(conn, failed, fallback="failed", error_kind="spawn_unrecorded") == "failed"
    assert claims.claim_message(conn, agent="claude", worker_id="claude-9-session", message_id=failed)
    released = _task(conn)
    _attempt(conn, released)
    claims.release_message(conn, agent="claude", worker_id=attempt_claim_owner("claude", released), message_id=released)
    claims.claim_message(conn, agent="claude", worker_id="claude-9-session", message_id=released)
    settle(conn, released, fallback="failed")
    assert conn.execute("SELECT claim_owner FROM messages WHERE id = ?", (released,)).fetchone()[0] == (
        "claude-9-session"
    )


def test_a_review_turn_with_nothing_done_fails_and_blocks_the_conversation(conn):
    cid, result = _review_turn(conn)
    _attempt(conn, result)
    assert settle(conn, result, fallback="failed") == "failed"
    assert get_attempt(conn, result)["error_kind"] == "no_evidence"
    assert _conversation_state(conn, cid) == "blocked"
    assert len(_notices(conn, recipient="claude")) == 1


# -- one transaction -------------------------------------------------------------------------------


class _Crash(Exception):
    pass


def _crash():
    raise _Crash()


def test_a_crash_before_commit_leaves_nothing(conn, tmp_path):
    conv = conversations.start_conversation(
        conn, initiator="kimi", recipient="claude", goal="g", agents=AGENTS, max_body_bytes=1000
    )
    task, cid = conv["message_id"], conv["conversation_id"]
    _attempt(conn, task)
    before = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
    with pytest.raises(_Crash):
        settle(conn, task, fallback="crashed", error_kind="worker_gone", before_commit=_crash)
    # Seen from another connection, as a restarted process would.
    other = open_store(tmp_path / "bridge.db")
    assert tuple(
        other.execute("SELECT state, outcome FROM dispatch_attempts WHERE message_id = ?", (task,)).fetchone()
    ) == ("recorded", None)
    assert other.execute("SELECT count(*) FROM messages").fetchone()[0] == before
    assert _conversation_state(other, cid) == "active"
    other.close()
    # Reconciliation can still settle it, completely.
    assert settle(conn, task, fallback="crashed", error_kind="worker_gone") == "crashed"
    assert len(_notices(conn)) == 1 and _conversation_state(conn, cid) == "blocked"


def test_settling_twice_sends_one_notice(conn):
    task = _task(conn)
    _attempt(conn, task)
    assert settle(conn, task, fallback="timeout", error_kind="timeout") == "timeout"
    assert settle(conn, task, fallback="crashed", error_kind="worker_gone") == "timeout"
    assert len(_notices(conn)) == 1
    assert get_attempt(conn, task)["error_kind"] == "timeout"


# -- the system notice -----------------------------------------------------------------------------


def test_a_worker_cannot_suppress_the_system_notice(conn):
    task = _task(conn)
    _attempt(conn, task)
    key = f"agent-bridge:dispatch-notice:{task}"
    with pytest.raises(BridgeError) as refused:  # the tools refuse the system's key namespace ...
        messages.send_message(
            conn,
            sender="claude",
            recipient="kimi",
            text="all fine",
            agents=AGENTS,
            kind="notice",
            reply_to=task,
            dedup_key=key,
        )
    assert refused.value.code == "invalid_dedup_key"
    # ... and even a row written past the tools, with the old notice's key, suppresses nothing.
    forged = {
        "id": insert_message(
            conn,
            sender="claude",
            recipient="kimi",
            text="all fine",
            kind="notice",
            reply_to=task,
            dedup_key=key,
            created_at=time.time(),
        )
    }
    assert settle(conn, task, fallback="failed") == "failed"
    notices = _notices(conn)
    assert [n["id"] for n in notices if n["id"] != forged["id"]], "the real notice was suppressed"
    real = [n for n in notices if n["id"] != forged["id"]]
    assert len(real) == 1
    assert (real[0]["origin"], real[0]["dedup_key"], real[0]["reply_to"]) == ("system", None, task)
    assert "failed" in real[0]["text"]
    assert conn.execute("SELECT origin FROM messages WHERE id = ?", (forged["id"],)).fetchone()[0] == "agent"
