"""The PostgreSQL store's write lock is bounded and the store's own (issue 28, item 8).

A writer stopped inside a write transaction (SIGSTOP: a frozen VM or a cut-off host looks the same
to the server) holds the write lock. Another agent's send then fails as SQLite's does at its busy
timeout ("database is locked", ``store_unavailable``), and the server ends the stopped session
(``idle_in_transaction_session_timeout``), after which writes go on. No role holds the lock past
a transaction: it is a table lock (the old advisory key, which a session could hold for ever,
holds nobody back), and only the owner and the mapped agents' roles may take it. The stopped writer runs on a private server (``private_postgres``)."""

import os
import signal
import socket
import subprocess
import sys
import textwrap
from urllib.parse import quote

import psycopg
import pytest
from dispatch_harness import wait_until
from harness import PROJECT, McpAgent, bridge_env, write_config

from dispatcher.bridge import messages
from dispatcher.store import STORE_ERRORS, open_store, write_transaction
from dispatcher.store.busy import BUSY_TIMEOUT_MS
from dispatcher.store.messages import insert_message
from dispatcher.store.worktrees import WORKTREE_COLUMNS

LOCK_TIMEOUT_SECONDS = BUSY_TIMEOUT_MS / 1000  # the connector's default, as SQLite's busy timeout
IDLE_IN_TRANSACTION_SECONDS = 30  # the connector's default: well past the lock timeout
# The advisory key the write lock used before schema 17 ("ab-write").
OLD_ADVISORY_KEY = 0x61622D7772697465

# A writer that takes the write lock, writes, says so and waits (it is stopped there).
STOPPED_WRITER = textwrap.dedent(
    """
    import sys
    from dispatcher.store import STORE_ERRORS, open_store, write_transaction
    from dispatcher.store.messages import insert_message

    conn = open_store(sys.argv[1])
    with write_transaction(conn):
        insert_message(conn, sender="kimi", recipient="claude", text="never committed", created_at=1.0)
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        print(pid, flush=True)
        sys.stdin.readline()
    """
)


def _session_alive(url: str, pid: int) -> bool:
    with psycopg.connect(url, autocommit=True) as admin:
        return admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone() is not None


def test_a_stopped_writer_holds_others_back_only_until_the_lock_timeout_and_the_server_ends_it(
    tmp_path, private_postgres_url
):
    """With the connector's own bounds (nobody configured any): the lock wait gives up at the busy
    timeout, and the server ends the stopped session at the idle-in-transaction timeout."""
    url = private_postgres_url
    open_store(url).close()  # migrated before the writer starts
    env = {**bridge_env(tmp_path, write_config(tmp_path / "config.json")), "AGENT_BRIDGE_DB": url}
    kimi = McpAgent("kimi", env, stderr_path=tmp_path / "kimi.err").wait_ready()
    writer = subprocess.Popen(
        [sys.executable, "-c", STOPPED_WRITER, url],
        cwd=PROJECT,
        env={**os.environ, **env},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        writer_session = int(writer.stdout.readline())
        writer.send_signal(signal.SIGSTOP)
        # A send that takes the write lock (a dedup key: the lookup and the insert are one transaction).
        held_back = kimi.call_async("send_message", recipient="claude", text="t", dedup_key="k1", kind="task")
        # Answered before the server ends the writer's session: by the lock timeout.
        result = McpAgent._convert(held_back.result(IDLE_IN_TRANSACTION_SECONDS - 2))
        assert result.code == "store_unavailable", result.text
        assert "database is locked" in result.text and "nothing was changed" in result.text, result.text

        wait_until(lambda: not _session_alive(url, writer_session), 120.0, "the server to end the stopped session")
        sent = kimi.ok("send_message", recipient="claude", text="t", dedup_key="k1", kind="task")
        assert sent.get("duplicate") is not True  # the first send changed nothing
        conn = open_store(url)
        try:
            texts = [row[0] for row in conn.execute("SELECT text FROM messages ORDER BY id")]
        finally:
            conn.close()
        assert texts == ["t"]  # the stopped writer's row was rolled back with its session
    finally:
        kimi.close()
        writer.send_signal(signal.SIGCONT)
        writer.kill()
        writer.communicate()


def test_each_session_is_bounded_unless_someone_configured_it(private_postgres_url):
    conn = open_store(private_postgres_url)
    try:
        shown = {
            name: conn.execute(f"SHOW {name}").fetchone()[0]
            for name in ("lock_timeout", "idle_in_transaction_session_timeout")
        }
        assert shown == {
            "lock_timeout": f"{LOCK_TIMEOUT_SECONDS:.0f}s",
            "idle_in_transaction_session_timeout": f"{IDLE_IN_TRANSACTION_SECONDS}s",
        }
        assert conn.execute("SHOW tcp_keepalives_idle").fetchone()[0] == "30"
        # The client's end finds a vanished server too: keepalives on its socket.
        sock = socket.socket(fileno=os.dup(conn.raw.fileno()))
        try:
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 30
        finally:
            sock.close()
    finally:
        conn.close()
    configured = open_store(f"{private_postgres_url}?options={quote('-c lock_timeout=1500')}")
    try:
        assert configured.execute("SHOW lock_timeout").fetchone()[0] == "1500ms"
    finally:
        configured.close()


def test_no_role_holds_the_store_lock_past_a_transaction_and_only_the_stores_roles_take_it(postgres_url, agent_role):
    owner = open_store(f"{postgres_url}%20{quote('-c lock_timeout=1000')}")
    kimi_url = agent_role(postgres_url, "kimi")
    kimi = open_store(kimi_url)
    hostile = psycopg.connect(kimi_url, autocommit=True)
    try:
        # The old key: a session-level advisory lock outlives every transaction and no timeout ends it.
        hostile.execute("SELECT pg_advisory_lock(%s)", (OLD_ADVISORY_KEY,))
        with write_transaction(owner):  # neither the owner's nor the role's own writes wait for it
            insert_message(owner, sender="claude", recipient="kimi", text="from the owner", created_at=1.0)
        sent = messages.send_message(
            kimi, sender="kimi", recipient="claude", text="t", agents={"kimi", "claude"}, dedup_key="d"
        )
        assert sent["id"]
        # The lock is a table lock: held only inside a transaction (the idle-in-transaction timeout's
        # reach), a wait for it bounded, and gone with the transaction.
        hostile.execute("BEGIN")
        hostile.execute("LOCK TABLE bridge_write_lock IN EXCLUSIVE MODE")
        with pytest.raises(STORE_ERRORS, match="database is locked"), write_transaction(owner):
            pass
        hostile.execute("ROLLBACK")
        with write_transaction(owner):
            insert_message(owner, sender="claude", recipient="kimi", text="after", created_at=2.0)
        # Only the owner and the mapped roles may lock it: no right of PUBLIC's does.
        for right in ("UPDATE", "DELETE", "TRUNCATE"):
            query = "SELECT has_table_privilege('public', 'bridge_write_lock', %s)"
            assert hostile.execute(query, (right,)).fetchone()[0] is False, right
    finally:
        hostile.close()
        kimi.close()
        owner.close()


def test_a_role_mapped_before_the_write_lock_migration_keeps_writing(postgres_url, agent_role):
    """Schema 18 grants the lock to the roles already mapped: an upgrade locks no agent out."""
    owner = open_store(postgres_url)
    kimi_url = agent_role(postgres_url, "kimi")
    try:
        # A store of schema 17: without the write lock (18), the worktree columns (19), approvals (20),
        # task grants (21), the messages' traceparent (22), the metric totals (23) or bridge_count (24).
        owner.execute("DROP FUNCTION bridge_count(text, text, text, text)")
        owner.execute("DROP TABLE bridge_write_lock")
        owner.execute("DROP TABLE approvals")
        owner.execute("DROP TABLE task_grants")
        owner.execute("ALTER TABLE messages DROP COLUMN traceparent")
        owner.execute("DROP TABLE metric_totals")
        for column in WORKTREE_COLUMNS:
            owner.execute(f"ALTER TABLE dispatch_attempts DROP COLUMN {column}")
        owner.execute("UPDATE bridge_schema SET version = 17")
    finally:
        owner.close()
    open_store(postgres_url).close()  # the owner migrates to 18 and on again
    kimi = open_store(kimi_url)
    try:
        sent = messages.send_message(
            kimi, sender="kimi", recipient="claude", text="t", agents={"kimi", "claude"}, dedup_key="d"
        )
        assert sent["id"]
    finally:
        kimi.close()
