"""The store: the only place that knows the schema, the connection recipe and the SQL; one
module per aggregate holds named, typed query functions in the SQL SQLite and PostgreSQL share,
and one module per connector keeps what differs. It imports only the core."""

from typing import TYPE_CHECKING

from dispatcher.store.changes import data_version
from dispatcher.store.connection import SchemaTooNewError, inserted_id, open_store, schema_version, write_transaction
from dispatcher.store.errors import (
    BACKEND_ERRORS,
    CONNECTION_LOST,
    INTEGRITY_ERRORS,
    STORE_ERRORS,
    TRANSIENT_STORE_ERRORS,
    store_corruption,
    store_errors,
)
from dispatcher.store.migrations import SCHEMA_VERSION
from dispatcher.store.types import Connection, Row, StoreHandle

if TYPE_CHECKING:
    from dispatcher.store.handle import SqliteStore, open_handle


def __getattr__(name: str) -> object:
    # The long-lived handle (and with it structlog, for its log lines) loads on first use: the
    # status line and the hooks read the store without one, and pay ~50 ms of CPU for it otherwise.
    if name in ("SqliteStore", "open_handle"):
        from dispatcher.store import handle

        return getattr(handle, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BACKEND_ERRORS",
    "CONNECTION_LOST",
    "INTEGRITY_ERRORS",
    "SCHEMA_VERSION",
    "STORE_ERRORS",
    "TRANSIENT_STORE_ERRORS",
    "Connection",
    "Row",
    "SchemaTooNewError",
    "SqliteStore",
    "StoreHandle",
    "data_version",
    "inserted_id",
    "open_handle",
    "open_store",
    "schema_version",
    "store_corruption",
    "store_errors",
    "write_transaction",
]
