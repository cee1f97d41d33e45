"""Schema 3 -> 4: the ledger columns are added empty (an old Claude cost is carried over from its
diagnostics), conversations get max_cost_usd, and every row is kept as it was."""

import sqlite3

from harness import store_from_fixture

from dispatcher.bridge import conversations
from dispatcher.dispatch.control import agent_totals
from dispatcher.store import SCHEMA_VERSION, open_store

LEDGER = (
    "cli_status",
    "cost_usd",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "max_cost_usd",
    "cost_overshoot_usd",
)


def test_v3_migration_adds_the_ledger_and_keeps_every_row(tmp_path):
    db = store_from_fixture(tmp_path / "store_v3.db", "store_v3", 3)
    old = sqlite3.connect(db)
    before = {
        table: old.execute(f"SELECT * FROM {table} ORDER BY rowid").fetchall()
        for table in ("messages", "dispatch_attempts", "conversations", "conversation_transitions", "listeners")
    }
    old.close()
    assert [len(before[t]) for t in before] == [5, 3, 1, 1, 1]

    conn = open_store(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION >= 4
    for table, rows in before.items():
        after = conn.execute(f"SELECT * FROM {table} ORDER BY rowid").fetchall()
        assert [tuple(a)[: len(b)] for a, b in zip(after, rows, strict=True)] == rows, table
    attempts = {a["message_id"]: a for a in conn.execute("SELECT * FROM dispatch_attempts")}
    # The succeeded Claude attempt keeps its cost; the others have none; nothing else is invented.
    assert {k: attempts[1][k] for k in LEDGER} == {**dict.fromkeys(LEDGER), "cost_usd": 0.0123}
    assert all(attempts[i][k] is None for i in (3, 5) for k in LEDGER)
    assert conn.execute("SELECT max_cost_usd FROM conversations").fetchone()[0] is None
    status = conversations.conversation_action(
        conn, agent="kimi", action="status", conversation_id=1, now=1764500000.0 + 60
    )
    assert status["totals"] == {"attempts": 1, "cost_usd": 0.0123, "input_tokens": None, "output_tokens": None}
    assert agent_totals(conn, "claude", 1764500000.0 + 60)["today"]["attempts"] == 2
    indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert {"dispatch_attempts_by_agent", "messages_by_conversation"} <= indexes
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
