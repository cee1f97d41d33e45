"""A long-lived handle on the store file for servers and listeners.

It notices when the file it opened was deleted or replaced underneath it: a deleted
store is an error (never silent writes into an unlinked inode); a replaced one is
reopened (and migrated) cleanly, once no process uses the old file any more.

Why "once": SQLite finds the -wal and -shm files by name, not by inode. While some
process still has the old file open they are the old file's, and a connection to the new
file would read (and write) the old store's pages through them. And when the old file's
last connection closes, SQLite leaves them behind (it never checkpoints into a moved
file), so the next open of the new file would replay the old store's WAL into it. The
handle therefore keeps a descriptor on the -wal and -shm it opened with (so their inode
numbers cannot be reused); while the names still lead to those files it refuses with
``store_missing`` as long as another process holds a lock on them, and removes them once
no process does. Only then does it open the new file.
"""

import contextlib
import os
import sqlite3
from pathlib import Path

from ..errors import BridgeError
from ..logs import get_logger
from ..proclocks import lock_holders
from .connection import open_store

SIDECARS = ("-wal", "-shm")
log = get_logger("agent_bridge.store")


def _file_id(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _locked_by_other_process(st: os.stat_result) -> bool:
    """Whether another process holds a lock on this file (SQLite's -shm locks)."""
    holders = lock_holders(st)
    return holders is None or any(pid != os.getpid() for pid in holders)  # unknown: assume in use


class Store:
    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._conn: sqlite3.Connection | None = None
        self._identity: tuple[int, int] | None = None
        self._opened = False
        self._pins: dict[str, int] = {}

    def _current_identity(self, suffix: str = "") -> tuple[int, int] | None:
        try:
            return _file_id(os.stat(f"{self.path}{suffix}"))
        except FileNotFoundError:
            return None

    def connection(self) -> sqlite3.Connection:
        identity = self._current_identity()
        if self._conn is not None and identity == self._identity:
            return self._conn
        self._drop_connection()
        if identity is None and self._opened:
            raise BridgeError(
                "store_missing",
                f"the store file {self.path} was deleted while in use; nothing was written. Restore "
                "it, or restart the bridge to begin a new, empty store.",
            )
        self._let_go_of_old_file()
        self._conn = open_store(self.path)
        self._identity = self._current_identity()
        self._opened = True
        self._pin()
        return self._conn

    def _pin(self) -> None:
        self._conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # SQLite now has both open
        for suffix in SIDECARS:
            try:
                self._pins[suffix] = os.open(f"{self.path}{suffix}", os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                pass

    def _let_go_of_old_file(self) -> None:
        """Before opening a new file at our path: make sure the old file's -wal/-shm are gone."""
        left = {suffix: os.fstat(fd) for suffix, fd in self._pins.items()
                if self._current_identity(suffix) == _file_id(os.fstat(fd))}
        if any(_locked_by_other_process(st) for st in left.values()):
            raise BridgeError(
                "store_missing",
                f"the store file {self.path} was replaced while another agent-bridge process still has "
                "the old file open; nothing was written. Retry shortly: each server and listener lets "
                "go of the old file on its next call (or restart them).",
            )
        for suffix, st in left.items():
            path = f"{self.path}{suffix}"
            if self._current_identity(suffix) == _file_id(st):
                with contextlib.suppress(FileNotFoundError):  # another process got there first
                    os.unlink(path)  # the old file's, and no process uses it any more
                log.warning("stale_sidecar_removed", file=path)
        # Only with no connection of ours open: closing any descriptor of a file drops this
        # process's POSIX locks on it, SQLite's included.
        for fd in self._pins.values():
            os.close(fd)
        self._pins.clear()

    def _drop_connection(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
            self._identity = None

    def close(self) -> None:
        self._drop_connection()
        for fd in self._pins.values():
            os.close(fd)
        self._pins.clear()
