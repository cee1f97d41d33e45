"""The store: the only place that knows the schema, the connection recipe and the SQL; one
module per aggregate holds named, typed query functions in the SQL SQLite and PostgreSQL share,
and one module per connector keeps what differs. It imports only the core."""

from dispatcher.store.changes import data_version
from dispatcher.store.connection import SchemaTooNewError, inserted_id, open_store, schema_version, write_transaction
from dispatcher.store.errors import (
    BACKEND_ERRORS,
    INTEGRITY_ERRORS,
    STORE_ERRORS,
    TRANSIENT_STORE_ERRORS,
    store_corruption,
    store_errors,
)
from dispatcher.store.handle import SqliteStore, open_handle
from dispatcher.store.migrations import SCHEMA_VERSION
from dispatcher.store.types import Connection, Row, StoreHandle

__all__ = [
    "BACKEND_ERRORS",
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
