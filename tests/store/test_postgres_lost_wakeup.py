"""No lost wake-up on PostgreSQL (issue 28, item 9): ``data_version`` moves when a transaction
that began before a younger one commits after it. The snapshot's ``xmax`` alone did not (it moves
only when the newest transaction ends), so a waiter woken by that commit's NOTIFY compared, saw no
change and slept to its deadline. On a private server: another engineer's transactions on a
shared one move ``xmax`` all the time and would hide the fault."""

import psycopg
from dispatch_harness import wait_until
from harness import McpAgent, bridge_env, write_config

from dispatcher.core.host_lease import HOST_LEASE_ENV
from dispatcher.store import data_version, open_store
from dispatcher.store.messages import insert_message
from dispatcher.store.postgres import DATA_VERSION_QUERY

WAIT_SECONDS = 30  # receive_messages' longest wait: the deadline the lost wake-up slept to


def _older_then_younger(url: str):
    """An older transaction with an uncommitted message to claude, then a younger one that
    commits first (a message to kimi); the older one's connection, still open."""
    older, younger = open_store(url), open_store(url)
    older.execute("BEGIN")
    insert_message(older, sender="kimi", recipient="claude", text="older", created_at=1.0)
    insert_message(younger, sender="claude", recipient="kimi", text="younger", created_at=2.0)
    younger.close()
    return older


def test_the_version_moves_when_an_older_transaction_commits_after_a_younger_one(private_postgres_url):
    reader = open_store(private_postgres_url)
    older = _older_then_younger(private_postgres_url)
    try:
        before = data_version(reader)
        assert data_version(reader) == before  # nothing ended: still
        older.execute("COMMIT")
        assert data_version(reader) != before
    finally:
        older.close()
        reader.close()


def _in_the_wait(url: str, seen: set) -> bool:
    """Whether the server read the version after its look: its session's last statement was the
    version's read twice (the first read comes before the look, later ones only in the wait)."""
    with psycopg.connect(url, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT state_change FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND state = 'idle' AND query = %s",
            (DATA_VERSION_QUERY,),
        ).fetchall()
    seen.update(row[0] for row in rows)
    return len(seen) >= 2


def test_a_waiting_receive_wakes_for_an_older_transactions_late_commit(tmp_path, private_postgres_url):
    url = private_postgres_url
    env = {
        **bridge_env(tmp_path, write_config(tmp_path / "config.json")),
        "AGENT_BRIDGE_DB": url,
        # No renewal of the server's session row during the test: its commit would move any
        # version and wake the waiter for the wrong reason.
        HOST_LEASE_ENV: "3600",
    }
    claude = McpAgent("claude", env, stderr_path=tmp_path / "claude.err").wait_ready()
    older = _older_then_younger(url)
    try:
        waiting = claude.call_async("receive_messages", wait_seconds=WAIT_SECONDS)
        seen: set = set()
        wait_until(lambda: _in_the_wait(url, seen), 60.0, "the receive to sleep in its wait")
        older.execute("COMMIT")  # its NOTIFY wakes the wait; the version must say "changed"
        result = McpAgent._convert(waiting.result(120))
        assert not result.is_error, result.text
        # Before the deadline, with the message (at the deadline it returned the empty look).
        assert [m["text"] for m in result.data["messages"]] == ["older"]
    finally:
        older.close()
        claude.close()
