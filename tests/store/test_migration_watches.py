"""Schema 7 -> 8: running watches get their own rows (``session_watches``), and a ``monitor`` flag
an older version left on a session row is dropped (it proved nothing once its watch was gone);
every other wake path and row is kept."""

import json

from dispatcher.store import SCHEMA_VERSION, open_store


def test_v7_migration_drops_stale_monitor_flags_and_keeps_every_session(tmp_path):
    db = tmp_path / "bridge.db"
    old = open_store(db, target_version=7)
    rows = [
        ("claude", '["hook", "monitor", "channel"]'),
        ("kimi", '["monitor"]'),
        ("codex", '["resource"]'),
        ("gemini", "not json"),
    ]
    for agent, paths in rows:
        old.execute(
            "INSERT INTO sessions (agent, role, host, pid, start_time, started_at, wake_paths)"
            " VALUES (?, 'interactive', 'h', 1, 1.0, 1.0, ?)",
            (agent, paths),
        )
    old.close()

    conn = open_store(db)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION >= 8
        after = conn.execute("SELECT agent, wake_paths FROM sessions ORDER BY id").fetchall()
        assert [a for a, _ in after] == [a for a, _ in rows]
        kept = {a: p for a, p in after}
        assert json.loads(kept["claude"]) == ["hook", "channel"]
        assert json.loads(kept["kimi"]) == [] and json.loads(kept["codex"]) == ["resource"]
        assert kept["gemini"] == "not json"  # damaged: read as none, left as it was
        assert conn.execute("SELECT count(*) FROM session_watches").fetchone()[0] == 0
    finally:
        conn.close()
