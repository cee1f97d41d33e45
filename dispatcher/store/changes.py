"""How a reader notices that another connection committed, without reading any table."""

import sqlite3


def change_counter(conn: sqlite3.Connection) -> int:
    """A number that differs after another connection's commit (SQLite's ``data_version``)."""
    version: int = conn.execute("PRAGMA data_version").fetchone()[0]
    return version
