"""Broadcast (`send_message(recipient="*", kind="notice")`): the rule case by case, then on a real
store (copies, dedup across the set, refusals that write nothing, one transaction, the dispatch
rule, conversations, prune, the upgrade from schema 4), then over real stdio."""

import sqlite3

import pytest
from harness import (
    V4_TABLES,
    McpAgent,
    assert_rows_kept,
    bridge_env,
    db_snapshot,
    race,
    store_from_fixture,
    table_rows,
    write_config,
)

from dispatcher.bridge import broadcast, conversations, messages
from dispatcher.core.config import AgentConfig, BridgeConfig
from dispatcher.core.errors import BridgeError
from dispatcher.dispatch import queue
from dispatcher.ops import prune as pr
from dispatcher.store import INTEGRITY_ERRORS, SCHEMA_VERSION, open_store

pytestmark = pytest.mark.both_backends

NOW = 1_800_000_000.0
DAY = 86400.0
AGENTS = frozenset({"claude", "kimi", "codex"})


def send(conn, sender="kimi", recipient="*", text="heads up", agents=AGENTS, now=NOW, kind="notice", **kw) -> dict:
    return messages.send_message(
        conn, sender=sender, recipient=recipient, text=text, agents=agents, now=now, kind=kind, **kw
    )


def refused(code: str, fn, *args, **kw) -> BridgeError:
    with pytest.raises(BridgeError) as info:
        fn(*args, **kw)
    assert info.value.code == code, info.value
    return info.value


# --- the rule, case by case -------------------------------------------------------------------


def test_a_notice_without_reply_or_conversation_is_a_broadcast():
    assert broadcast.broadcast_refusal("notice", None, None) is None


@pytest.mark.parametrize("kind, named", [("task", "'task'"), ("result", "'result'"), (None, "a plain message")])
def test_any_other_kind_is_refused_and_told_to_use_notice(kind, named):
    text = broadcast.broadcast_refusal(kind, None, None)
    assert named in text and "kind='notice'" in text and "Nothing was sent" in text


def test_reply_to_is_refused():
    text = broadcast.broadcast_refusal("notice", 3, None)
    assert "drop reply_to" in text and "Nothing was sent" in text


def test_conversation_id_is_refused():
    text = broadcast.broadcast_refusal("notice", None, 3)
    assert "drop conversation_id" in text and "Nothing was sent" in text


def test_recipients_are_every_other_declared_agent_sorted():
    assert broadcast.broadcast_recipients("kimi", {"kimi", "codex", "claude"}) == ["claude", "codex"]
    assert broadcast.broadcast_recipients("kimi", {"kimi", "claude"}) == ["claude"]


def test_a_config_with_only_the_sender_has_nobody_to_send_to():
    err = refused("no_recipients", broadcast.broadcast_recipients, "solo", {"solo"})
    assert "nothing was sent" in err.message and "config.json" in err.message


# --- on a real store --------------------------------------------------------------------------


def test_one_notice_copy_per_other_agent_sharing_a_broadcast_id(conn):
    sent = send(conn, response_timeout_seconds=60)
    assert sent["duplicate"] is False and sent["recipients"] == ["claude", "codex"] and len(sent["ids"]) == 2
    rows = conn.execute("SELECT * FROM messages ORDER BY id").fetchall()
    assert [r["id"] for r in rows] == sent["ids"]
    for row in rows:
        assert (row["sender"], row["kind"], row["text"], row["origin"]) == ("kimi", "notice", "heads up", "agent")
        assert row["broadcast_id"] == sent["broadcast_id"]
        assert row["reply_to"] is None and row["conversation_id"] is None and row["dedup_key"] is None
        assert row["response_deadline"] == NOW + 60
    assert [tuple(r) for r in conn.execute("SELECT id, sender, dedup_key FROM broadcasts")] == [
        (sent["broadcast_id"], "kimi", None)
    ]


def test_the_only_other_agent_gets_the_only_copy(conn):
    sent = send(conn, agents={"kimi", "claude"})
    assert sent["recipients"] == ["claude"] and len(sent["ids"]) == 1


def test_a_sender_missing_from_config_reaches_every_declared_agent(conn):
    assert send(conn, sender="gemini")["recipients"] == ["claude", "codex", "kimi"]


def test_single_agent_config_is_refused_and_writes_nothing(conn, tmp_path):
    before = db_snapshot(tmp_path / "bridge.db")
    refused("no_recipients", send, conn, sender="solo", agents={"solo"})
    assert db_snapshot(tmp_path / "bridge.db") == before


def _other_rows(conn):
    task = send(conn, recipient="claude", kind="task", text="t")["id"]
    conv = conversations.start_conversation(
        conn, initiator="kimi", recipient="claude", goal="g", agents=AGENTS, max_body_bytes=10_000, now=NOW
    )
    return task, conv


@pytest.mark.parametrize(
    "args, code",
    [
        ({"kind": "task"}, "invalid_broadcast"),
        ({"kind": "result"}, "invalid_broadcast"),
        ({"kind": None}, "invalid_broadcast"),
        ({"kind": "notice", "reply_to": "TASK"}, "invalid_broadcast"),
        ({"kind": "notice", "conversation_id": "CONV"}, "invalid_broadcast"),
        ({"kind": "notice", "reply_to": "TASK", "conversation_id": "CONV"}, "invalid_broadcast"),
        ({"kind": "notice", "dedup_key": "agent-bridge:x"}, "invalid_dedup_key"),
        ({"kind": "notice", "reply_to": True}, "invalid_message_id"),
        ({"kind": "bogus"}, "invalid_kind"),
    ],
)
def test_refusals_write_nothing(conn, tmp_path, args, code):
    task, conv = _other_rows(conn)
    swap = {"TASK": task, "CONV": conv["conversation_id"]}
    args = {k: swap.get(v, v) if isinstance(v, str) else v for k, v in args.items()}
    before = db_snapshot(tmp_path / "bridge.db")
    err = refused(code, send, conn, **args)
    assert str(err)
    assert db_snapshot(tmp_path / "bridge.db") == before


def test_a_repeated_dedup_key_returns_the_same_set(conn):
    first = send(conn, kind="notice", dedup_key="deploy-1")
    again = send(conn, kind="notice", dedup_key="deploy-1", text="changed text", now=NOW + 5)
    assert again == {**first, "duplicate": True}
    assert conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 2
    assert conn.execute("SELECT COUNT(*) FROM broadcasts").fetchone()[0] == 1
    # A key is the sender's own: another agent's broadcast with it is a new set.
    other = send(conn, sender="claude", kind="notice", dedup_key="deploy-1")
    assert other["broadcast_id"] != first["broadcast_id"] and other["duplicate"] is False


def test_a_key_of_a_direct_message_cannot_name_a_broadcast(conn, tmp_path):
    direct = send(conn, recipient="claude", kind="notice", dedup_key="k1")
    before = db_snapshot(tmp_path / "bridge.db")
    err = refused("dedup_conflict", send, conn, kind="notice", dedup_key="k1")
    assert f"message #{direct['id']}" in err.message and "Pick a new dedup_key" in err.message
    assert db_snapshot(tmp_path / "bridge.db") == before


@pytest.mark.parametrize("direct", ["message", "conversation"])
def test_a_key_of_a_broadcast_cannot_name_a_direct_message(conn, tmp_path, direct):
    sent = send(conn, kind="notice", dedup_key="k2")
    before = db_snapshot(tmp_path / "bridge.db")
    if direct == "message":
        err = refused("dedup_conflict", send, conn, recipient="claude", kind="notice", dedup_key="k2")
    else:
        err = refused(
            "dedup_conflict",
            conversations.start_conversation,
            conn,
            initiator="kimi",
            recipient="claude",
            goal="g",
            agents=AGENTS,
            max_body_bytes=10_000,
            dedup_key="k2",
            now=NOW,
        )
    assert f"broadcast #{sent['broadcast_id']}" in err.message and "Pick a new dedup_key" in err.message
    assert db_snapshot(tmp_path / "bridge.db") == before


@pytest.mark.sqlite_only("a temporary trigger and a snapshot of the SQLite file inject and check the failure")
def test_every_copy_or_none_one_transaction(conn, tmp_path):
    before = db_snapshot(tmp_path / "bridge.db")
    conn.execute(
        "CREATE TEMP TRIGGER fail_second BEFORE INSERT ON main.messages WHEN NEW.recipient = 'codex'"
        " BEGIN SELECT RAISE(ABORT, 'injected'); END"
    )
    with pytest.raises(sqlite3.IntegrityError):
        send(conn, kind="notice", dedup_key="k3")
    conn.execute("DROP TRIGGER temp.fail_second")
    assert not conn.in_transaction
    assert db_snapshot(tmp_path / "bridge.db") == before
    assert send(conn, kind="notice", dedup_key="k3")["duplicate"] is False  # the key was not spent


def test_views_show_the_broadcast_id(conn):
    sent = send(conn, kind="notice")
    direct = send(conn, recipient="claude", text="direct")
    inbox = messages.receive_messages(conn, agent="claude", worker_id="w", now=NOW)["messages"]
    assert [(m["id"], m["broadcast_id"]) for m in inbox] == [
        (sent["ids"][0], sent["broadcast_id"]),
        (direct["id"], None),
    ]
    for agent in ("claude", "kimi"):  # recipient and sender both see it
        view = messages.get_message(conn, agent=agent, worker_id="w", message_id=sent["ids"][0], now=NOW)
        assert view["broadcast_id"] == sent["broadcast_id"] and view["kind"] == "notice"
    refused(
        "message_not_found",
        messages.get_message,
        conn,
        agent="codex",
        worker_id="w",
        message_id=sent["ids"][0],
        now=NOW,
    )


def _config(**auto) -> BridgeConfig:
    return BridgeConfig(
        agents={a: AgentConfig(launcher="launchers/command_headless.sh", auto=auto.get(a, True)) for a in AGENTS}
    )


def test_a_broadcast_never_wakes_a_headless_worker(conn):
    config = _config()
    sent = send(conn, kind="notice")
    for message_id, agent in zip(sent["ids"], sent["recipients"], strict=True):
        facts = queue.message_facts(conn, message_id, NOW, config)
        assert queue.dispatch_refusal(facts, NOW, config, manual=False) == "not_dispatchable"
        assert queue.dispatch_refusal(facts, NOW, config, manual=True) == "not_dispatchable"
        assert queue.next_dispatchable(conn, agent, config, NOW) is None
        assert queue.classify(conn, agent, config, NOW).dispatchable == []
    # The same store does dispatch a task (the rule above is not vacuous).
    task = send(conn, recipient="claude", kind="task", text="t")
    assert queue.next_dispatchable(conn, "claude", config, NOW).message_id == task["id"]


def test_a_broadcast_takes_no_conversation_turn(conn):
    conv = conversations.start_conversation(
        conn, initiator="kimi", recipient="claude", goal="g", agents=AGENTS, max_body_bytes=10_000, now=NOW
    )
    before = tuple(conn.execute("SELECT * FROM conversations").fetchone())
    for sender in ("kimi", "claude"):
        send(conn, sender=sender, kind="notice", now=NOW + 1)
    assert tuple(conn.execute("SELECT * FROM conversations").fetchone()) == before
    assert (
        conn.execute("SELECT COUNT(*) FROM messages WHERE conversation_id = ?", (conv["conversation_id"],)).fetchone()[
            0
        ]
        == 1
    )


# --- prune ------------------------------------------------------------------------------------


def _ack(conn, ids, at):
    conn.executemany("UPDATE messages SET acknowledged_at = ? WHERE id = ?", [(at, i) for i in ids])


@pytest.mark.parametrize("dry_run", [True, False])
def test_prune_removes_acknowledged_copies_then_the_orphaned_set(conn, dry_run):
    old = NOW - 40 * DAY
    done = send(conn, kind="notice", now=old, dedup_key="done")
    half = send(conn, kind="notice", now=old, dedup_key="half")
    recent = send(conn, kind="notice", now=NOW - 3600, dedup_key="recent")
    _ack(conn, done["ids"] + half["ids"][:1], old + 1)
    _ack(conn, recent["ids"], NOW - 3000)
    report = pr.prune(conn, 30 * DAY, now=NOW, dry_run=dry_run)
    assert (report.messages, report.broadcasts) == (3, 1)
    left = {r[0] for r in conn.execute("SELECT id FROM broadcasts")}
    kept = {r[0] for r in conn.execute("SELECT id FROM messages")}
    if dry_run:
        assert len(left) == 3 and len(kept) == 6
        return
    assert left == {half["broadcast_id"], recent["broadcast_id"]}
    assert kept == set(half["ids"][1:] + recent["ids"])
    if isinstance(conn, sqlite3.Connection):  # (PostgreSQL checks its keys and pages on every write)
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    # A partly pruned set still answers its dedup key with the copies left.
    again = send(conn, kind="notice", dedup_key="half")
    assert again["duplicate"] is True and again["ids"] == half["ids"][1:]
    # Once the set is gone its key is free again, like a pruned direct message's.
    assert send(conn, kind="notice", dedup_key="done")["duplicate"] is False


def test_a_set_row_is_never_deleted_under_a_copy(conn):
    sent = send(conn, kind="notice")
    with pytest.raises(INTEGRITY_ERRORS):
        conn.execute("DELETE FROM broadcasts WHERE id = ?", (sent["broadcast_id"],))


# --- the upgrade from schema 4 ----------------------------------------------------------------


def test_v4_store_upgrades_keeping_every_row(tmp_path):
    db = store_from_fixture(tmp_path / "store_v4.db", "store_v4", 4)
    before = table_rows(db, V4_TABLES)
    assert [len(before[t]) for t in V4_TABLES] == [6, 3, 1, 1, 1]

    conn = open_store(db)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION > 4
        assert_rows_kept(conn, before)
        assert conn.execute("SELECT COUNT(*) FROM messages WHERE broadcast_id IS NOT NULL").fetchone()[0] == 0
        assert conn.execute("SELECT COUNT(*) FROM broadcasts").fetchone()[0] == 0
        # The fixture's notice #6 used 'note-1' directly: it cannot name a broadcast now.
        refused("dedup_conflict", send, conn, kind="notice", dedup_key="note-1", agents={"kimi", "claude"})
        sent = send(conn, kind="notice", dedup_key="note-2", agents={"kimi", "claude"})
        assert sent["ids"] == [7] and sent["broadcast_id"] == 1
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        conn.close()


# --- over real stdio --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """kimi and claude on a two-agent store (each is the other's only recipient) and a server on a
    one-agent store, started together so their SDK imports overlap."""
    pair = tmp_path_factory.mktemp("pair")
    solo = tmp_path_factory.mktemp("solo")
    pair_env = bridge_env(pair, write_config(pair / "config.json"))
    solo_env = bridge_env(
        solo, write_config(solo / "config.json", {"solo": {"auto": True, "launcher": "launchers/command_headless.sh"}})
    )

    agents = [
        McpAgent("kimi", pair_env),
        McpAgent("claude", pair_env),
        McpAgent("solo", solo_env),
        McpAgent("kimi", pair_env),
    ]
    try:
        for agent in agents:
            agent.wait_ready()
        yield {a.agent: a for a in agents[:3]} | {
            "kimi_again": agents[3],
            "pair_db": pair / "state" / "bridge.db",
            "solo_db": solo / "state" / "bridge.db",
        }
    finally:
        for agent in agents:
            agent.close()


def test_stdio_broadcast_reaches_the_only_other_agent_once(servers):
    kimi, claude = servers["kimi"], servers["claude"]
    sent = kimi.ok("send_message", recipient="*", kind="notice", text="release at 5", dedup_key="rel-5")
    assert sent["recipients"] == ["claude"] and sent["duplicate"] is False
    again = kimi.ok("send_message", recipient="*", kind="notice", text="release at 5", dedup_key="rel-5")
    assert again == {**sent, "duplicate": True}
    inbox = claude.ok("receive_messages")["messages"]
    mine = [m for m in inbox if m["broadcast_id"] == sent["broadcast_id"]]
    assert [(m["id"], m["sender"], m["kind"], m["text"]) for m in mine] == [
        (sent["ids"][0], "kimi", "notice", "release at 5")
    ]
    assert kimi.ok("get_message", message_id=sent["ids"][0])["broadcast_id"] == sent["broadcast_id"]
    assert kimi.ok("receive_messages")["messages"] == []  # never a copy to the sender
    direct = kimi.call("send_message", recipient="claude", kind="notice", text="x", dedup_key="rel-5")
    assert direct.code == "dedup_conflict" and "broadcast #" in direct.text


@pytest.mark.parametrize(
    "arguments, code",
    [
        ({"recipient": "*", "kind": "task"}, "invalid_broadcast"),
        ({"recipient": "*"}, "invalid_broadcast"),
        ({"recipient": "*", "kind": "notice", "reply_to": 1}, "invalid_broadcast"),
        ({"recipient": "*", "kind": "notice", "conversation_id": 1}, "invalid_broadcast"),
        ({"recipient": True, "kind": "notice"}, "invalid_arguments"),
        ({"recipient": ["*"], "kind": "notice"}, "invalid_arguments"),
        ({"recipient": "*", "kind": True}, "invalid_arguments"),
        ({"recipient": "*", "kind": "notice", "dedup_key": 5}, "invalid_arguments"),
        ({"recipient": "*", "kind": "notice", "reply_to": True}, "invalid_arguments"),
        ({"recipient": "**", "kind": "notice"}, "unknown_recipient"),
        ({"recipient": " *", "kind": "notice"}, "unknown_recipient"),
    ],
)
def test_stdio_refusals_say_what_to_do_and_write_nothing(servers, arguments, code):
    before = db_snapshot(servers["pair_db"])
    result = servers["kimi"].call("send_message", text="t", **arguments)
    assert result.is_error and result.code == code, result.text
    assert len(result.text) > len(code) + 20
    assert db_snapshot(servers["pair_db"]) == before


def test_stdio_single_agent_config_has_nobody_to_send_to(servers):
    result = servers["solo"].call("send_message", recipient="*", kind="notice", text="anyone?")
    assert result.code == "no_recipients" and "config.json" in result.text
    assert [n for n, rows in db_snapshot(servers["solo_db"]) if rows and n in ("messages", "broadcasts")] == []


def test_stdio_send_message_docstring_names_broadcast(servers):
    tool = next(t for t in servers["kimi"].list_tools() if t.name == "send_message")
    assert "recipient='*'" in tool.description and "broadcast_id" in tool.description


def test_stdio_two_processes_racing_one_key_make_one_broadcast(servers):
    """Two server processes of the same agent send the same keyed broadcast at once: one set."""
    for attempt in range(5):  # until the calls really overlapped
        results, overlapped = race(
            [servers["kimi"], servers["kimi_again"]],
            "send_message",
            recipient="*",
            kind="notice",
            text="race",
            dedup_key=f"race-{attempt}",
        )
        first, second = (r.data for r in results)
        assert first["broadcast_id"] == second["broadcast_id"] and first["ids"] == second["ids"]
        assert sorted([first["duplicate"], second["duplicate"]]) == [False, True]
        if overlapped:
            break
    assert overlapped, "the two calls never overlapped"
