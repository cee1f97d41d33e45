"""Schema 2 -> 3: only the dispatcher's real old notices become system notices; every row is kept."""

import sqlite3

from harness import store_from_fixture

from dispatcher.store import SCHEMA_VERSION, open_store

REAL_OLD_NOTICE = 2  # the notice for failed attempt #1, keyed agent-bridge:dispatch-notice:1


def test_v2_migration_marks_only_the_real_old_notice_and_keeps_every_row(tmp_path):
    db = store_from_fixture(tmp_path / "store_v2.db", "store_v2", 2)
    old = sqlite3.connect(db)
    messages_before = {r[0]: r for r in old.execute("SELECT * FROM messages ORDER BY id")}
    attempts_before = old.execute("SELECT * FROM dispatch_attempts ORDER BY message_id").fetchall()
    old.close()
    assert len(messages_before) == 7 and len(attempts_before) == 2

    conn = open_store(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION >= 3
    after = {r["id"]: r for r in conn.execute("SELECT * FROM messages ORDER BY id")}
    assert set(after) == set(messages_before)
    columns = [c[1] for c in conn.execute("PRAGMA table_info(messages)") if c[1] != "origin"]
    for message_id, before in messages_before.items():
        row = dict(after[message_id])
        expected = dict(zip(columns[: len(before)], before, strict=True))  # later migrations append columns
        if message_id == REAL_OLD_NOTICE:
            # Its key leaves the agents' namespace: no agent's later send collides with it.
            assert (row.pop("origin"), row["dedup_key"]) == ("system", None)
            expected["dedup_key"] = None
        else:
            # The look-alike on a succeeded attempt (#5), an ordinary notice (#6) and a plain
            # message reusing the key (#7) stay the agents' own, with their keys.
            assert row.pop("origin") == "agent", message_id
        assert {k: row[k] for k in expected} == expected, message_id
    attempts = conn.execute("SELECT * FROM dispatch_attempts ORDER BY message_id").fetchall()
    assert [tuple(a)[: len(b)] for a, b in zip(attempts, attempts_before, strict=True)] == attempts_before
    assert [a["worker_token"] for a in attempts] == [None, None]
    assert conn.execute("SELECT count(*) FROM listeners").fetchone()[0] == 0
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
