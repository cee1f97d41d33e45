"""The PostgreSQL connector: a psycopg 3 connection that the store's query functions use
exactly as they use a SQLite one.

The query functions are written once, in the SQL both engines share. What differs is kept
here, in one place:
- placeholders: ``?`` and ``:name`` become psycopg's ``%s`` and ``%(name)s`` (``translate``);
- how a transaction starts: SQLite's ``BEGIN IMMEDIATE`` takes the store's one write lock up
  front, so every check a write transaction makes holds until it commits. Here the same
  statement starts a transaction and takes one transaction-scoped advisory lock, the store's
  write lock: the read-then-write transactions keep the semantics they were proven under (the
  claim and turn races), with no row-lock or retry logic spread over the domain. A plain
  ``BEGIN`` (a consistent read) is REPEATABLE READ, SQLite's snapshot;
- rows: read by column name or position, as ``sqlite3.Row`` is;
- the schema version, migrations (under their own advisory lock, so two servers starting
  together migrate once) and the "did anything change?" number.
psycopg is imported only by this module, and only a ``postgresql://`` store loads it.
"""

import contextlib
import functools
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import psycopg
from psycopg.rows import RowMaker

from dispatcher.core.errors import BridgeError
from dispatcher.store.errors import PostgresCorruption, PostgresError, PostgresIntegrityError, PostgresTransientError
from dispatcher.store.postgres_schema import MIGRATIONS

# Advisory lock keys (any two distinct bigints; these spell "ab-write" and "ab-migr").
WRITE_LOCK_KEY = 0x61622D7772697465
MIGRATION_LOCK_KEY = 0x61622D6D696772
CONNECT_TIMEOUT_SECONDS = 10

# A quoted literal or identifier (left alone), a ``?``, a ``:name`` (not a ``::cast``), or a ``%``.
_TOKEN = re.compile(r"""'(?:[^']|'')*'|"(?:[^"]|"")*"|\?|(?<!:):([A-Za-z_]\w*)|%""")


@functools.lru_cache(maxsize=1024)
def translate(statement: str) -> str:
    """A statement in the shared dialect (``?`` or ``:name`` placeholders) in psycopg's."""

    def replace(match: re.Match[str]) -> str:
        found = match.group(0)
        if found == "?":
            return "%s"
        if found == "%":
            return "%%"
        if match.group(1) is not None:
            return f"%({match.group(1)})s"
        return found  # a quoted literal or identifier

    return _TOKEN.sub(replace, statement)


class Row(tuple[Any, ...]):
    """A row read by position or by column name, like ``sqlite3.Row``."""

    _names: dict[str, int]

    def __new__(cls, values: Sequence[Any], names: dict[str, int]) -> "Row":
        row = super().__new__(cls, values)
        row._names = names
        return row

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return super().__getitem__(self._names[key])
        return super().__getitem__(key)

    def keys(self) -> list[str]:
        return list(self._names)


def _row_factory(cursor: "psycopg.Cursor[Any]") -> RowMaker[Row]:
    names = {column.name: index for index, column in enumerate(cursor.description or ())}
    return lambda values: Row(values, names)


_TRANSIENT = (
    psycopg.OperationalError,  # the connection is gone, the server shuts down or restarts
    psycopg.errors.SerializationFailure,
    psycopg.errors.DeadlockDetected,
    psycopg.errors.LockNotAvailable,
    psycopg.errors.QueryCanceled,
)
_CORRUPT = (psycopg.errors.DataCorrupted, psycopg.errors.IndexCorrupted)


@contextlib.contextmanager
def _boundary_errors() -> Iterator[None]:
    """psycopg's errors as the store's boundary names them (``store.errors``), cause kept."""
    try:
        yield
    except psycopg.Error as exc:
        kind: type[PostgresError] = PostgresError
        if isinstance(exc, psycopg.IntegrityError):
            kind = PostgresIntegrityError
        elif isinstance(exc, _CORRUPT):
            kind = PostgresCorruption
        elif isinstance(exc, _TRANSIENT):
            kind = PostgresTransientError
        raise kind(f"{type(exc).__name__}: {exc}") from exc


def _bound(value: Any) -> Any:
    # SQLite binds a float NaN as NULL; PostgreSQL would store a NaN that compares above every
    # number (a NaN lease would be active for ever). The rules are written for SQLite's reading.
    return None if isinstance(value, float) and math.isnan(value) else value


def _as_sqlite_binds(parameters: Sequence[Any] | dict[str, Any]) -> Sequence[Any] | dict[str, Any]:
    if isinstance(parameters, dict):
        return {name: _bound(value) for name, value in parameters.items()}
    return [_bound(value) for value in parameters]


class PostgresConnection:
    """The subset of ``sqlite3.Connection`` the store's query functions use, over psycopg."""

    def __init__(self, conn: "psycopg.Connection[Row]") -> None:
        self.raw = conn

    def execute(self, statement: str, parameters: Sequence[Any] | dict[str, Any] = ()) -> "psycopg.Cursor[Row]":
        with _boundary_errors():
            if statement == "BEGIN IMMEDIATE":
                self.raw.execute("BEGIN")
                try:
                    return self.raw.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK_KEY,))
                except BaseException:
                    with contextlib.suppress(psycopg.Error):  # as in SQLite, a failed BEGIN leaves no transaction
                        self.raw.execute("ROLLBACK")
                    raise
            if statement == "BEGIN":
                return self.raw.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            return self.raw.execute(translate(statement), _as_sqlite_binds(parameters) or None)

    def executemany(self, statement: str, rows: Iterable[Sequence[Any]]) -> "psycopg.Cursor[Row]":
        cursor = self.raw.cursor()
        with _boundary_errors():
            cursor.executemany(translate(statement), (_as_sqlite_binds(row) for row in rows))
        return cursor

    @property
    def in_transaction(self) -> bool:
        return self.raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE

    def close(self) -> None:
        self.raw.close()


def schema_version(conn: PostgresConnection) -> int:
    found = conn.raw.execute("SELECT to_regclass('bridge_schema') IS NOT NULL").fetchone()
    if not found or not found[0]:
        return 0
    row = conn.raw.execute("SELECT version FROM bridge_schema").fetchone()
    return int(row[0]) if row else 0


def data_version(conn: PostgresConnection) -> int:
    """A number that moves whenever a transaction that wrote anything has begun on the server
    since the last look (the next transaction id): a wake-up loop's cheap "anything changed?"
    hint, conservative like SQLite's ``data_version`` (it may move for nothing, never stays still
    after a commit)."""
    row = conn.raw.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text").fetchone()
    return int(row[0]) if row else 0


def migrate(conn: PostgresConnection, url: str, target: int) -> None:
    """Bring the schema to ``target`` in one transaction, under the migration lock: of two
    processes starting together, the second finds the work done."""
    newest = len(MIGRATIONS)
    with conn.raw.transaction():
        conn.raw.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_KEY,))
        conn.raw.execute("CREATE TABLE IF NOT EXISTS bridge_schema (version integer NOT NULL)")
        found = schema_version(conn)
        if found > newest:
            raise schema_too_new(url, found, newest)
        for version in range(found + 1, target + 1):
            migration = MIGRATIONS[version - 1]
            if migration:
                conn.raw.execute(migration.encode())
        if target > found:
            conn.raw.execute("DELETE FROM bridge_schema")
            conn.raw.execute("INSERT INTO bridge_schema (version) VALUES (%s)", (max(found, target),))


def schema_too_new(url: str, found: int, known: int) -> BridgeError:
    return BridgeError(
        "schema_too_new",
        f"store {redacted(url)} has schema version {found}, but this agent-bridge knows only up to "
        f"{known}; upgrade agent-bridge (nothing was written).",
    )


def redacted(url: str) -> str:
    """The URL without its password, for messages and logs."""
    return re.sub(r"(://[^:/@]*):[^@/]*@", r"\1:***@", url)


def open_postgres(url: str, *, target_version: int) -> PostgresConnection:
    """Connect (autocommit: the store's statements start their own transactions) and migrate."""
    try:
        raw = psycopg.connect(url, autocommit=True, row_factory=_row_factory, connect_timeout=CONNECT_TIMEOUT_SECONDS)
    except psycopg.OperationalError as exc:
        raise BridgeError(
            "store_unavailable",
            f"could not connect to the PostgreSQL store {redacted(url)} ({exc}); nothing was written. "
            "Check that the server runs and that AGENT_BRIDGE_DB names it, then retry.",
        ) from exc
    conn = PostgresConnection(raw)
    try:
        found = schema_version(conn)
        if found > len(MIGRATIONS):
            raise schema_too_new(url, found, len(MIGRATIONS))
        if found < target_version:
            migrate(conn, url, target_version)
    except BaseException:
        raw.close()
        raise
    return conn
