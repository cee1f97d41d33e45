"""Read-only connections for views (status line, hooks, who, top, doctor): they never write,
never migrate, and leave no file behind."""

import sqlite3
from pathlib import Path

from dispatcher.core.locations import StoreLocation, StoreUrl
from dispatcher.store.connection import refuse_a_directory
from dispatcher.store.types import Connection

READ_TIMEOUT_SECONDS = 5


def store_is_idle(db: Path) -> bool:
    """No connection is open: everything is in the main file (no -wal and -shm beside it)."""
    return not (Path(f"{db}-wal").exists() and Path(f"{db}-shm").exists())


def open_read_only(db: StoreLocation, *, live: bool = False, named_rows: bool = False) -> Connection | None:
    """A ``query_only`` connection, or None when there is no store yet.

    ``live``: for a reader that stays open and must see later commits (a watcher): always
    the ordinary read-only way, since an ``immutable`` connection never sees a change.
    ``named_rows``: rows read by column name (``Row``) instead of plain tuples.

    A ``mode=ro`` connection to a WAL store creates (and leaves behind) its -wal and -shm
    files when they do not exist, that is when no connection is open. An idle store has
    everything in the main file, so it is read as ``immutable`` (no locks, no side files);
    a store in use is read the ordinary read-only way.
    """
    if isinstance(db, StoreUrl):
        from dispatcher.store.postgres import open_postgres_read_only  # psycopg only for a PostgreSQL store

        return open_postgres_read_only(db)  # (its rows are always read by name too)
    db = Path(db)
    if not db.exists():
        return None
    refuse_a_directory(db)
    immutable = store_is_idle(db) and not live
    uri = f"{db.as_uri()}?{'immutable=1' if immutable else 'mode=ro'}"
    conn = sqlite3.connect(uri, uri=True, timeout=READ_TIMEOUT_SECONDS)
    if named_rows:
        conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA query_only = ON")
    return conn
