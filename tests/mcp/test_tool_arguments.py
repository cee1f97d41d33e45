"""Argument handling: strict ids and counts, dedup keys, the worker's tool set, odd stored times and
leases, late results. One claude and one kimi server serve the whole module, built in this process
behind the SDK's in-memory client (what is checked is the tools' logic; a raw stdio line and a
worker's server still run as processes)."""

import math
import time

import pytest
from harness import McpAgent, bridge_env, db_snapshot, on_backend, sql, write_config
from raw_jsonrpc import RawServer

from dispatcher.store.claims import LEASE_CAP_SECONDS

pytestmark = pytest.mark.both_backends
IN_PROCESS_SERVERS = True  # tests/conftest.py's pair

AGENTS = {
    "claude": {"auto": True, "launcher": "launchers/claude_headless.sh"},
    "kimi": {"auto": False, "launcher": "launchers/kimi_headless.sh"},
    "codex": {"auto": False, "launcher": "launchers/kimi_headless.sh"},
}


@pytest.fixture(scope="module")
def env(bridge_root, backend, request) -> dict[str, str]:
    return on_backend(bridge_env(bridge_root, write_config(bridge_root / "config.json", AGENTS)), backend, request)


@pytest.fixture(scope="module")
def first_task(kimi, claude) -> int:
    """Message #1, to claude: what a bool True or a "1" would have named."""
    task = kimi.ok("send_message", recipient="claude", text="the first message", kind="task")["id"]
    assert task == 1
    return task


# -- strict types -------------------------------------------------------------------------------

SEND = {"recipient": "kimi", "text": "typed"}
# (tool, parameter, other arguments): every id and count of every tool.
INT_PARAMS = [
    ("send_message", "reply_to", SEND),
    ("send_message", "response_timeout_seconds", SEND),
    ("send_message", "conversation_id", {**SEND, "kind": "task"}),
    ("receive_messages", "limit", {}),
    ("claim_message", "message_id", {}),
    ("claim_message", "lease_seconds", {"message_id": 1}),
    ("release_message", "message_id", {}),
    ("get_message", "message_id", {}),
    ("start_conversation", "max_turns", {"recipient": "kimi", "goal": "typed"}),
    ("start_conversation", "expires_in_seconds", {"recipient": "kimi", "goal": "typed"}),
    ("conversation", "conversation_id", {"action": "status"}),
]
OPTIONAL = {
    ("send_message", "reply_to"),
    ("send_message", "response_timeout_seconds"),
    ("send_message", "conversation_id"),
}  # null means "not given" there
BAD_INTS = [True, False, "1", 1.0, 1e0, 2.5, [1], [[1]], {"id": 1}, None]


def _refused_as_invalid_arguments(result, field: str) -> None:
    assert result.is_error and result.code == "invalid_arguments", result.text
    assert "\n" not in result.text and "http" not in result.text and "validation error" not in result.text
    assert f"{field}: " in result.text or f"{field}[" in result.text, result.text


@pytest.mark.parametrize("bad", BAD_INTS, ids=repr)
@pytest.mark.parametrize(("tool", "field", "others"), INT_PARAMS, ids=lambda p: p if isinstance(p, str) else "")
def test_ids_and_counts_accept_only_json_integers(claude, first_task, db_path, tool, field, others, bad):
    if bad is None and (tool, field) in OPTIONAL:
        pytest.skip("null is how an optional id is left out")
    before = db_snapshot(db_path)
    _refused_as_invalid_arguments(claude.call(tool, **others, **{field: bad}), field)
    assert db_snapshot(db_path) == before


@pytest.mark.parametrize("bad", [True, "1", None, [[1]], {"s": 1}], ids=repr)
def test_wait_seconds_accepts_only_numbers(claude, first_task, bad):
    _refused_as_invalid_arguments(claude.call("receive_messages", wait_seconds=bad), "wait_seconds")


@pytest.mark.parametrize("bad", [[True], ["1"], [1.0], [[1]], [None], True, "1", 1, None, "[1.0]"], ids=repr)
def test_mark_read_takes_a_list_of_integer_ids_only(claude, first_task, db_path, bad):
    before = db_snapshot(db_path)
    _refused_as_invalid_arguments(claude.call("mark_read", message_ids=bad), "message_ids")
    assert db_snapshot(db_path) == before
    assert sql(db_path, "SELECT acknowledged_at FROM messages WHERE id = ?", (first_task,)) == [(None,)]


def test_a_literal_1e0_id_is_refused_too(env, bridge_root, first_task, db_path):
    """1e0 is a JSON float whatever the client library sends; only a raw line shows it."""
    raw = RawServer(env, bridge_root / "raw.stderr")
    try:
        raw.send(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "0"},
                },
            }
        )
        raw.response(1)
        raw.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        before = db_snapshot(db_path)
        for request_id, arguments in ((2, '{"message_ids": [1e0]}'), (3, '{"message_ids": [1E0, 1]}')):
            raw.write(
                b'{"jsonrpc": "2.0", "id": %d, "method": "tools/call", "params": {"name": "mark_read",'
                b' "arguments": %s}}' % (request_id, arguments.encode())
            )
            result = raw.response(request_id)["result"]
            assert result["isError"] and result["content"][0]["text"].startswith("invalid_arguments: message_ids[0]: ")
        assert db_snapshot(db_path) == before
    finally:
        raw.close()


def test_valid_integers_still_work(claude, first_task):
    assert claude.ok("get_message", message_id=first_task)["id"] == first_task
    assert claude.ok("receive_messages", limit=5, wait_seconds=0)["messages"]
    assert claude.ok("receive_messages", limit=5, wait_seconds=0.01) is not None


# -- dedup keys ---------------------------------------------------------------------------------


def test_a_dedup_key_names_one_message_to_one_recipient(kimi, db_path):
    first = kimi.ok("send_message", recipient="claude", text="to claude", dedup_key="k-one")
    again = kimi.ok("send_message", recipient="claude", text="to claude", dedup_key="k-one")
    assert again["id"] == first["id"] and again["duplicate"] is True
    before = db_snapshot(db_path)
    other = kimi.call("send_message", recipient="codex", text="to codex", dedup_key="k-one", kind="task")
    assert other.code == "dedup_conflict", other.text
    assert f"#{first['id']} to claude" in other.text and "new dedup_key" in other.text
    assert db_snapshot(db_path) == before


def test_a_conversation_dedup_key_is_not_reused_for_another_recipient(kimi, db_path):
    first = kimi.ok("start_conversation", recipient="claude", goal="one goal", dedup_key="conv-key")
    assert kimi.ok("start_conversation", recipient="claude", goal="one goal", dedup_key="conv-key")["duplicate"]
    kimi.ok("send_message", recipient="claude", text="plain", dedup_key="plain-key")
    before = db_snapshot(db_path)
    other = kimi.call("start_conversation", recipient="codex", goal="one goal", dedup_key="conv-key")
    assert other.code == "dedup_conflict", other.text
    assert f"#{first['message_id']} to claude" in other.text
    # Nor a key first used by a plain send.
    assert kimi.call("start_conversation", recipient="codex", goal="g", dedup_key="plain-key").code == "dedup_conflict"
    assert db_snapshot(db_path) == before


@pytest.mark.parametrize("key", ["agent-bridge:dispatch-notice:1", "Agent-Bridge:anything", "agent-bridge:"])
def test_the_system_dedup_namespace_is_refused(kimi, db_path, key):
    before = db_snapshot(db_path)
    for tool, args in (
        ("send_message", {"recipient": "claude", "text": "forged", "kind": "notice"}),
        ("start_conversation", {"recipient": "claude", "goal": "forged"}),
    ):
        refused = kimi.call(tool, **args, dedup_key=key)
        assert refused.code == "invalid_dedup_key" and "reserved" in refused.text, refused.text
    assert db_snapshot(db_path) == before


def test_no_tool_writes_a_system_message(kimi, claude, db_path):
    """``origin`` is not an argument of any tool: naming it is refused, and nothing is written."""
    task = kimi.ok("send_message", recipient="claude", text="t", kind="task")["id"]
    attempts = [
        kimi.call("send_message", recipient="claude", text="t", kind="task", origin="system"),
        claude.call("send_message", recipient="kimi", text="n", kind="notice", reply_to=task, origin="system"),
        kimi.call("start_conversation", recipient="claude", goal="g", origin="system"),
    ]
    assert all(result.code == "invalid_arguments" and "origin" in result.text for result in attempts)
    assert claude.ok("get_message", message_id=task)["origin"] == "agent"
    assert sql(db_path, "SELECT count(*) FROM messages WHERE origin = 'system'") == [(0,)]


# -- tool sets ----------------------------------------------------------------------------------

SESSION_TOOLS = {
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
}


def test_a_session_server_offers_ten_tools(claude):
    tools = claude.list_tools()
    assert {t.name for t in tools} == SESSION_TOOLS and len(tools) == 10


def test_a_worker_server_has_no_listener_tool(env, bridge_root):
    worker = McpAgent("claude", {**env, "AGENT_BRIDGE_ROLE": "worker"}, bridge_root / "worker.stderr")
    try:
        tools = worker.list_tools()
        assert {t.name for t in tools} == SESSION_TOOLS - {"listener", "who"} and len(tools) == 8
        refused = worker.call("listener", action="disable")
        assert refused.code == "unknown_tool", refused.text
        # Started without its attempt (message id and token), it acts on nothing (tests/mcp/test_worker_scope.py).
        assert worker.call("receive_messages", limit=1).code == "worker_scope"
    finally:
        worker.close()
    assert not (bridge_root / "runtime" / "claude.disabled").exists()


# -- leases and times the clock could not have written ------------------------------------------


def _stored_lease(db_path, message_id: int) -> float:
    return sql(db_path, "SELECT claim_expires_at FROM messages WHERE id = ?", (message_id,))[0][0]


READERS = {
    "receive_messages": lambda claude, mid: claude.ok("receive_messages", limit=100),
    "get_message": lambda claude, mid: claude.ok("get_message", message_id=mid),
    "mark_read": lambda claude, mid: claude.ok("mark_read", message_ids=[mid]),
    "claim_message": lambda claude, mid: claude.call("claim_message", message_id=mid),
}


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("far", [time.time() + 10 * 365 * 86400, math.inf], ids=["ten-years-ahead", "inf"])
def test_a_far_future_lease_is_capped_for_good_when_first_read(kimi, claude, db_path, reader, far):
    task = kimi.ok("send_message", recipient="claude", text="leased far ahead", kind="task")["id"]
    sql(db_path, "UPDATE messages SET claim_owner = 'clock-ahead', claim_expires_at = ? WHERE id = ?", (far, task))
    before = time.time()
    READERS[reader](claude, task)
    capped = _stored_lease(db_path, task)
    assert before + LEASE_CAP_SECONDS <= capped <= time.time() + LEASE_CAP_SECONDS
    # Still someone else's lease for now (capped, not dropped): hidden and unclaimable ...
    assert task not in [m["id"] for m in claude.ok("receive_messages", limit=100)["messages"]]
    assert claude.call("claim_message", message_id=task).code == "claimed_by_other"
    assert claude.ok("mark_read", message_ids=[task])["skipped"] == [{"id": task, "reason": "claimed_by_other"}]
    # ... but the cap does not move with later reads: it ends an hour after it was first seen.
    assert _stored_lease(db_path, task) == capped
    sql(
        db_path,
        "UPDATE messages SET claim_expires_at = claim_expires_at - ? WHERE id = ?",
        (LEASE_CAP_SECONDS + 1, task),
    )  # the hour has passed
    assert claude.ok("claim_message", message_id=task)["renewed"] is False


def test_an_ordinary_lease_is_left_alone(kimi, claude, db_path):
    task = kimi.ok("send_message", recipient="claude", text="leased", kind="task")["id"]
    lease = claude.ok("claim_message", message_id=task, lease_seconds=3600)
    stored = _stored_lease(db_path, task)
    claude.ok("receive_messages", limit=100)
    claude.ok("get_message", message_id=task)
    assert _stored_lease(db_path, task) == stored and lease["renewed"] is False


ODD_TIMES = [1e300, -1e300, math.inf, -math.inf, math.nan]


@pytest.mark.parametrize("value", ODD_TIMES, ids=repr)
@pytest.mark.parametrize("column", ["created_at", "delivered_at", "claim_expires_at", "response_deadline"])
@pytest.mark.sqlite_only("it plants a text time, which a PostgreSQL column refuses at the write")
def test_an_out_of_range_time_does_not_break_the_inbox(kimi, claude, db_path, column, value):
    task = kimi.ok("send_message", recipient="claude", text=f"odd {column}", kind="task")["id"]
    if column == "created_at" and math.isnan(value):
        value = "not a time"  # SQLite stores NaN as NULL, which this column refuses; text is the odd case
    owner = "someone-else" if column == "claim_expires_at" else None
    sql(db_path, f"UPDATE messages SET {column} = ?, claim_owner = ? WHERE id = ?", (value, owner, task))
    inbox = claude.ok("receive_messages", limit=100)["messages"]
    looked_up = claude.ok("get_message", message_id=task)
    assert looked_up["id"] == task
    shown = [m for m in inbox if m["id"] == task]
    for view in (looked_up, *shown):
        for key in ("created_at", "response_deadline", "claim_expires_at"):
            assert view[key] is None or view[key].endswith("Z")
    if column != "claim_expires_at" or not value > time.time():  # an active lease hides it
        assert shown, f"#{task} vanished from the inbox"
    assert kimi.ok("get_message", message_id=task)["id"] == task


# -- late results -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("outcome", "late"),
    [("failed", True), ("timeout", True), ("crashed", True), ("succeeded", False), ("blocked", False)],
)
def test_a_result_after_a_non_success_verdict_shows_as_late(kimi, claude, db_path, outcome, late):
    task = kimi.ok("send_message", recipient="claude", text="do it", kind="task")["id"]
    early = claude.ok("send_message", recipient="kimi", text="on time", kind="result", reply_to=task)["id"]
    finished = time.time()
    sql(db_path, "UPDATE messages SET created_at = ? WHERE id = ?", (finished - 1, early))
    sql(
        db_path,
        "INSERT INTO dispatch_attempts (message_id, agent, state, outcome, started_at, finished_at)"
        " VALUES (?, 'claude', 'finished', ?, ?, ?)",
        (task, outcome, finished - 5, finished),
    )
    after = claude.ok("send_message", recipient="kimi", text="after all", kind="result", reply_to=task)["id"]
    claude.ok("send_message", recipient="kimi", text="a note", kind="notice", reply_to=task)
    dispatch = kimi.ok("get_message", message_id=task)["dispatch"]
    assert dispatch["outcome"] == outcome
    assert dispatch["late_result_ids"] == ([after] if late else [])


def test_an_attempt_still_running_has_no_late_results(kimi, claude, db_path):
    task = kimi.ok("send_message", recipient="claude", text="running", kind="task")["id"]
    sql(
        db_path,
        "INSERT INTO dispatch_attempts (message_id, agent, state, started_at) VALUES (?, 'claude', 'spawned', ?)",
        (task, time.time()),
    )
    claude.ok("send_message", recipient="kimi", text="done", kind="result", reply_to=task)
    assert kimi.ok("get_message", message_id=task)["dispatch"]["late_result_ids"] == []


# -- unknown argument names ---------------------------------------------------------------------


def test_an_unknown_argument_name_is_refused_naming_it(claude, db_path):
    """A misspelt argument (``knd`` for ``kind``) used to be dropped silently: the task became a
    plain note that never woke the recipient's listener."""
    before = db_snapshot(db_path)
    result = claude.call("send_message", recipient="kimi", text="do it", knd="task")
    assert result.is_error and result.code == "invalid_arguments", result.text
    assert "knd" in result.text and "kind" in result.text and "\n" not in result.text
    assert db_snapshot(db_path) == before


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("receive_messages", {"limt": 5}),
        ("get_message", {"message_id": 1, "verbose": True}),
        ("conversation", {"action": "status", "conversation_id": 1, "id": 1}),
        ("listener", {"action": "status", "agent": "kimi"}),
    ],
)
def test_every_tool_refuses_argument_names_it_does_not_have(claude, first_task, tool, arguments):
    result = claude.call(tool, **arguments)
    assert result.is_error and result.code == "invalid_arguments", result.text


def test_the_published_input_schemas_forbid_other_names(claude):
    assert all(tool.input_schema.get("additionalProperties") is False for tool in claude.list_tools())
