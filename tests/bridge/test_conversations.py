"""Bounded conversations over MCP: pairing, turns, expiry, and every state transition. The tools' logic
is checked, so the module's claude and kimi servers run in this process (the SDK's in-memory client)."""

import pytest
from harness import db_snapshot, sql

from dispatcher.bridge.conversations import opens_conversation

pytestmark = pytest.mark.both_backends
IN_PROCESS_SERVERS = True  # tests/conftest.py's pair


def start(claude, **kw):
    kw.setdefault("goal", "make the parser faster")
    return claude.ok("start_conversation", recipient="kimi", **kw)


def status(agent, cid):
    return agent.ok("conversation", action="status", conversation_id=cid)


def test_start_posts_root_task_as_turn_one(claude, kimi):
    conv = start(claude, max_turns=4)
    root = kimi.ok("get_message", message_id=conv["message_id"])
    assert (root["kind"], root["conversation_id"], root["sender"]) == ("task", conv["conversation_id"], "claude")
    st = status(kimi, conv["conversation_id"])
    assert (st["state"], st["turn_count"], st["max_turns"]) == ("active", 1, 4)
    assert st["in_flight"] == {"id": conv["message_id"], "kind": "task", "sender": "claude", "recipient": "kimi"}
    # Status never carries the goal or any text.
    assert "parser" not in str(st)


def test_start_clamps_and_dedups(claude):
    conv = start(claude, max_turns=99, expires_in_seconds=5, dedup_key="conv-dedup")
    assert conv["max_turns"] == 20
    again = start(claude, dedup_key="conv-dedup")
    assert again == {"conversation_id": conv["conversation_id"], "message_id": conv["message_id"], "duplicate": True}
    assert start(claude, max_turns=1)["max_turns"] == 2


def test_start_with_a_dedup_key_a_plain_message_used_is_a_conflict(claude, kimi):
    """start_conversation with a dedup_key already used by a plain message, or by a later task of a
    conversation, is refused as dedup_conflict: answering duplicate would name a conversation that
    does not exist (or one this goal did not start) and drop the goal."""
    plain = claude.ok("send_message", recipient="kimi", text="plain", dedup_key="shared-key")
    refused = claude.call("start_conversation", recipient="kimi", goal="a goal", dedup_key="shared-key")
    assert refused.code == "dedup_conflict" and f"#{plain['id']}" in refused.text
    conv = start(claude)
    res = kimi.ok("send_message", recipient="claude", text="r", kind="result", reply_to=conv["message_id"])
    follow = claude.ok("send_message", recipient="kimi", text="t", kind="task", reply_to=res["id"], dedup_key="k2")
    assert follow["conversation_id"] == conv["conversation_id"]
    assert claude.call("start_conversation", recipient="kimi", goal="g", dedup_key="k2").code == "dedup_conflict"


@pytest.mark.parametrize(
    ("kind", "conversation_id", "reply_to", "opens"),
    [
        ("task", 7, None, True),  # a conversation's opening task
        ("task", 7, 3, False),  # a follow-up task answers a result
        ("result", 7, 2, False),
        ("notice", 7, None, False),
        (None, None, None, False),  # a plain message
        ("task", None, None, False),  # a standalone task
    ],
)
def test_which_message_opens_a_conversation(kind, conversation_id, reply_to, opens):
    assert opens_conversation(kind, conversation_id, reply_to) is opens


def test_full_exchange_then_complete(claude, kimi):
    conv = start(claude)
    cid, root = conv["conversation_id"], conv["message_id"]
    res = kimi.ok("send_message", recipient="claude", text="done step 1", kind="result", reply_to=root)
    assert res["conversation_id"] == cid  # inherited from reply_to
    follow = claude.ok("send_message", recipient="kimi", text="now step 2", kind="task", reply_to=res["id"])
    res2 = kimi.ok("send_message", recipient="claude", text="done step 2", kind="result", reply_to=follow["id"])
    assert status(claude, cid)["turn_count"] == 4
    done = claude.ok("conversation", action="complete", conversation_id=cid)
    assert done["state"] == "completed" and done["changed"] is True
    # Repeating is a no-op; another terminal state is refused; the dialogue takes nothing more.
    assert claude.ok("conversation", action="complete", conversation_id=cid)["changed"] is False
    assert kimi.call("conversation", action="cancel", conversation_id=cid).code == "invalid_transition"
    refused = kimi.call("send_message", recipient="claude", text="more", kind="result", reply_to=res2["id"])
    assert refused.code == "conversation_not_active"
    assert [t["to_state"] for t in status(kimi, cid)["transitions"]] == ["active", "completed"]


def test_pairing_rules(claude, kimi, db_path):
    conv = start(claude)
    cid, root = conv["conversation_id"], conv["message_id"]
    before = db_snapshot(db_path)
    # The initiator cannot answer its own task; a task cannot answer a task.
    assert claude.call("send_message", recipient="kimi", text="x", kind="result", reply_to=root).code in (
        "not_in_turn",
        "wrong_recipient",
    )
    assert kimi.call("send_message", recipient="claude", text="x", kind="task", reply_to=root).code == "not_in_turn"
    # Results must name the in-flight message.
    assert (
        kimi.call("send_message", recipient="claude", text="x", kind="result", conversation_id=cid).code
        == "not_in_turn"
    )
    assert db_snapshot(db_path) == before
    res = kimi.ok("send_message", recipient="claude", text="r", kind="result", reply_to=root)
    # Only one in flight: a second result to the same task is refused.
    assert kimi.call("send_message", recipient="claude", text="r2", kind="result", reply_to=root).code == "not_in_turn"
    # A plain message in a conversation is refused; a plain reply never joins it.
    assert claude.call("send_message", recipient="kimi", text="p", conversation_id=cid).code == "kind_required"
    plain = claude.ok("send_message", recipient="kimi", text="plain", reply_to=res["id"])
    assert plain["conversation_id"] is None
    # Notices take no turn and need no pairing.
    claude.ok("send_message", recipient="kimi", text="fyi", kind="notice", conversation_id=cid)
    assert status(claude, cid)["turn_count"] == 2


def test_turn_limit_moves_to_needs_human(claude, kimi):
    conv = start(claude, max_turns=2)
    cid = conv["conversation_id"]
    res = kimi.ok("send_message", recipient="claude", text="r", kind="result", reply_to=conv["message_id"])
    refused = claude.call("send_message", recipient="kimi", text="again", kind="task", reply_to=res["id"])
    assert refused.code == "turn_limit_reached"
    st = status(claude, cid)
    assert st["state"] == "needs_human" and st["turn_count"] == 2
    assert st["transitions"][-1]["reason"] == "turn_limit"
    assert claude.call("conversation", action="complete", conversation_id=cid).code == "invalid_transition"
    assert claude.ok("conversation", action="needs_human", conversation_id=cid)["changed"] is False
    assert claude.ok("conversation", action="cancel", conversation_id=cid)["state"] == "cancelled"


@pytest.mark.parametrize("max_turns", [3, 5])
def test_a_task_needs_a_turn_left_for_its_result(claude, kimi, max_turns):
    """The budget rule: with an odd budget the last turn would be a task nobody could answer,
    so that task is refused and the reviewer's decision goes to a human instead."""
    conv = start(claude, max_turns=max_turns)
    cid, task = conv["conversation_id"], conv["message_id"]
    while True:
        res = kimi.ok("send_message", recipient="claude", text="r", kind="result", reply_to=task)
        sent = claude.call("send_message", recipient="kimi", text="next", kind="task", reply_to=res["id"])
        if sent.code is not None:
            break
        task = sent.data["id"]
    assert sent.code == "turn_limit_reached" and "result" in sent.text
    st = status(claude, cid)
    # Every task got its result; the turn left over is never a task without one.
    assert (st["state"], st["turn_count"], st["in_flight"]["kind"]) == ("needs_human", max_turns - 1, "result")
    assert st["transitions"][-1]["reason"] == "turn_limit"


def test_an_even_budget_is_used_to_the_last_turn(claude, kimi):
    conv = start(claude, max_turns=4)
    res = kimi.ok("send_message", recipient="claude", text="r", kind="result", reply_to=conv["message_id"])
    task = claude.ok("send_message", recipient="kimi", text="next", kind="task", reply_to=res["id"])
    kimi.ok("send_message", recipient="claude", text="r2", kind="result", reply_to=task["id"])
    st = status(claude, conv["conversation_id"])
    assert (st["state"], st["turn_count"]) == ("active", 4)


def test_expiry_settles_when_touched(claude, kimi, db_path):
    conv = start(claude)
    cid = conv["conversation_id"]
    sql(db_path, "UPDATE conversations SET expires_at = expires_at - 20000 WHERE id = ?", (cid,))
    refused = kimi.call("send_message", recipient="claude", text="late", kind="result", reply_to=conv["message_id"])
    assert refused.code == "conversation_expired"
    assert status(kimi, cid)["state"] == "expired"
    assert claude.call("conversation", action="cancel", conversation_id=cid).code == "invalid_transition"


def test_expiry_on_status(claude, db_path):
    cid = start(claude)["conversation_id"]
    sql(db_path, "UPDATE conversations SET expires_at = 0 WHERE id = ?", (cid,))
    assert status(claude, cid)["state"] == "expired"


@pytest.mark.parametrize("state", ["active", "blocked", "needs_human"])
def test_cancel_from_each_allowed_state(claude, kimi, db_path, state):
    cid = start(claude)["conversation_id"]
    sql(db_path, "UPDATE conversations SET state = ? WHERE id = ?", (state, cid))
    assert kimi.ok("conversation", action="cancel", conversation_id=cid)["state"] == "cancelled"
    assert claude.ok("conversation", action="cancel", conversation_id=cid)["changed"] is False


def test_blocked_refuses_complete_and_sends(claude, kimi, db_path):
    conv = start(claude)
    cid = conv["conversation_id"]
    sql(db_path, "UPDATE conversations SET state = 'blocked' WHERE id = ?", (cid,))
    assert claude.call("conversation", action="complete", conversation_id=cid).code == "invalid_transition"
    refused = kimi.call("send_message", recipient="claude", text="r", kind="result", reply_to=conv["message_id"])
    assert refused.code == "conversation_not_active"


def test_outsiders_and_bad_actions(claude, kimi, db_path):
    cid = start(claude)["conversation_id"]
    assert claude.call("conversation", action="explode", conversation_id=cid).code == "invalid_action"
    assert claude.call("conversation", action="status", conversation_id=10**9).code == "conversation_not_found"
    sql(db_path, "UPDATE conversations SET initiator = 'other' WHERE id = ?", (cid,))
    assert claude.call("conversation", action="status", conversation_id=cid).code == "conversation_not_found"
    assert claude.call("start_conversation", recipient="kimi", goal="").code == "empty_text"
    assert claude.call("start_conversation", recipient="claude", goal="x").code == "unknown_recipient"
