"""The store recipe: concurrent first opens, the newer-schema guard, migrations, file modes."""

import hashlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from harness import PROJECT, store_from_fixture

from dispatcher.core.errors import BridgeError
from dispatcher.store import SCHEMA_VERSION, SchemaTooNewError, SqliteStore, open_store

HOLD_LOCK = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
conn.execute("CREATE TABLE IF NOT EXISTS holder (x)")
print("locked", flush=True)
sys.stdin.readline()  # hold the write lock until the test says so
conn.execute("COMMIT")
"""

OPEN_STORE = """
import sys
from dispatcher.store import open_store, schema_version
print("opening", flush=True)
conn = open_store(sys.argv[1])
print(schema_version(conn), conn.execute("PRAGMA journal_mode").fetchone()[0])
"""


def test_eight_processes_open_a_fresh_store_while_another_holds_a_write_lock(tmp_path):
    db = tmp_path / "fresh.db"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout.readline().strip() == "locked"
    openers = [
        subprocess.Popen(
            [sys.executable, "-c", OPEN_STORE, str(db)],
            cwd=PROJECT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(8)
    ]
    # Once all have started opening they are spinning on the WAL switch; release the lock.
    for proc in openers:
        assert proc.stdout.readline().strip() == "opening"
    holder.communicate("\n", timeout=60)
    assert holder.returncode == 0
    for proc in openers:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert out.split() == [str(SCHEMA_VERSION), "wal"]
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'messages'").fetchone()[0] == 1


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_newer_schema_refuses_to_open_and_writes_nothing(tmp_path, env):
    db = tmp_path / "newer.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE messages (id INTEGER PRIMARY KEY)")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    before = _digest(db)
    with pytest.raises(SchemaTooNewError) as info:
        open_store(db)
    assert info.value.code == "schema_too_new" and "upgrade" in info.value.message
    assert _digest(db) == before
    assert not (tmp_path / "newer.db-wal").exists()
    # The server refuses before the MCP handshake, with the same message.
    proc = subprocess.run(
        [sys.executable, str(PROJECT / "server.py")],
        env={**os.environ, **env, "AGENT_ID": "claude", "AGENT_BRIDGE_DB": str(db)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0 and "schema_too_new" in proc.stderr and proc.stdout == ""
    assert _digest(db) == before


@pytest.mark.parametrize(("fixture", "version"), [("store_v1", 1)])
def test_migrates_every_released_schema_keeping_messages(tmp_path, fixture, version):
    db = store_from_fixture(tmp_path / f"{fixture}.db", fixture, version)
    before = sqlite3.connect(db).execute("SELECT * FROM messages ORDER BY id").fetchall()
    conn = open_store(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    # Every old column keeps its value; later migrations only add columns (with defaults).
    old_columns = len(before[0])
    assert [tuple(r)[:old_columns] for r in conn.execute("SELECT * FROM messages ORDER BY id")] == before
    assert {r[0] for r in conn.execute("SELECT origin FROM messages")} == {"agent"}
    assert conn.execute("SELECT count(*) FROM dispatch_attempts").fetchone()[0] == 0
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_store_files_are_private(tmp_path):
    db = tmp_path / "deep" / "dir" / "bridge.db"
    conn = open_store(db)
    conn.execute("CREATE TABLE IF NOT EXISTS t (x)")
    conn.execute("INSERT INTO t VALUES (1)")
    assert db.stat().st_mode & 0o777 == 0o600
    assert db.parent.stat().st_mode & 0o777 == 0o700
    wal = Path(str(db) + "-wal")
    assert wal.exists() and wal.stat().st_mode & 0o777 == 0o600


def test_deleted_store_is_an_error_and_replaced_store_is_reopened(tmp_path):
    db = tmp_path / "bridge.db"
    store = SqliteStore(db)
    store.connection().execute("INSERT INTO messages (sender, recipient, text, created_at) VALUES ('a','b','x',0)")
    db.unlink()
    with pytest.raises(BridgeError) as info:
        store.connection()
    assert info.value.code == "store_missing"
    assert not db.exists()  # never silently recreated
    with pytest.raises(BridgeError):
        store.connection()
    open_store(db).close()  # someone restores a (new) store file
    conn = store.connection()
    assert conn.execute("SELECT count(*) FROM messages").fetchone()[0] == 0


HOLD_OPEN = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("INSERT INTO messages (sender, recipient, text, created_at) VALUES ('kimi', 'claude', 'held', 0)")
print("holding", flush=True)
sys.stdin.readline()
conn.close()
"""


@pytest.mark.parametrize("deleted", [("-shm",), ("-wal",), ("-wal", "-shm")])
def test_a_handle_lets_go_of_deleted_sidecars_and_reopens_once_nobody_uses_them(tmp_path, deleted):
    db = tmp_path / "bridge.db"
    store = SqliteStore(db)
    store.connection().execute("INSERT INTO messages (sender, recipient, text, created_at) VALUES ('a','b','mine',0)")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_OPEN, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "holding"
        for suffix in deleted:
            os.unlink(f"{db}{suffix}")
        for _ in range(2):  # noticed, and refused for as long as the holder uses the old files
            with pytest.raises(BridgeError) as refused:
                store.connection()
            assert refused.value.code == "store_missing" and "-shm" in refused.value.message
        # Another handle opening now would make a second pair: it refuses too.
        with pytest.raises(BridgeError) as refused:
            SqliteStore(db).connection()
        assert refused.value.code == "store_missing"
        holder.communicate("\n", timeout=60)
        assert holder.returncode == 0  # the last one out checkpoints what it wrote into the file
        texts = [r[0] for r in store.connection().execute("SELECT text FROM messages ORDER BY id")]
        assert texts == ["mine", "held"]
        assert store.connection().execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.communicate()
        store.close()


def test_a_fresh_open_with_no_sidecars_and_nobody_else_is_fine(tmp_path):
    db = tmp_path / "bridge.db"
    first = SqliteStore(db)
    first.connection()
    first.close()  # the last close removes -wal and -shm
    assert not Path(f"{db}-wal").exists()
    second = SqliteStore(db)
    try:
        assert second.connection().execute("SELECT count(*) FROM messages").fetchone()[0] == 0
    finally:
        second.close()


CREATING = """
import fcntl, os, sys

fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)  # created, still empty: not yet in WAL mode
fcntl.lockf(fd, fcntl.LOCK_SH, 1, 1024)  # a lock, as SQLite's while it opens the file
print("creating", flush=True)
sys.stdin.readline()
"""


def test_a_store_another_process_is_creating_is_no_split_store(tmp_path):
    """Two servers started together on a new store: while the first has the empty file open and
    has not switched it to WAL yet, there are no -wal/-shm to miss; the second opens it at once
    (a loaded machine once stretched that moment past the grace, and it refused store_missing)."""
    db = tmp_path / "bridge.db"
    creator = subprocess.Popen(
        [sys.executable, "-c", CREATING, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    store = SqliteStore(db)
    try:
        assert creator.stdout.readline().strip() == "creating"
        assert store.connection().execute("SELECT count(*) FROM messages").fetchone()[0] == 0
    finally:
        creator.communicate("\n", timeout=30)
        store.close()


def test_a_second_open_in_one_process_keeps_the_first_connections_locks(tmp_path):
    """Opening the store again must not open-and-close the file: that drops this process's
    POSIX locks, and another process closing its connection would then take itself for the
    last one and checkpoint and delete -wal/-shm under the first connection."""
    db = tmp_path / "bridge.db"
    first = open_store(db)
    first.execute("INSERT INTO messages (sender, recipient, text, created_at) VALUES ('a', 'b', 'x', 0)")
    wal = os.stat(f"{db}-wal")
    second = open_store(db)
    closer = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from dispatcher.store import open_store; open_store(sys.argv[1]).close()",
            str(db),
        ],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert closer.returncode == 0, closer.stderr
    after = os.stat(f"{db}-wal")  # still there: the other process knew it was not the last
    assert (after.st_ino, after.st_dev) == (wal.st_ino, wal.st_dev)
    first.execute("INSERT INTO messages (sender, recipient, text, created_at) VALUES ('a', 'b', 'y', 0)")
    assert second.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 2
    first.close()
    second.close()
