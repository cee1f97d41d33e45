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

The same holds the other way round when the -shm (or -wal) of the *same* file is deleted
or replaced: the processes still mapping the old -shm and those that would create a new
one no longer share a write lock or an index, so they would hand out the same ids and
overwrite each other's WAL frames. So the handle checks its -wal/-shm whenever a name of
the store's files came or went (inotify, ``file_events``: a call where nothing happened costs one
``poll(2)``, not three stats; without inotify, three stats on every call), drops its connection
when either changed, and refuses with ``store_missing``
until no other process holds a lock on the old -shm; the last process to let go
checkpoints its WAL into the file, as SQLite does on every last close. A handle opening
the store refuses likewise while a sidecar is missing yet another process has the file
open (it can only be using a deleted one), unless the file is still empty: another process is
creating it, and nothing is in WAL mode yet.
"""

import contextlib
import os
import sqlite3
import time
from pathlib import Path

from dispatcher.core import clock
from dispatcher.core.errors import BridgeError
from dispatcher.core.file_events import NAME_CHANGES, FileEvents
from dispatcher.core.locations import StoreLocation, StoreUrl, is_postgres_url, store_path
from dispatcher.core.logs import get_logger
from dispatcher.core.processes import lock_holders
from dispatcher.store.connection import open_sqlite
from dispatcher.store.types import StoreHandle

SIDECARS = ("-wal", "-shm")
# How long an opener waits for another process's open (or last close) to create (or
# remove) the -wal/-shm before calling the store split.
SIDECAR_GRACE_SECONDS = 2.0
log = get_logger("agent_bridge.store")


def _file_id(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _locked_by_other_process(st: os.stat_result, *, unknown: bool = True) -> bool:
    """Whether another process holds a lock on this file (SQLite's -shm locks, or the
    SHARED lock every open WAL connection keeps on the store file); ``unknown`` when
    /proc/locks cannot be read."""
    holders = lock_holders(st)
    if holders is None:
        return unknown
    return any(pid != os.getpid() for pid in holders)


def open_handle(location: StoreLocation | str) -> StoreHandle:
    """The long-lived handle on the store ``AGENT_BRIDGE_DB`` names (nothing is opened yet)."""
    if is_postgres_url(location):
        from dispatcher.store.postgres import PostgresStore  # psycopg only for a PostgreSQL store

        return PostgresStore(StoreUrl(location))
    return SqliteStore(Path(location))


class SqliteStore:
    spans_hosts = False  # a SQLite file is one host's (its locks do not cross a network file system)

    def __init__(self, path: Path | str) -> None:
        self.path = store_path(Path(path))  # the sidecars are next to the real file
        self.location: StoreLocation = self.path
        self._conn: sqlite3.Connection | None = None
        self._identity: tuple[int, int] | None = None  # of the file we opened, kept after a drop
        self._pins: dict[str, int] = {}
        self._pinned_ids: dict[str, tuple[int, int]] = {}
        self._names: FileEvents | None = None  # the store's file names coming or going

    def _current_identity(self, suffix: str = "") -> tuple[int, int] | None:
        try:
            return _file_id(os.stat(f"{self.path}{suffix}"))
        except FileNotFoundError:
            return None

    def _sidecars_changed(self) -> bool:
        return any(self._current_identity(suffix) != pinned for suffix, pinned in self._pinned_ids.items())

    def connection(self) -> sqlite3.Connection:
        if self._conn is not None and self._names is not None and not self._names.changed():
            return self._conn  # no name of the file, -wal or -shm came or went: the same files
        if self._names is None:  # watched before the look below: no change falls between the two
            self._names = FileEvents([Path(f"{self.path}{suffix}") for suffix in ("", *SIDECARS)], mask=NAME_CHANGES)
        identity = self._current_identity()
        if self._conn is not None and identity == self._identity and not self._sidecars_changed():
            return self._conn
        if self._conn is not None and identity == self._identity:
            log.warning("sidecar_changed", file=str(self.path))
        self._drop_connection()
        if identity is None and self._identity is not None:
            raise BridgeError(
                "store_missing",
                f"the store file {self.path} was deleted while in use; nothing was written. Restore "
                "it, or restart the bridge to begin a new, empty store.",
            )
        self._let_go(same_file=identity is not None and identity == self._identity)
        self._refuse_while_split()
        self._conn = conn = open_sqlite(self.path)
        opened = self._current_identity()
        if identity is not None and opened != identity:
            # Replaced while being opened: SQLite may hold either file, and the -wal/-shm pinned
            # next would be the other one's. Start again on whatever is there now.
            self._drop_connection()
            self._identity = None
            return self.connection()
        self._identity = opened
        self._pin(conn)
        return conn

    def _pin(self, conn: sqlite3.Connection) -> None:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # SQLite now has both open
        for suffix in SIDECARS:
            try:
                fd = os.open(f"{self.path}{suffix}", os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                continue
            self._pins[suffix] = fd
            self._pinned_ids[suffix] = _file_id(os.fstat(fd))

    def _let_go(self, *, same_file: bool) -> None:
        """Before (re)opening: make sure no process still uses the -wal/-shm we pinned.

        Same file: the pinned sidecars that are no longer at their names are the orphans.
        A replaced file: the pinned ones still at their names are the old file's; they are
        removed once unused, or SQLite would replay them into the new file."""
        pinned = {suffix: os.fstat(fd) for suffix, fd in self._pins.items()}
        old = {
            suffix: st for suffix, st in pinned.items() if (self._current_identity(suffix) == _file_id(st)) != same_file
        }
        if any(_locked_by_other_process(st) for st in old.values()):
            raise BridgeError("store_missing", self._still_in_use(same_file))
        if not same_file:
            for suffix, st in old.items():
                path = f"{self.path}{suffix}"
                if self._current_identity(suffix) == _file_id(st):
                    with contextlib.suppress(FileNotFoundError):  # another process got there first
                        os.unlink(path)  # the old file's, and no process uses it any more
                    log.warning("stale_sidecar_removed", file=path)
        # Only with no connection of ours open: closing any descriptor of a file drops this
        # process's POSIX locks on it, SQLite's included.
        self._unpin()

    def _still_in_use(self, same_file: bool) -> str:
        if same_file:
            return (
                f"the store's {self.path.name}-shm/-wal files were deleted or replaced while in use, and another "
                "agent-bridge process still uses the old ones; nothing was written. Retry shortly: each server "
                "and listener lets go of them on its next call (or restart them). Never delete -wal/-shm by hand."
            )
        return (
            f"the store file {self.path} was replaced while another agent-bridge process still has "
            "the old file open; nothing was written. Retry shortly: each server and listener lets "
            "go of the old file on its next call (or restart them)."
        )

    def _refuse_while_split(self) -> None:
        """A missing -wal/-shm while another process has the file open: it is using deleted
        ones, and a new pair would split the store in two."""
        deadline = clock.monotonic() + SIDECAR_GRACE_SECONDS
        while True:
            try:
                st = os.stat(self.path)
            except FileNotFoundError:
                return  # a new store
            if st.st_size == 0:
                return  # a store another process is creating: nothing is in WAL mode yet, nothing to split
            complete = all(self._current_identity(suffix) is not None for suffix in SIDECARS)
            if complete or not _locked_by_other_process(st, unknown=False):
                return
            if clock.monotonic() > deadline:
                raise BridgeError("store_missing", self._still_in_use(same_file=True))
            time.sleep(0.05)

    def _drop_connection(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _unpin(self) -> None:
        for fd in self._pins.values():
            os.close(fd)
        self._pins.clear()
        self._pinned_ids.clear()

    def close(self) -> None:
        self._drop_connection()
        self._unpin()
        if self._names is not None:
            self._names.close()
            self._names = None
