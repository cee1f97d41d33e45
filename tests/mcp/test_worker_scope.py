"""A worker's server acts only on its own attempt: over real MCP stdio against real server.py
processes, a worker-role server bound to one attempt (message id and attempt token), and
session servers of claude and kimi on the same store."""

import secrets
import time

import pytest
from dispatch_harness import record_attempt
from harness import McpAgent, sql

from dispatcher.core.config import load_config
from dispatcher.dispatch import queue
from dispatcher.dispatch.outcome import settle
from dispatcher.store import open_store

pytestmark = pytest.mark.both_backends


@pytest.fixture
def store(db_path):
    connection = open_store(db_path)
    yield connection
    connection.close()


def _attempt(store, config_path, message_id: int) -> str:
    """Record the attempt at ``message_id`` as a supervisor's barrier would; returns its token."""
    token = secrets.token_hex(16)
    record_attempt(store, message_id, load_config(config_path), token)
    return token


def _worker(env, bridge_root, message_id: int | None, token: str | None) -> McpAgent:
    bound = {"AGENT_BRIDGE_MESSAGE_ID": str(message_id or ""), "AGENT_BRIDGE_WORKER_TOKEN": token or ""}
    return McpAgent("claude", {**env, "AGENT_BRIDGE_ROLE": "worker", **bound}, bridge_root / "worker.stderr")


def _review_turn_worker(env, bridge_root, config_path, store, kimi, claude) -> tuple[dict, int, McpAgent]:
    """A conversation kimi started, claude's result (kimi's review turn) with its attempt recorded,
    and kimi's worker server bound to that attempt."""
    conv = kimi.ok("start_conversation", recipient="claude", goal="g", max_turns=4)
    result = claude.ok("send_message", recipient="kimi", text="step 1", kind="result", reply_to=conv["message_id"])[
        "id"
    ]
    token = _attempt(store, config_path, result)
    bound = {"AGENT_BRIDGE_ROLE": "worker", "AGENT_BRIDGE_MESSAGE_ID": str(result), "AGENT_BRIDGE_WORKER_TOKEN": token}
    return conv, result, McpAgent("kimi", {**env, **bound}, bridge_root / "worker.stderr")


def _unacknowledged(db_path, message_id: int) -> bool:
    return sql(db_path, "SELECT acknowledged_at FROM messages WHERE id = ?", (message_id,))[0][0] is None


def test_a_worker_cannot_touch_another_task_or_start_a_chain(env, bridge_root, db_path, config_path, store, kimi):
    """Today a worker's server hides only `listener` and `who`: steered by its task text, it could
    acknowledge, claim or release any task of its agent (which then never gets an attempt, an
    outcome or a notice), cancel the agent's conversations and send new tasks. Bound to its
    attempt, everything outside it is refused with worker_scope and changes nothing."""
    mine = kimi.ok("send_message", recipient="claude", text="task for the worker", kind="task")["id"]
    other = kimi.ok("send_message", recipient="claude", text="someone else's task", kind="task")["id"]
    conv = kimi.ok("start_conversation", recipient="claude", goal="a conversation of claude's")
    token = _attempt(store, config_path, mine)
    worker = _worker(env, bridge_root, mine, token)
    try:
        hostile = [
            ("claim_message", {"message_id": other}),
            ("release_message", {"message_id": other}),
            ("mark_read", {"message_ids": [other]}),
            ("mark_read", {"message_ids": [mine, other]}),
            ("get_message", {"message_id": other}),
            ("send_message", {"recipient": "kimi", "text": "go on", "kind": "task"}),  # a new task
            ("send_message", {"recipient": "kimi", "text": "go on", "kind": "task", "reply_to": mine}),  # standalone
            ("send_message", {"recipient": "kimi", "text": "done", "kind": "result", "reply_to": other}),
            ("send_message", {"recipient": "*", "text": "hello all", "kind": "notice"}),
            ("start_conversation", {"recipient": "kimi", "goal": "a new chain"}),
            ("conversation", {"action": "cancel", "conversation_id": conv["conversation_id"]}),
            ("conversation", {"action": "status", "conversation_id": conv["conversation_id"]}),
        ]
        before = sql(db_path, "SELECT * FROM messages ORDER BY id")
        for tool, arguments in hostile:
            refused = worker.call(tool, **arguments)
            assert refused.code == "worker_scope", (tool, arguments, refused.text)
            assert "nothing was changed" in refused.text
        assert sql(db_path, "SELECT * FROM messages ORDER BY id") == before
        assert sql(db_path, "SELECT state FROM conversations WHERE id = ?", (conv["conversation_id"],)) == [("active",)]
        # Its reads see its own task only, not the agent's other mail.
        assert [m["id"] for m in worker.ok("receive_messages", limit=100)["messages"]] == [mine]
        # The other task is untouched: still dispatchable to a worker of its own.
        facts = queue.message_facts(store, other, time.time(), load_config(config_path))
        assert facts is not None and queue.dispatch_refusal(facts, time.time(), load_config(config_path), True) is None

        # Its own task: the whole protocol works, and the result records the attempt.
        assert worker.ok("claim_message", message_id=mine)["renewed"] is True  # the barrier's claim is its own
        result = worker.ok("send_message", recipient="kimi", text="done", kind="result", reply_to=mine)["id"]
        assert worker.ok("mark_read", message_ids=[mine])["acknowledged"] == [mine]
        assert sql(db_path, "SELECT sent_by_attempt FROM messages WHERE id = ?", (result,)) == [(mine,)]
        assert settle(store, mine, fallback="failed") == "succeeded"
        # A settled attempt's server acts on nothing any more.
        assert worker.call("get_message", message_id=mine).code == "worker_scope"
    finally:
        worker.close()
    assert _unacknowledged(db_path, other)


@pytest.mark.parametrize("binding", ["unbound", "wrong_token", "another_agents_attempt"])
def test_a_worker_server_without_its_attempts_token_acts_on_nothing(
    env, bridge_root, db_path, config_path, store, kimi, claude, binding
):
    """A worker-role server that cannot prove its attempt (no message id or token, a token that is
    not the attempt's, an attempt of another agent) is refused every tool with worker_scope."""
    task = kimi.ok("send_message", recipient="claude", text="task", kind="task")["id"]
    for_kimi = claude.ok("send_message", recipient="kimi", text="task", kind="task")["id"]
    token = _attempt(store, config_path, task)
    kimi_token = _attempt(store, config_path, for_kimi)
    message_id, used = {
        "unbound": (None, None),
        "wrong_token": (task, secrets.token_hex(16)),
        "another_agents_attempt": (for_kimi, kimi_token),
    }[binding]
    worker = _worker(env, bridge_root, message_id, used)
    try:
        for tool, arguments in (
            ("receive_messages", {}),
            ("get_message", {"message_id": task}),
            ("claim_message", {"message_id": task}),
            ("mark_read", {"message_ids": [task]}),
            ("send_message", {"recipient": "kimi", "text": "done", "kind": "result", "reply_to": task}),
        ):
            assert worker.call(tool, **arguments).code == "worker_scope", (binding, tool)
    finally:
        worker.close()
    assert _unacknowledged(db_path, task) and token


def test_a_review_worker_takes_its_turn_inside_the_conversation_only(
    env, bridge_root, db_path, config_path, store, kimi, claude
):
    """A worker may send a task only as the next turn of its message's conversation, where the turn
    budget counts it: no worker can start an unbounded chain of tasks."""
    conv, result, worker = _review_turn_worker(env, bridge_root, config_path, store, kimi, claude)
    try:
        status = worker.ok("conversation", action="status", conversation_id=conv["conversation_id"])
        assert status["turn_count"] == 2
        follow = worker.ok("send_message", recipient="claude", text="step 2", kind="task", reply_to=result)
        assert follow["conversation_id"] == conv["conversation_id"]
        status = worker.ok("conversation", action="status", conversation_id=conv["conversation_id"])
        assert status["turn_count"] == 3  # counted against the conversation's budget
        assert worker.ok("mark_read", message_ids=[result])["acknowledged"] == [result]
        assert settle(store, result, fallback="failed") == "succeeded"
    finally:
        worker.close()


@pytest.mark.parametrize("decided_by", ["worker", "session"])
def test_a_review_turns_decision_counts_only_when_its_worker_took_it(
    env, bridge_root, db_path, config_path, store, kimi, claude, decided_by
):
    """Evidence belongs to the attempt: a conversation completed by a session of the same agent
    during a review turn is not that turn's decision (it used to count as the worker's success)."""
    conv, result, worker = _review_turn_worker(env, bridge_root, config_path, store, kimi, claude)
    try:
        decider = worker if decided_by == "worker" else kimi
        assert decider.ok("conversation", action="complete", conversation_id=conv["conversation_id"])["changed"]
        assert worker.ok("mark_read", message_ids=[result])["acknowledged"] == [result]
    finally:
        worker.close()
    by_attempt = sql(
        db_path,
        "SELECT by_attempt FROM conversation_transitions WHERE conversation_id = ? AND to_state = 'completed'",
        (conv["conversation_id"],),
    )
    assert by_attempt == [(result if decided_by == "worker" else None,)]
    expected = "succeeded" if decided_by == "worker" else "failed"
    assert settle(store, result, fallback="failed") == expected
