"""The PostgreSQL connector: a psycopg 3 connection that the store's query functions use
exactly as they use a SQLite one.

The query functions are written once, in the SQL both engines share. What differs is kept
here, in one place:
- placeholders: ``?`` and ``:name`` become psycopg's ``%s`` and ``%(name)s`` (``translate``);
- how a transaction starts: SQLite's ``BEGIN IMMEDIATE`` takes the store's one write lock up
  front, so every check a write transaction makes holds until it commits. Here the same
  statement starts a transaction and takes the store's write lock (schema 18: a lock on the table
  ``bridge_write_lock``, which only the owner and the mapped agents' roles may lock, and which ends
  with the transaction): the read-then-write transactions keep the
  semantics they were proven under (the claim and turn races), with no row-lock or retry logic
  spread over the domain. A plain ``BEGIN`` (a consistent read) is REPEATABLE READ, SQLite's snapshot;
- what is bounded (``SESSION_BOUNDS``, ``CLIENT_KEEPALIVES``): a wait for a lock as SQLite's busy
  timeout bounds it, a session left idle inside a transaction (a stopped or frozen writer) ended by
  the server, a peer that vanished found by TCP keepalives on both ends;
- rows: read by column name or position, as ``sqlite3.Row`` is;
- the schema version, migrations (under their own advisory lock, so two servers starting
  together migrate once) and the "did anything change?" number.
psycopg is imported only by this module, and only a ``postgresql://`` store loads it.
"""

import contextlib
import functools
import math
import re
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from dispatcher.core.errors import BridgeError, missing_extra

try:
    import psycopg
    import psycopg.adapt
    import psycopg.conninfo
    import psycopg.sql
    from psycopg.rows import RowMaker
except ImportError:
    raise missing_extra("AGENT_BRIDGE_DB naming a PostgreSQL store", "psycopg") from None
from dispatcher.core.locations import StoreLocation, StoreUrl, redacted
from dispatcher.store.busy import BUSY_TIMEOUT_MS
from dispatcher.store.errors import (
    PostgresConnectionLost,
    PostgresCorruption,
    PostgresError,
    PostgresIntegrityError,
    PostgresPermissionDenied,
    PostgresTransientError,
)
from dispatcher.store.postgres_schema import MIGRATIONS
from dispatcher.store.roles import regrant_mapped_roles
from dispatcher.store.types import Connection

# The migrations' advisory lock key (any bigint; this one spells "ab-migr").
MIGRATION_LOCK_KEY = 0x61622D6D696772
CONNECT_TIMEOUT_SECONDS = 10
# Each session's bounds, set at connect where the setting is still the server's built-in default:
# one the server's configuration, the database, the role or the URL sets (``ALTER ROLE ... SET
# lock_timeout``, ``?options=-c%20lock_timeout%3D5s``) wins. A lock wait gives up as SQLite's busy timeout does (``LockNotAvailable``, then
# ``store_unavailable``); a session idle inside a transaction for 30 s (a writer stopped, frozen or
# cut off while it held the write lock) is ended by the server, which releases its locks; TCP
# keepalives and a user timeout let the server end a session whose host vanished.
SESSION_BOUNDS = (
    ("lock_timeout", str(BUSY_TIMEOUT_MS)),
    ("idle_in_transaction_session_timeout", "30000"),
    ("tcp_keepalives_idle", "30"),
    ("tcp_keepalives_interval", "10"),
    ("tcp_keepalives_count", "3"),
    ("tcp_user_timeout", "60000"),
)
# The client's side of the same (libpq's connection parameters; a URL that names one keeps its
# own): a connection to a server that vanished (a partition, a frozen VM) fails within about a
# minute instead of when the kernel gives up (hours), so a waiter's wait ends and it reconnects.
CLIENT_KEEPALIVES = {
    "keepalives": "1",
    "keepalives_idle": "30",
    "keepalives_interval": "10",
    "keepalives_count": "3",
    "tcp_user_timeout": "60000",
}

# A quoted literal or identifier (left alone), a ``?``, a ``:name`` (not a ``::cast``), or a ``%``.
_TOKEN = re.compile(r"""'(?:[^']|'')*'|"(?:[^"]|"")*"|\?|(?<!:):([A-Za-z_]\w*)|%""")


# SQLite's spelling -> PostgreSQL's, for the few constructs the shared SQL cannot avoid: a list of
# ids bound as one JSON text (a batch of any size, one parameter) and the temporary schema.
_SPELLINGS = (
    ("(SELECT value FROM json_each(?))", "(SELECT value::bigint FROM json_array_elements_text(?::json))"),
    (" temp.", " pg_temp."),
)


@functools.lru_cache(maxsize=1024)
def translate(statement: str) -> str:
    """A statement in the shared dialect (``?`` or ``:name`` placeholders, SQLite's spellings
    above) in psycopg's."""
    for sqlite_spelling, postgres_spelling in _SPELLINGS:
        statement = statement.replace(sqlite_spelling, postgres_spelling)

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


class _NumericAsSqliteDoes(psycopg.adapt.Loader):
    """``numeric`` (what ``sum`` of a bigint column gives) as SQLite gives it: an int when whole,
    else a float; never a ``Decimal``, which SQLite never returns and JSON cannot carry."""

    def load(self, data: Any) -> int | float:
        text = bytes(data).decode()
        return int(text) if text.lstrip("-").isdigit() else float(text)


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
def _boundary_errors(raw: "psycopg.Connection[Any] | None" = None) -> Iterator[None]:
    """psycopg's errors as the store's boundary names them (``store.errors``), cause kept; a
    statement whose connection ``raw`` broke meanwhile is ``PostgresConnectionLost``."""
    try:
        yield
    except psycopg.Error as exc:
        kind: type[PostgresError] = PostgresError
        if raw is not None and isinstance(exc, psycopg.OperationalError) and (raw.broken or raw.closed):
            kind = PostgresConnectionLost
        elif isinstance(exc, psycopg.IntegrityError):
            kind = PostgresIntegrityError
        elif isinstance(exc, _CORRUPT):
            kind = PostgresCorruption
        elif isinstance(exc, _TRANSIENT):
            kind = PostgresTransientError
        elif isinstance(exc, psycopg.errors.InsufficientPrivilege):
            kind = PostgresPermissionDenied
        raise kind(f"{type(exc).__name__}: {exc}") from exc


def _bound(value: Any) -> Any:
    # SQLite binds a float NaN as NULL; PostgreSQL would store a NaN that compares above every
    # number (a NaN lease would be active for ever). The rules are written for SQLite's reading.
    return None if isinstance(value, float) and math.isnan(value) else value


def _as_sqlite_binds(parameters: Sequence[Any] | dict[str, Any]) -> Sequence[Any] | dict[str, Any]:
    if isinstance(parameters, dict):
        return {name: _bound(value) for name, value in parameters.items()}
    return [_bound(value) for value in parameters]


def _lock_wait_ended(exc: "psycopg.errors.LockNotAvailable") -> PostgresTransientError:
    """The store's write lock stayed taken past ``lock_timeout``, said as SQLite says it."""
    return PostgresTransientError(
        f"database is locked: another session held the store's write lock past lock_timeout "
        f"({type(exc).__name__}: {exc})"
    )


class PostgresConnection:
    """The subset of ``sqlite3.Connection`` the store's query functions use, over psycopg.

    A connection the server dropped (a restart, ``pg_terminate_backend``, a failover) fails the
    statement that met the drop, and is opened again by the next statement that starts something
    (never inside a transaction that was under way: its COMMIT fails, nothing is replayed)."""

    def __init__(self, conn: "psycopg.Connection[Row]", url: str) -> None:
        self.raw = conn
        self._url = url
        self._transaction_open = False
        self._session: list[str] = []  # run again on each new connection (``keep_for_the_session``)
        self._closed = False  # by its owner, for good

    def keep_for_the_session(self, statement: str) -> None:
        """Run a ``SET`` now and on every connection opened again after a drop."""
        self.raw.execute(statement)
        self._session.append(statement)

    def execute(self, statement: str, parameters: Sequence[Any] | dict[str, Any] = ()) -> "psycopg.Cursor[Row]":
        if statement in ("COMMIT", "ROLLBACK"):
            self._transaction_open = False
        elif (self.raw.broken or self.raw.closed) and not (self._transaction_open or self._closed):
            with _boundary_errors():
                self.raw = self._reconnected()
        with _boundary_errors(self.raw):
            if statement == "BEGIN IMMEDIATE":
                self.raw.execute("BEGIN")
                self._transaction_open = True
                try:
                    return self.raw.execute("LOCK TABLE bridge_write_lock IN EXCLUSIVE MODE")
                except psycopg.errors.LockNotAvailable as exc:
                    self._rollback_quietly()
                    raise _lock_wait_ended(exc) from exc
                except BaseException:
                    self._rollback_quietly()
                    raise
            if statement == "BEGIN":
                self._transaction_open = True
                return self.raw.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            return self.raw.execute(translate(statement), _as_sqlite_binds(parameters) or None)

    def _reconnected(self) -> "psycopg.Connection[Row]":
        """A new connection with this one's session settings (all of them, or none: it is dropped)."""
        self.raw.close()
        raw = _connect(self._url)
        try:
            for kept in self._session:
                raw.execute(kept)
        except BaseException:
            raw.close()
            raise
        return raw

    def _rollback_quietly(self) -> None:
        """As in SQLite, a failed BEGIN leaves no transaction."""
        self._transaction_open = False
        with contextlib.suppress(psycopg.Error):
            self.raw.execute("ROLLBACK")

    def executemany(self, statement: str, rows: Iterable[Sequence[Any]]) -> "psycopg.Cursor[Row]":
        cursor = self.raw.cursor()
        with _boundary_errors(self.raw):
            cursor.executemany(translate(statement), (_as_sqlite_binds(row) for row in rows))
        return cursor

    @property
    def in_transaction(self) -> bool:
        return self.raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE

    def close(self) -> None:
        self._closed = True
        self.raw.close()


def _postgres(conn: Connection) -> PostgresConnection:
    if not isinstance(conn, PostgresConnection):
        raise TypeError(f"a PostgreSQL store connection was expected, not {type(conn).__name__}")
    return conn


def schema_version(conn: Connection) -> int:
    conn = _postgres(conn)
    found = conn.raw.execute("SELECT to_regclass('bridge_schema') IS NOT NULL").fetchone()
    if not found or not found[0]:
        return 0
    row = conn.raw.execute("SELECT version FROM bridge_schema").fetchone()
    return int(row[0]) if row else 0


def data_version(conn: Connection) -> int:
    """A number that moves whenever a transaction that wrote anything ended on the server since the
    last look: a wake-up loop's cheap "anything changed?" hint, conservative like SQLite's
    ``data_version`` (it may move for nothing, never stays still after a commit).

    It counts the transaction ids below the snapshot's ``xmax`` that are no longer in progress
    (``xmax`` less the in-progress list). A commit of a transaction that began before a younger
    one committed leaves ``xmax`` where it was, but leaves the in-progress list: it moves this
    count all the same. A transaction that merely began moves neither (``xmax`` and the list grow
    together). Transactions of other databases on the server count too (a move for nothing)."""
    row = _postgres(conn).execute(DATA_VERSION_QUERY).fetchone()
    return int(row[0]) if row else 0


DATA_VERSION_QUERY = (
    "SELECT pg_snapshot_xmax(s)::text::bigint - (SELECT count(*) FROM pg_snapshot_xip(s)) "
    "FROM pg_current_snapshot() AS s"
)


def migrate(conn: PostgresConnection, url: str, target: int) -> None:
    """Bring the schema to ``target`` in one transaction, under the migration lock: of two
    processes starting together, the second finds the work done."""
    newest = len(MIGRATIONS)
    with conn.raw.transaction():
        # Another process's migration may take long: wait it out (a stopped one is ended by the
        # server, idle_in_transaction_session_timeout), rather than give up at the busy timeout.
        conn.raw.execute("SET LOCAL lock_timeout = 0")
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
            conn.raw.execute("INSERT INTO bridge_schema (version) VALUES (%s)", (target,))
        if target == newest > found:  # each agent's role gets this version's grants (its columns)
            regrant_mapped_roles(conn)


def schema_too_new(url: str, found: int, known: int) -> BridgeError:
    return BridgeError(
        "schema_too_new",
        f"store {redacted(url)} has schema version {found}, but this agent-bridge knows only up to "
        f"{known}; upgrade agent-bridge (nothing was written).",
    )


def schema_needs_owner(url: str, found: int, target: int, role: str) -> BridgeError:
    """A role that may not change the schema (an agent's own role) met one older than the code."""
    return BridgeError(
        "schema_needs_owner",
        f"store {redacted(url)} has schema version {found} for role {role!r}, this agent-bridge needs {target}, "
        "and that role may not create or migrate it (no DDL rights, or no access to the store's schema; nothing "
        "was written); run agent-bridge once with AGENT_BRIDGE_DB naming the store's owner role (e.g. "
        f"`agent-bridge db-role AGENT --role {role}`, which migrates and grants), then retry.",
    )


def connect_bounded(url: str, **kwargs: Any) -> "psycopg.Connection[Any]":
    """``psycopg.connect`` (autocommit) with the connect timeout and ``CLIENT_KEEPALIVES`` (those the
    URL does not name), and ``SESSION_BOUNDS`` set where nobody configured them."""
    named = psycopg.conninfo.conninfo_to_dict(url)
    keepalives = {name: value for name, value in CLIENT_KEEPALIVES.items() if name not in named}
    conninfo = psycopg.conninfo.make_conninfo(url, **keepalives)
    raw = psycopg.connect(conninfo, autocommit=True, connect_timeout=CONNECT_TIMEOUT_SECONDS, **kwargs)
    try:
        raw.execute(
            "SELECT set_config(name, value, false) FROM unnest(%s::text[], %s::text[]) AS bound (name, value) "
            "JOIN pg_settings USING (name) WHERE source = 'default'",
            [[name for name, _ in SESSION_BOUNDS], [value for _, value in SESSION_BOUNDS]],
        )
    except BaseException:
        raw.close()
        raise
    return raw


def _connect(url: str) -> "psycopg.Connection[Row]":
    """A store connection: bounded, rows as ``Row``, ``numeric`` as SQLite reads it."""
    raw = connect_bounded(url, row_factory=_row_factory)
    raw.adapters.register_loader("numeric", _NumericAsSqliteDoes)
    return raw


def open_postgres(url: str, *, target_version: int) -> PostgresConnection:
    """Connect (autocommit: the store's statements start their own transactions) and migrate."""
    try:
        raw = _connect(url)
    except psycopg.OperationalError as exc:
        raise BridgeError(
            "store_unavailable",
            f"could not connect to the PostgreSQL store {redacted(url)} ({exc}); nothing was written. "
            "Check that the server runs and that AGENT_BRIDGE_DB names it, then retry.",
        ) from exc
    conn = PostgresConnection(raw, url)
    try:
        try:
            found = schema_version(conn)
        except psycopg.errors.InsufficientPrivilege as exc:
            raise BridgeError(
                "store_permission_denied",
                f"role {raw.info.user!r} may not read the store {redacted(url)} (nothing was written); as the "
                "store's owner, run `agent-bridge db-role AGENT --role ROLE` to let it act as AGENT.",
            ) from exc
        if found > len(MIGRATIONS):
            raise schema_too_new(url, found, len(MIGRATIONS))
        if found < target_version:
            try:
                migrate(conn, url, target_version)
            except (psycopg.errors.InsufficientPrivilege, psycopg.errors.InvalidSchemaName) as exc:
                raise schema_needs_owner(url, found, target_version, raw.info.user) from exc
    except BaseException:
        raw.close()
        raise
    return conn


class PostgresStore:
    """The long-lived handle on a PostgreSQL store (servers, listeners): one connection, opened
    and migrated on first use, and opened again on the next call after the server dropped it
    (a restart, ``pg_terminate_backend``). The call that met the drop fails ``store_unavailable``,
    saying that a COMMIT (or an autocommit statement) whose answer was lost may have been committed."""

    spans_hosts = True

    def __init__(self, url: StoreUrl) -> None:
        self.location: StoreLocation = url
        self._url = url
        self._conn: PostgresConnection | None = None

    def connection(self) -> PostgresConnection:
        if self._conn is not None and not (self._conn.raw.closed or self._conn.raw.broken):
            return self._conn
        self.close()
        self._conn = open_postgres(self._url, target_version=len(MIGRATIONS))
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


# The connections a forked child inherited and must never close (``ChangeNotices.forget``).
_FORGOTTEN: list[Any] = []


def channel(agent: str) -> str:
    """The NOTIFY channel of an agent's inbox (the schema's trigger writes the same name)."""
    return f"agent_bridge:{agent}"


class ChangeNotices:
    """A LISTEN on one agent's channel, on a connection of its own (autocommit, as LISTEN needs):
    its descriptor becomes readable when a message to the agent is written or changed. Only a
    hint: a notice sent while nobody listened is lost, so a waiter always re-queries, and a
    dropped connection is opened again (``reconnect``) before the next look: in the waiter's
    thread (``fileno``), or by an event loop in a worker thread, so that a server that does not
    answer blocks no loop (``listening`` is None until then: poll)."""

    def __init__(self, url: StoreUrl, agent: str) -> None:
        self._url, self._agent = url, agent
        self._conn: psycopg.Connection[Any] | None = None
        self._reconnecting = threading.Lock()  # one reconnect at a time, whichever thread asks
        self._closed = False  # for good: a reconnect still under way then drops what it opens
        self.reconnect()

    def listening(self) -> int | None:
        """The LISTEN connection's descriptor, or None while there is none (closed, or dropped)."""
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            return None
        return conn.fileno()

    def reconnect(self) -> None:
        """LISTEN again on a new connection if there is none (blocking: up to the connect timeout
        for a server that does not answer). Safe from a worker thread; what was sent meanwhile is
        lost, so the caller re-queries."""
        with self._reconnecting:
            if self.listening() is not None or self._closed:
                return
            self._drop()
            try:
                conn = connect_bounded(self._url)
            except psycopg.Error:
                return
            try:
                conn.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(channel(self._agent))))
            except psycopg.Error:
                conn.close()
                return
            self._conn = conn
            if self._closed:  # closed while connecting (an abandoned wait's worker thread): after
                self._drop()  # the assignment, so that either this or close() drops it

    def reconnecting(self) -> bool:
        """Whether a ``reconnect`` is under way (in another thread)."""
        return self._reconnecting.locked()

    def fileno(self) -> int | None:
        if self.listening() is None:
            self.reconnect()
        return self.listening()

    def drain(self) -> bool:
        """Take every notice that arrived (without waiting); whether there was any."""
        if self._conn is None:
            return False
        try:
            return bool(list(self._conn.notifies(timeout=0)))
        except psycopg.Error:
            self._drop()  # opened again at the next look
            return True  # the connection went: the caller looks now

    def close(self) -> None:
        self._closed = True
        self._drop()

    def _drop(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(psycopg.Error):
                self._conn.close()
            self._conn = None

    def forget(self) -> None:
        """In a forked child: let go of the parent's LISTEN connection without a word on its socket.
        Closing it here would tell the server to end the session the parent still listens on (a
        notice sent meanwhile would be lost); the object is kept so that no finalizer closes it
        either, until the child's ``os._exit``."""
        if self._conn is not None:
            _FORGOTTEN.append(self._conn)
            self._conn = None


def open_postgres_read_only(url: str) -> PostgresConnection | None:
    """A connection whose transactions cannot write (for the views), or None when the database
    holds no store yet. It never migrates."""
    conn = open_postgres(url, target_version=0)
    try:
        conn.keep_for_the_session("SET default_transaction_read_only = on")
        if schema_version(conn) == 0:
            conn.close()
            return None
    except BaseException:
        conn.close()
        raise
    return conn
