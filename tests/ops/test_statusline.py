"""The status line's unread counts: read from the store read-only (no file created, nothing
written), still without pydantic, psutil, the MCP SDK, structlog (the store handle's logging) or
subprocess (starting a listener), and never failing on a bad store."""

import os
import subprocess
import sys

from dispatch_harness import cli, post_task
from harness import PROJECT, bridge_env, db_snapshot, write_config

from dispatcher.store import open_store

PROBE = (
    "import sys; from dispatcher.dispatch.statusline import statusline_text; print(statusline_text()); "
    "print(sorted(m for m in ('pydantic', 'psutil', 'mcp', 'click', 'psycopg', 'structlog', 'subprocess') if m in sys.modules))"
)


def _env(tmp_path):
    return bridge_env(tmp_path, write_config(tmp_path / "config.json"))


def test_statusline_shows_unread_counts_per_agent_without_heavy_imports(tmp_path):
    env = _env(tmp_path)
    db = env["AGENT_BRIDGE_DB"]
    open_store(db).close()
    first = post_task(db, "CANARY-status one")
    post_task(db, "CANARY-status two")
    post_task(db, "CANARY-status for kimi", sender="claude", recipient="kimi")
    conn = open_store(db)
    try:  # a claimed message is being handled: not counted
        from dispatcher.bridge import claims

        claims.claim_message(conn, agent="claude", worker_id="w", message_id=first, lease_seconds=60)
    finally:
        conn.close()
    before = db_snapshot(db)
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=PROJECT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    line, loaded = done.stdout.splitlines()
    assert line == "[claude] stopped · 1 unread  ·  [kimi] stopped · 1 unread", line
    assert loaded == "[]" and "CANARY" not in done.stdout
    assert db_snapshot(db) == before


def test_statusline_without_unread_or_store_or_with_a_broken_store_shows_no_count(tmp_path):
    env = _env(tmp_path)
    done = cli(env, "statusline")
    assert (done.returncode, done.stdout) == (0, "[claude] stopped  ·  [kimi] stopped\n")
    assert not os.path.exists(env["AGENT_BRIDGE_DB"])
    open_store(env["AGENT_BRIDGE_DB"]).close()
    assert cli(env, "statusline").stdout == "[claude] stopped  ·  [kimi] stopped\n"
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not a database at all" * 100)
    done = cli({**env, "AGENT_BRIDGE_DB": str(garbage)}, "statusline")
    assert (done.returncode, done.stdout, done.stderr) == (0, "[claude] stopped  ·  [kimi] stopped\n", "")


def test_a_config_that_is_not_json_is_named_with_its_line(tmp_path):
    """Issue 30, item 6: broken JSON showed only `unavailable (JSONDecodeError)`."""
    env = _env(tmp_path)
    config = tmp_path / "config.json"
    config.write_text('{\n  "agents": {\n    "claude": {"auto": true,}\n  }\n}\n')
    done = cli(env, "statusline")
    assert done.returncode == 0
    assert done.stdout.startswith(f"[agent-bridge] unavailable ({config} line 3: "), done.stdout
