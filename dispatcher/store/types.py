"""The connector-neutral names the domain uses for what the store hands it.

The domain only passes a ``Connection`` on to the store's query functions (and closes the
read-only ones it opened); it reads a ``Row`` by column name. Both are protocols that the
SQLite connection (``sqlite3``) and the PostgreSQL one (``postgres.PostgresConnection``)
satisfy as they are, so strict mypy checks every call against what both connectors offer.
"""

from collections.abc import Iterable, Iterator
from typing import Any, Protocol

from dispatcher.core.locations import StoreLocation


class Row(Protocol):
    """A row, read by column name or by position (``sqlite3.Row``, ``postgres.Row``)."""

    def __getitem__(self, key: Any, /) -> Any: ...

    def __len__(self) -> int: ...

    def keys(self) -> list[str]: ...


class Cursor(Protocol):
    @property
    def rowcount(self) -> int: ...

    @property
    def description(self) -> Any: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def fetchmany(self, size: int = ..., /) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Connection(Protocol):
    """What the store's query functions use of a connection, on either connector."""

    def execute(self, sql: str, parameters: Any = ..., /) -> Cursor: ...

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> Cursor: ...

    @property
    def in_transaction(self) -> bool: ...

    def close(self) -> None: ...


class StoreHandle(Protocol):
    """A long-lived handle on the store (``open_handle``): servers and listeners hold one and ask
    it for the connection on every call, so that it can notice a replaced file or reconnect."""

    location: StoreLocation
    # Whether processes of several hosts may share it (a server, not a file one host opens):
    # only then do leases that /proc cannot judge need renewing.
    spans_hosts: bool

    def connection(self) -> Connection: ...

    def close(self) -> None: ...
