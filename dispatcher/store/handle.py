"""A long-lived handle on the store file for servers and listeners.

It notices when the file it opened was deleted or replaced underneath it: a deleted
store is an error (never silent writes into an unlinked inode); a replaced one is
reopened (and migrated) cleanly.
"""

import os
import sqlite3
from pathlib import Path

from ..errors import BridgeError
from .connection import open_store


class Store:
    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._conn: sqlite3.Connection | None = None
        self._identity: tuple[int, int] | None = None
        self._opened = False

    def _current_identity(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return st.st_dev, st.st_ino

    def connection(self) -> sqlite3.Connection:
        identity = self._current_identity()
        if self._conn is not None and identity == self._identity:
            return self._conn
        self.close()
        if identity is None and self._opened:
            raise BridgeError(
                "store_missing",
                f"the store file {self.path} was deleted while in use; nothing was written. Restore "
                "it, or restart the bridge to begin a new, empty store.",
            )
        self._conn = open_store(self.path)
        self._identity = self._current_identity()
        self._opened = True
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
            self._identity = None
