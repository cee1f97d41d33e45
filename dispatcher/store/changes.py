"""The cheap "did anything change?" signal that wake-up loops poll."""

import sqlite3
from pathlib import Path

from dispatcher.core.locations import store_path


def data_version(conn: sqlite3.Connection) -> int:
    """A number that changes whenever another connection commits to the store (SQLite's
    ``PRAGMA data_version``; this connection's own commits do not change it)."""
    if not isinstance(conn, sqlite3.Connection):
        from dispatcher.store.postgres import data_version as postgres_data_version

        return postgres_data_version(conn)
    version: int = conn.execute("PRAGMA data_version").fetchone()[0]
    return version


def change_files(db: Path) -> list[Path]:
    """The files whose change may mean a commit, for ``file_events`` to watch: every commit writes
    the ``-wal`` next to the real file; a replaced, deleted or checkpointed store changes the file."""
    real = store_path(db)
    return [real, Path(f"{real}-wal")]
