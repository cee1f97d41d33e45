"""The PostgreSQL connector on a real server: the dialect it translates, the schema it creates
(the same as SQLite's, version for version), its migration and write locks, and its errors.
Backend-specific by nature: these are the parts only the second connector has."""

import math
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import psycopg
import pytest

from dispatcher.core.errors import BridgeError
from dispatcher.core.locations import StoreUrl, redacted, shown
from dispatcher.store import (
    INTEGRITY_ERRORS,
    SCHEMA_VERSION,
    STORE_ERRORS,
    TRANSIENT_STORE_ERRORS,
    data_version,
    open_store,
    schema_version,
    write_transaction,
)
from dispatcher.store.messages import fetch_message, insert_message
from dispatcher.store.postgres import translate


@pytest.mark.parametrize(
    ("shared", "psycopg_form"),
    [
        ("SELECT * FROM t WHERE a = ? AND b = ?", "SELECT * FROM t WHERE a = %s AND b = %s"),
        ("UPDATE t SET a = :now WHERE b > :now", "UPDATE t SET a = %(now)s WHERE b > %(now)s"),
        (
            "SELECT 'a?b :c 50%' , x::text FROM t WHERE y LIKE '%'",
            "SELECT 'a?b :c 50%' , x::text FROM t WHERE y LIKE '%'",
        ),
        ("SELECT count(*) % 2 FROM t", "SELECT count(*) %% 2 FROM t"),
        ('SELECT "we?ird" FROM t WHERE a = ?', 'SELECT "we?ird" FROM t WHERE a = %s'),
        ("SELECT 'it''s ?' WHERE a = ?", "SELECT 'it''s ?' WHERE a = %s"),
    ],
)
def test_translate_placeholders_and_leave_quoted_text_alone(shared, psycopg_form):
    assert translate(shared) == psycopg_form


def test_a_password_never_shows_in_what_is_said():
    assert redacted("postgresql://bridge:s3cret@db.example:5432/b") == "postgresql://bridge:***@db.example:5432/b"
    assert redacted("postgresql://postgres@127.0.0.1/b") == "postgresql://postgres@127.0.0.1/b"
    # What the listener's banner, top, show, uninstall and watch errors print for the store.
    assert shown(StoreUrl("postgresql://bridge:s3cret@db/b")) == "postgresql://bridge:***@db/b"
    assert shown(Path("/state/bridge.db")) == "/state/bridge.db"


def _columns_sqlite(conn: sqlite3.Connection) -> dict[str, list[str]]:
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")]
    return {
        t: sorted(r[1] for r in conn.execute(f"PRAGMA table_info({t})")) for t in tables if not t.startswith("sqlite_")
    }


def test_the_schema_is_sqlites_table_for_table_column_for_column(tmp_path, postgres_url):
    sqlite_conn = open_store(tmp_path / "bridge.db")
    pg = open_store(postgres_url)
    try:
        rows = pg.execute(
            "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = current_schema()"
            " AND table_name NOT IN ('bridge_schema', 'agent_roles', 'bridge_write_lock')"  # (PostgreSQL's own:
            # version, role map, write lock)
        ).fetchall()
        on_postgres: dict[str, list[str]] = {}
        for table, column in rows:
            on_postgres.setdefault(table, []).append(column)
        assert {t: sorted(c) for t, c in on_postgres.items()} == _columns_sqlite(sqlite_conn)
        sqlite_indexes = {
            r[0] for r in sqlite_conn.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL")
        }
        postgres_indexes = {
            r[0]
            for r in pg.execute("SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()")
            if not r[0].endswith("_pkey")
        }
        assert postgres_indexes == sqlite_indexes
        assert schema_version(pg) == schema_version(sqlite_conn) == SCHEMA_VERSION
    finally:
        sqlite_conn.close()
        pg.close()


def test_four_connections_opening_a_new_store_together_migrate_it_once(postgres_url):
    """Without the migration lock the later ones would fail creating tables that already exist."""
    opened, failed = [], []

    def start() -> None:
        try:
            opened.append(open_store(postgres_url))
        except Exception as exc:  # noqa: BLE001 - the test reports whatever went wrong
            failed.append(exc)

    starters = [threading.Thread(target=start) for _ in range(4)]
    for starter in starters:
        starter.start()
    for starter in starters:
        starter.join(timeout=120)
    assert failed == [] and len(opened) == 4
    assert [schema_version(c) for c in opened] == [SCHEMA_VERSION] * 4
    for conn in opened:
        conn.close()


def test_a_newer_schema_is_refused_and_nothing_is_written(postgres_url):
    open_store(postgres_url).close()
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute("UPDATE bridge_schema SET version = %s", (SCHEMA_VERSION + 1,))
    with pytest.raises(BridgeError) as refused:
        open_store(postgres_url)
    assert refused.value.code == "schema_too_new" and "upgrade agent-bridge" in refused.value.message
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        assert admin.execute("SELECT version FROM bridge_schema").fetchone()[0] == SCHEMA_VERSION + 1


def test_a_server_that_does_not_answer_is_one_clear_error():
    with pytest.raises(BridgeError) as refused:
        open_store("postgresql://bridge:s3cret@127.0.0.1:1/none")
    said = refused.value.message
    assert refused.value.code == "store_unavailable" and "AGENT_BRIDGE_DB" in said and "s3cret" not in said


def test_the_write_transaction_is_the_stores_one_write_lock(postgres_url):
    """As SQLite's BEGIN IMMEDIATE: a second writer waits until the first commits."""
    first, second = open_store(postgres_url), open_store(postgres_url)
    try:
        with write_transaction(first):
            second.execute("SET lock_timeout = '200ms'")
            with pytest.raises(TRANSIENT_STORE_ERRORS), write_transaction(second):
                pass
            assert not second.in_transaction  # a BEGIN that could not take the lock left nothing open
        with write_transaction(second):  # free again once the first committed
            insert_message(second, sender="a", recipient="b", text="t", created_at=1.0)
    finally:
        first.close()
        second.close()


def test_errors_cross_the_boundary_under_the_stores_names(postgres_url):
    conn = open_store(postgres_url)
    try:
        first = insert_message(conn, sender="a", recipient="b", text="t", created_at=1.0, dedup_key="k")
        with pytest.raises(INTEGRITY_ERRORS):
            insert_message(conn, sender="a", recipient="b", text="t", created_at=1.0, dedup_key="k")
        with pytest.raises(STORE_ERRORS):
            conn.execute("SELECT no_such_column FROM messages")
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(TRANSIENT_STORE_ERRORS):
            fetch_message(conn, first)
    finally:
        conn.close()


def test_a_nan_is_stored_as_sqlite_stores_it_null(postgres_url):
    conn = open_store(postgres_url)
    try:
        sent = insert_message(conn, sender="a", recipient="b", text="t", created_at=1.0, response_deadline=math.nan)
        assert fetch_message(conn, sent)["response_deadline"] is None
    finally:
        conn.close()


def test_data_version_moves_after_another_connections_commit(postgres_url):
    watcher, writer = open_store(postgres_url), open_store(postgres_url)
    try:
        before = data_version(watcher)
        insert_message(writer, sender="a", recipient="b", text="t", created_at=1.0)
        assert data_version(watcher) != before
    finally:
        watcher.close()
        writer.close()


def test_a_sqlite_store_never_loads_psycopg(tmp_path):
    probe = (
        "import sys; from dispatcher.store import open_store, data_version, schema_version;"
        f"c = open_store({str(tmp_path / 'bridge.db')!r}); data_version(c); schema_version(c);"
        "print('psycopg' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "False"


def test_a_sum_reads_as_sqlite_gives_it_never_a_decimal(postgres_url):
    conn = open_store(postgres_url)
    try:
        whole, fraction = conn.execute(
            "SELECT sum(x), sum(y) FROM (VALUES (2::bigint, 0.25), (3, 0.5)) AS t (x, y)"
        ).fetchone()
        assert (whole, type(whole), fraction, type(fraction)) == (5, int, 0.75, float)
    finally:
        conn.close()


def test_both_backends_know_the_same_schema_versions():
    from dispatcher.store.postgres_schema import MIGRATIONS as POSTGRES_MIGRATIONS

    assert len(POSTGRES_MIGRATIONS) == SCHEMA_VERSION


def test_without_psycopg_a_postgresql_url_is_one_clear_refusal(postgres_url):
    probe = (
        "import sys; sys.modules['psycopg'] = None\n"
        "from dispatcher.core.errors import BridgeError\nfrom dispatcher.store import open_store\n"
        f"try:\n    open_store({postgres_url!r})\nexcept BridgeError as exc:\n    print(exc.code, exc.message)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.startswith("missing_extra ") and "[metrics,otel,postgres,top]" in done.stdout
