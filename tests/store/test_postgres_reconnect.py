"""A PostgreSQL store connection whose session the server ended (a restart, a failover,
``pg_terminate_backend``) fails the statement that met it, and the next statement that starts
something connects again: never inside a transaction that was under way (its COMMIT fails and
nothing is replayed), and with the connection's session settings (a read-only one stays
read-only). On a private server: the sessions ended are this test's own."""

import psycopg
import pytest
from pg_server import end_sessions

from dispatcher.store import STORE_ERRORS, TRANSIENT_STORE_ERRORS, data_version, open_store, write_transaction
from dispatcher.store.messages import insert_message
from dispatcher.store.postgres import open_postgres_read_only


def _texts(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        return [row[0] for row in conn.execute("SELECT text FROM messages ORDER BY id")]


def test_the_statement_that_meets_the_drop_fails_and_the_next_connects_again(private_postgres_url):
    conn = open_store(private_postgres_url)
    try:
        end_sessions(private_postgres_url)
        with pytest.raises(TRANSIENT_STORE_ERRORS):
            data_version(conn)
        assert data_version(conn) > 0
        insert_message(conn, sender="kimi", recipient="claude", text="after", created_at=1.0)
        assert _texts(private_postgres_url) == ["after"]
    finally:
        conn.close()


def test_a_transaction_cut_by_the_drop_is_never_committed_on_the_new_connection(private_postgres_url):
    conn = open_store(private_postgres_url)
    try:
        conn.execute("BEGIN IMMEDIATE")
        insert_message(conn, sender="kimi", recipient="claude", text="cut", created_at=1.0)
        end_sessions(private_postgres_url)
        with pytest.raises(TRANSIENT_STORE_ERRORS):
            conn.execute("COMMIT")  # not a COMMIT of an empty transaction on a new connection
        with write_transaction(conn):
            insert_message(conn, sender="kimi", recipient="claude", text="next", created_at=2.0)
        assert _texts(private_postgres_url) == ["next"]
    finally:
        conn.close()


def test_a_read_only_connection_stays_read_only_after_a_reconnect(private_postgres_url):
    open_store(private_postgres_url).close()
    reader = open_postgres_read_only(private_postgres_url)
    assert reader is not None
    try:
        end_sessions(private_postgres_url)
        with pytest.raises(TRANSIENT_STORE_ERRORS):
            reader.execute("SELECT count(*) FROM messages")
        assert reader.execute("SELECT count(*) FROM messages").fetchone()[0] == 0
        with pytest.raises(STORE_ERRORS, match="read-only"):
            insert_message(reader, sender="kimi", recipient="claude", text="no", created_at=1.0)
    finally:
        reader.close()
