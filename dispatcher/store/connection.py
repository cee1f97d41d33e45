"""The connection recipe: file modes, WAL switch, pragmas, migrations, transactions."""

import os
import sqlite3
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dispatcher.core import clock
from dispatcher.core.errors import BridgeError, StateChangedError
from dispatcher.core.locations import is_postgres_url
from dispatcher.core.private_files import ensure_private_dir
from dispatcher.store.busy import BUSY_TIMEOUT_MS
from dispatcher.store.migrations import MIGRATIONS, SCHEMA_VERSION
from dispatcher.store.types import Connection, Cursor

# Small pages: a send commits one table page and one index page to the WAL, and with
# 1 KiB pages that is ~20% faster than the 4 KiB default; messages are mostly small.
# (bench/ measures it: domain-layer sends went from ~45% to ~53% of raw inserts.)
PAGE_SIZE = 1024
WAL_SWITCH_DEADLINE_SECONDS = 30.0
# The -wal file's size bound: each time SQLite starts the WAL over (after a checkpoint that
# took every frame) it trims the file to this. A burst grows it past the bound until then;
# an idle listener truncates it (``shrink_wal``), so it never stays at a burst's high-water mark.
JOURNAL_SIZE_LIMIT_BYTES = 4 * 1024 * 1024
# How long the idle truncation waits for a reader or writer before it gives up (until next time).
SHRINK_WAL_BUSY_MS = 200


class SchemaTooNewError(BridgeError):
    def __init__(self, path: Path, found: int) -> None:
        super().__init__(
            "schema_too_new",
            f"store {path} has schema version {found}, but this agent-bridge knows only up to "
            f"{SCHEMA_VERSION}; upgrade agent-bridge (nothing was written).",
        )


def refuse_a_directory(path: Path) -> None:
    """A store path that names a directory is refused with what to set instead."""
    if path.is_dir():
        raise BridgeError(
            "path_unusable",
            f"the store path {path} is a directory, not a file; set AGENT_BRIDGE_DB to a file, "
            f"e.g. {path / 'bridge.db'}. Nothing was written.",
        )


def prepare_store_dir(path: Path) -> None:
    """The store's directory: created 0700 with every missing parent, refused (``unsafe_path``)
    if it is a link or another user's; an existing one is not narrowed (it may be a shared folder).
    A listener calls it at start, before it takes any lock."""
    ensure_private_dir(path.parent, "store directory", tighten=False)


def _prepare_file(path: Path) -> None:
    prepare_store_dir(path)
    # Create the file ourselves so it is 0600 from its first byte; SQLite gives the
    # -wal and -shm files the same mode as the database file. Never open and close an
    # existing store: closing any descriptor of a file drops all of this process's POSIX
    # locks on it, SQLite's included, and another process closing its connection would then
    # take itself for the last one and checkpoint and delete -wal/-shm under ours.
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        refuse_a_directory(path)
        return
    os.close(fd)


class TrackedConnection(sqlite3.Connection):
    """A store connection that this process can count, so nothing forks while one is open.

    SQLite keeps per-process lock bookkeeping for every open file; a forked child inherits
    that bookkeeping but not the POSIX locks behind it, so the child's own connections would
    run unlocked. ``open_connections()`` lets a forking caller refuse instead.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _open_connections.add(self)

    def close(self) -> None:
        _open_connections.discard(self)
        super().close()


# Weak: a connection dropped without close() is closed by SQLite when collected.
_open_connections: "weakref.WeakSet[TrackedConnection]" = weakref.WeakSet()


def open_connections() -> int:
    """How many store connections this process has open."""
    return len(_open_connections)


def _switch_to_wal(conn: sqlite3.Connection) -> None:
    # On a file not yet in WAL, another connection's lock makes this fail at once
    # (the busy handler is not consulted), so retry until a deadline.
    deadline = clock.monotonic() + WAL_SWITCH_DEADLINE_SECONDS
    delay = 0.005
    while True:
        try:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if mode.lower() == "wal":
                return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
        if clock.monotonic() > deadline:
            raise BridgeError("store_busy", "could not switch the store to WAL mode: it stayed locked for 30 s.")
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


def inserted_id(cursor: Cursor) -> int:
    """The id of the row an ``INSERT ... RETURNING id`` on ``cursor`` just added (the same
    statement on both connectors; SQLite's ``lastrowid`` has no PostgreSQL twin)."""
    # fetchall, not fetchone: SQLite commits an autocommit statement only once it has run to its end.
    rows = cursor.fetchall()
    if len(rows) != 1:
        raise RuntimeError(f"an INSERT ... RETURNING id returned {len(rows)} rows")
    return int(rows[0][0])


def schema_version(conn: Connection) -> int:
    if not isinstance(conn, sqlite3.Connection):
        from dispatcher.store.postgres import schema_version as postgres_schema_version

        return postgres_schema_version(conn)
    version: int = conn.execute("PRAGMA user_version").fetchone()[0]
    return version


def migrate(conn: sqlite3.Connection, path: Path, target: int = SCHEMA_VERSION) -> None:
    # Foreign keys off while migrating (a table rebuild drops the table others point at; the
    # pragma is a no-op inside a transaction), and every key checked before the commit.
    conn.execute("PRAGMA foreign_keys = OFF")
    try:
        with write_transaction(conn):
            found = schema_version(conn)
            if found > SCHEMA_VERSION:
                raise SchemaTooNewError(path, found)
            for version in range(found + 1, target + 1):
                _apply(conn, MIGRATIONS[version - 1])
                conn.execute(f"PRAGMA user_version = {version}")
            if broken := conn.execute("PRAGMA foreign_key_check").fetchall():
                raise RuntimeError(f"migrating {path} would break foreign keys: {[tuple(r) for r in broken[:5]]}")
    finally:
        conn.execute("PRAGMA foreign_keys = ON")


def _apply(conn: sqlite3.Connection, migration: str | Callable[[sqlite3.Connection], None]) -> None:
    if callable(migration):
        migration(conn)
        return
    for statement in migration.split(";"):
        if statement.strip():
            conn.execute(statement)


def open_store(location: Path | str, *, target_version: int = SCHEMA_VERSION) -> Connection:
    """Open (creating if needed) and migrate the store; safe for many processes at once.
    A ``postgresql://`` URL opens the PostgreSQL connector (psycopg is loaded only then)."""
    if is_postgres_url(location):
        from dispatcher.store.postgres import open_postgres

        return open_postgres(str(location), target_version=target_version)
    return open_sqlite(Path(location), target_version=target_version)


def open_sqlite(path: Path, *, target_version: int = SCHEMA_VERSION) -> sqlite3.Connection:
    """``open_store`` for a SQLite file."""
    _prepare_file(path)
    conn = sqlite3.connect(
        path,
        timeout=BUSY_TIMEOUT_MS / 1000,
        isolation_level=None,
        check_same_thread=False,
        factory=TrackedConnection,
    )
    try:
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        # Refuse a newer store before anything (even the WAL switch) writes to it.
        found = schema_version(conn)
        if found > SCHEMA_VERSION:
            raise SchemaTooNewError(path, found)
        if found == 0:
            conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")  # only takes effect on a new, empty file
        _switch_to_wal(conn)
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute(f"PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT_BYTES}")
        conn.execute("PRAGMA foreign_keys = ON")
        if found < target_version:
            migrate(conn, path, target_version)
    except BaseException:
        conn.close()
        raise
    return conn


def wal_size(conn: Connection) -> int:
    """Bytes in the store's -wal file (next to the file SQLite opened, a link resolved); 0 if none
    (and on PostgreSQL, which has no such file)."""
    if not isinstance(conn, sqlite3.Connection):
        return 0
    main = next(row[2] for row in conn.execute("PRAGMA database_list") if row[1] == "main")
    try:
        return os.stat(f"{main}-wal").st_size
    except OSError:
        return 0


def shrink_wal(conn: Connection) -> bool:
    """When the -wal is past ``JOURNAL_SIZE_LIMIT_BYTES``: checkpoint every frame into the store and
    truncate the -wal to 0 bytes (waiting at most ``SHRINK_WAL_BUSY_MS`` for others). True if it did."""
    if wal_size(conn) <= JOURNAL_SIZE_LIMIT_BYTES:
        return False
    conn.execute(f"PRAGMA busy_timeout = {SHRINK_WAL_BUSY_MS}")
    try:
        blocked: int = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
    finally:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    return blocked == 0


@contextmanager
def write_transaction(conn: Connection) -> Iterator[Connection]:
    """BEGIN IMMEDIATE: take the write lock up front, so checks and writes see one state.

    Any refusal rolls back everything the transaction wrote; a ``StateChangedError`` then
    records its rule's move (only that) in a transaction of its own."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except StateChangedError as exc:
        conn.execute("ROLLBACK")
        with write_transaction(conn):
            exc.keep(conn)
        raise
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
