"""A PostgreSQL restart under a running server handle and a listening waiter: the call that
meets it fails with the store's transient error (one ``store_unavailable`` line at the tool),
the next call connects again without a restart of ours, and nothing committed is lost. On a
throwaway server of its own (``pg_server.ThrowawayServer``), which it stops and starts."""

import pytest
from pg_server import ThrowawayServer, fresh_database_on

from dispatcher.core.locations import StoreUrl
from dispatcher.store import TRANSIENT_STORE_ERRORS, open_handle, write_transaction
from dispatcher.store.changes import StoreChanges
from dispatcher.store.messages import fetch_message, insert_message


@pytest.fixture(scope="module")
def server():
    try:
        made = ThrowawayServer()
    except Exception as exc:  # noqa: BLE001 - no initdb here: the test says so
        pytest.skip(f"no PostgreSQL server package to start a throwaway server: {exc}")
    made.start()
    yield made
    made.remove()


def test_a_restart_fails_one_call_then_the_handle_reconnects_and_nothing_is_lost(server):
    url = fresh_database_on(server.url)
    store = open_handle(url)
    waiter = StoreChanges(StoreUrl(url), "claude")
    try:
        with write_transaction(store.connection()):
            kept = insert_message(store.connection(), sender="kimi", recipient="claude", text="t", created_at=1.0)
        server.stop()
        server.start()
        with pytest.raises(TRANSIENT_STORE_ERRORS):
            fetch_message(store.connection(), kept)
        assert fetch_message(store.connection(), kept)["text"] == "t"  # the next call: connected again
        after = insert_message(store.connection(), sender="kimi", recipient="claude", text="after", created_at=2.0)
        # The waiter's connection died with the restart: its wait ends ("look now", never the
        # timeout), and it listens again; what a re-query finds is the message.
        assert waiter.wait(60.0), "the waiter slept through the restart"
        assert fetch_message(store.connection(), after)["text"] == "after"
        later = insert_message(store.connection(), sender="kimi", recipient="claude", text="later", created_at=3.0)
        assert waiter.wait(60.0), "the waiter did not listen again after the restart"
        assert fetch_message(store.connection(), later) is not None
    finally:
        waiter.close()
        store.close()


def test_a_connection_dropped_mid_transaction_loses_only_what_was_never_acknowledged(server):
    url = fresh_database_on(server.url)
    store, admin = open_handle(url), open_handle(url)
    try:
        acknowledged = insert_message(store.connection(), sender="kimi", recipient="claude", text="a", created_at=1.0)
        pid = store.connection().execute("SELECT pg_backend_pid()").fetchone()[0]
        with pytest.raises(TRANSIENT_STORE_ERRORS), write_transaction(store.connection()):
            insert_message(store.connection(), sender="kimi", recipient="claude", text="never", created_at=2.0)
            admin.connection().execute("SELECT pg_terminate_backend(?)", (pid,))
            insert_message(store.connection(), sender="kimi", recipient="claude", text="never", created_at=3.0)
        texts = [r[0] for r in store.connection().execute("SELECT text FROM messages ORDER BY id")]
        assert texts == ["a"] and fetch_message(store.connection(), acknowledged)["text"] == "a"
    finally:
        store.close()
        admin.close()
