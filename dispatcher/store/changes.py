"""The cheap "did anything change?" signal that wake-up loops poll."""

import sqlite3


def data_version(conn: sqlite3.Connection) -> int:
    """A number that changes whenever another connection commits to the store (SQLite's
    ``PRAGMA data_version``; this connection's own commits do not change it)."""
    version: int = conn.execute("PRAGMA data_version").fetchone()[0]
    return version
