"""Message ids are never reused. With a plain rowid, deleting the newest messages (prune) let the
next message take a freed id: a watch or the channel never named it, hook state could take it as
already announced, and an old attempt directory could collide with it. The migration that
makes the id AUTOINCREMENT rebuilds the table and keeps every row, column, index and key."""

import sqlite3

import pytest
from harness import V4_TABLES, assert_rows_kept, store_from_fixture, table_rows

from dispatcher.store import open_store
from dispatcher.store.migrations import MIGRATIONS, _messages_never_reuse_ids

# The version just before the rebuild, and just after it (later migrations add their own columns).
BEFORE_REBUILD = MIGRATIONS.index(_messages_never_reuse_ids)
from dispatcher.store.messages import insert_message

pytestmark = pytest.mark.both_backends


def _send(conn, text: str) -> int:
    return insert_message(conn, sender="claude", recipient="kimi", text=text, created_at=1.0)


def _index_names(conn) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'messages'")}


def test_a_deleted_newest_message_id_is_never_given_again(conn):
    first, newest = _send(conn, "a"), _send(conn, "b")
    conn.execute("DELETE FROM messages WHERE id = ?", (newest,))  # what prune does to old rows
    assert _send(conn, "c") > newest > first


def test_the_upgrade_keeps_every_row_column_index_and_key(tmp_path):
    db = store_from_fixture(tmp_path / "store_v4.db", "store_v4", 4)
    before = table_rows(db, V4_TABLES)
    old = open_store(db, target_version=BEFORE_REBUILD)
    columns = [r[1] for r in old.execute("PRAGMA table_info(messages)")]
    indexes = _index_names(old)
    newest = old.execute("SELECT max(id) FROM messages").fetchone()[0]
    old.execute("DELETE FROM messages WHERE id = ? AND id NOT IN (SELECT message_id FROM dispatch_attempts)", (newest,))
    old.close()

    conn = open_store(db, target_version=BEFORE_REBUILD + 1)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == BEFORE_REBUILD + 1
    assert [r[1] for r in conn.execute("PRAGMA table_info(messages)")] == columns
    assert _index_names(conn) == indexes
    assert "AUTOINCREMENT" in conn.execute("SELECT sql FROM sqlite_master WHERE name = 'messages'").fetchone()[0]
    kept = {t: rows for t, rows in before.items() if t != "messages"}
    kept["messages"] = [r for r in before["messages"] if r[0] != newest]
    assert_rows_kept(conn, kept)
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    conn = open_store(db)  # the rest of the schema, which sending needs
    # Ids freed before the upgrade may come back once (the table's history is not recorded), never after.
    again = _send(conn, "after the upgrade")
    conn.execute("DELETE FROM messages WHERE id = ?", (again,))
    assert _send(conn, "next") > again


def test_foreign_keys_are_enforced_again_after_migrating(tmp_path):
    """Migrating turns foreign keys off for the rebuild; the connection it returns enforces them."""
    conn = open_store(tmp_path / "fresh.db")
    _send(conn, "x")
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute("UPDATE messages SET reply_to = 999")
