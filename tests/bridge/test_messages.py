"""The basic exchange and message tools, over real MCP stdio against real server.py processes."""

import json
import time

import pytest
from dispatch_harness import wait_until
from harness import McpAgent, bridge_env, db_snapshot, inotify_descriptors, server_pid, sql, write_config

from dispatcher.core.file_events import MODE_VARIABLE

pytestmark = pytest.mark.both_backends


def drain(agent):
    """Acknowledge everything waiting for ``agent`` so a test starts from an empty inbox."""
    while ids := [m["id"] for m in agent.ok("receive_messages", limit=100)["messages"]]:
        agent.ok("mark_read", message_ids=ids)


def test_basic_exchange_end_to_end(claude, kimi):
    drain(kimi), drain(claude)
    sent = claude.ok("send_message", recipient="kimi", text="review auth.py", kind="task", dedup_key="task-1")
    task_id = sent["id"]
    assert sent["duplicate"] is False

    inbox = kimi.ok("receive_messages")
    assert [m["id"] for m in inbox["messages"]] == [task_id]
    msg = inbox["messages"][0]
    assert (msg["sender"], msg["text"], msg["kind"]) == ("claude", "review auth.py", "task")
    assert inbox["cursor"] == task_id

    claim = kimi.ok("claim_message", message_id=task_id)
    assert claim["renewed"] is False and claim["lease_seconds"] == 300
    assert kimi.ok("receive_messages")["messages"][0]["owned_by_current_worker"] is True

    reply = kimi.ok(
        "send_message",
        recipient="claude",
        text="looks fine",
        kind="result",
        reply_to=task_id,
        dedup_key="task-1:result",
    )
    assert kimi.ok("mark_read", message_ids=[task_id]) == {"acknowledged": [task_id], "skipped": []}
    assert kimi.ok("receive_messages")["messages"] == []

    got = claude.ok("receive_messages")["messages"]
    assert [(m["id"], m["reply_to"], m["kind"]) for m in got] == [(reply["id"], task_id, "result")]
    seen = claude.ok("get_message", message_id=task_id)
    assert seen["acknowledged_at"] is not None and seen["delivered_at"] is not None
    assert seen["reply_ids"] == [reply["id"]]
    claude.ok("mark_read", message_ids=[reply["id"]])


def test_dedup_returns_existing_id_and_inserts_nothing(claude, db_path):
    first = claude.ok("send_message", recipient="kimi", text="once", dedup_key="dedup-x")
    before = db_snapshot(db_path)
    again = claude.ok("send_message", recipient="kimi", text="once", dedup_key="dedup-x")
    assert again["id"] == first["id"] and again["duplicate"] is True
    assert db_snapshot(db_path) == before


def test_sender_is_always_agent_id(claude, kimi):
    drain(kimi)
    sent = claude.ok("send_message", recipient="kimi", text="who am I")
    assert kimi.ok("get_message", message_id=sent["id"])["sender"] == "claude"
    # There is no argument that could name another sender: one that tries is refused, nothing sent.
    drain(kimi)
    refused = claude.call("send_message", recipient="kimi", text="x", sender="kimi")
    assert refused.is_error and "unknown argument sender" in refused.text
    assert kimi.ok("receive_messages", limit=50)["messages"] == []


@pytest.mark.parametrize(
    ("arguments", "code"),
    [
        ({"recipient": "bob", "text": "x"}, "unknown_recipient"),
        ({"recipient": "claude", "text": "to myself"}, "unknown_recipient"),
        ({"recipient": "kimi", "text": ""}, "empty_text"),
        ({"recipient": "kimi", "text": "   "}, "empty_text"),
        ({"recipient": "kimi", "text": "x" * 262145}, "text_too_large"),
        ({"recipient": "kimi", "text": "x", "reply_to": 999999}, "reply_to_not_found"),
        ({"recipient": "kimi", "text": "x", "reply_to": -3}, "invalid_message_id"),
        ({"recipient": "kimi", "text": "x", "kind": "order"}, "invalid_kind"),
        ({"recipient": "kimi", "text": "x", "dedup_key": "a\nb"}, "invalid_dedup_key"),
        ({"recipient": "kimi", "text": "x", "dedup_key": "a\u2028b"}, "invalid_dedup_key"),
        ({"recipient": "kimi", "text": "x", "response_timeout_seconds": -5}, "invalid_number"),
        ({"recipient": "kimi", "text": "x", "conversation_id": 1}, "kind_required"),
        ({"recipient": "kimi", "text": "x", "kind": "result"}, "result_without_task"),
        ({"recipient": "kimi", "text": 42}, "invalid_arguments"),
        ({"recipient": ["kimi"], "text": "x"}, "invalid_arguments"),
        ({"text": "x"}, "invalid_arguments"),
    ],
)
def test_bad_send_is_refused_with_code_and_changes_nothing(claude, db_path, arguments, code):
    before = db_snapshot(db_path)
    result = claude.call("send_message", **arguments)
    assert result.is_error and result.code == code, result.text
    assert db_snapshot(db_path) == before


def test_unknown_recipient_lists_valid_agents(claude):
    result = claude.call("send_message", recipient="bob", text="x")
    assert "kimi" in result.text


def test_any_unicode_body_round_trips(claude, kimi):
    drain(kimi)
    body = "naïve ✓ 漢字 \U0001f600 tab\tnew\nline \u2028 sep"
    sent = claude.ok("send_message", recipient="kimi", text=body)
    assert kimi.ok("get_message", message_id=sent["id"])["text"] == body


def test_response_deadline_is_clamped_metadata(claude):
    sent = claude.ok("send_message", recipient="kimi", text="soon", response_timeout_seconds=999999)
    created = time.mktime(time.strptime(sent["created_at"][:19], "%Y-%m-%dT%H:%M:%S"))
    deadline = time.mktime(time.strptime(sent["response_deadline"][:19], "%Y-%m-%dT%H:%M:%S"))
    assert deadline - created == pytest.approx(3600, abs=1)


def test_mark_read_reports_skips(claude, kimi):
    drain(kimi)
    mine = claude.ok("send_message", recipient="kimi", text="a")["id"]
    own_sent = kimi.ok("send_message", recipient="claude", text="b")["id"]
    result = kimi.ok("mark_read", message_ids=[mine, mine, own_sent, 987654])
    assert result["acknowledged"] == [mine]
    assert {s["id"]: s["reason"] for s in result["skipped"]} == {own_sent: "not_recipient", 987654: "not_found"}
    assert kimi.ok("mark_read", message_ids=[mine])["skipped"] == [{"id": mine, "reason": "already_acknowledged"}]
    assert kimi.call("mark_read", message_ids=[]).code == "invalid_message_ids"
    claude.ok("mark_read", message_ids=[own_sent])


def test_get_message_refuses_outsiders(claude, kimi, env, db_path):
    sql(db_path, "INSERT INTO messages (sender, recipient, text, created_at) VALUES ('kimi', 'kimi2', 'x', 0)")
    foreign = sql(db_path, "SELECT max(id) FROM messages")[0][0]
    assert kimi.call("get_message", message_id=foreign).is_error is False
    result = claude.call("get_message", message_id=foreign)
    assert result.code == "message_not_found" and "x" not in result.text.split(":", 1)[1].split()


def test_claim_rules(claude, kimi, db_path):
    drain(kimi)
    task = claude.ok("send_message", recipient="kimi", text="claim me", kind="task")["id"]
    assert claude.call("claim_message", message_id=task).code == "not_recipient"
    assert kimi.ok("claim_message", message_id=task, lease_seconds=5)["lease_seconds"] == 30  # clamped up
    renewed = kimi.ok("claim_message", message_id=task, lease_seconds=99999)
    assert renewed["renewed"] is True and renewed["lease_seconds"] == 3600
    assert kimi.call("claim_message", message_id=task, lease_seconds=-1).code == "invalid_number"
    kimi.ok("release_message", message_id=task)
    assert kimi.call("release_message", message_id=task).code == "not_claimed_by_you"
    kimi.ok("mark_read", message_ids=[task])
    assert kimi.call("claim_message", message_id=task).code == "already_acknowledged"
    assert kimi.call("claim_message", message_id=10**9).code == "message_not_found"


def test_long_poll_waits_for_a_message_sent_after_it_began(claude, kimi):
    drain(kimi)
    pending = kimi.call_async("receive_messages", wait_seconds=25)
    # The server reads requests in order and serves them concurrently: once this later call is
    # answered, the poll has been read, is still waiting, and the inbox was empty after it began.
    assert kimi.ok("receive_messages")["messages"] == []
    assert not pending.done()
    sent_at = time.monotonic()
    sent = claude.ok("send_message", recipient="kimi", text="wake up")
    result = pending.result(60)
    answered_after = time.monotonic() - sent_at
    assert not result.is_error
    assert [(m["id"], m["text"]) for m in result.structured_content["messages"]] == [(sent["id"], "wake up")]
    # It came back with the message, not at the end of the 25 s wait.
    assert answered_after < 20, answered_after
    kimi.ok("mark_read", message_ids=[sent["id"]])


@pytest.mark.parametrize("mode", ["inotify", "poll"])
def test_a_long_poll_sleeps_on_the_store_s_file_events_and_wakes_on_a_send(tmp_path, mode):
    env = {**bridge_env(tmp_path, write_config(tmp_path / "config.json")), MODE_VARIABLE: mode}
    claude, kimi = McpAgent("claude", env).wait_ready(), McpAgent("kimi", env, fresh_interpreter=True).wait_ready()
    try:
        pid = server_pid("kimi", env["AGENT_BRIDGE_DB"])
        idle = inotify_descriptors(pid)  # the store handle's watch of its file names (none when polling)
        pending = kimi.call_async("receive_messages", wait_seconds=25)
        assert kimi.ok("receive_messages")["messages"] == []
        if mode == "inotify":  # the waiting call sleeps on a watch of its own, not on a poll interval
            wait_until(lambda: inotify_descriptors(pid) == idle + 1, what="the long-poll's inotify watch")
        assert not pending.done()
        sent = claude.ok("send_message", recipient="kimi", text="wake up")
        result = pending.result(60)
        assert not result.is_error
        assert [m["id"] for m in result.structured_content["messages"]] == [sent["id"]]
        wait_until(lambda: inotify_descriptors(pid) == idle, what="the long-poll's watch closed")
    finally:
        claude.close()
        kimi.close()


def test_long_poll_with_nothing_returns_empty(kimi):
    drain(kimi)
    assert kimi.ok("receive_messages", wait_seconds=0.3)["messages"] == []
    assert kimi.call("receive_messages", wait_seconds=-1).code == "invalid_number"


def test_tool_list_is_complete_and_compact(claude):
    tools = claude.list_tools()
    # A session server offers exactly the ten tools the README lists (a worker's lacks listener and who).
    assert sorted(t.name for t in tools) == sorted(
        [
            "send_message",
            "receive_messages",
            "claim_message",
            "release_message",
            "mark_read",
            "get_message",
            "start_conversation",
            "conversation",
            "listener",
            "who",
        ]
    )
    size = len(json.dumps([t.model_dump(mode="json", exclude_none=True) for t in tools]))
    assert size < 12000, size  # issue 10's bound on tools/list
