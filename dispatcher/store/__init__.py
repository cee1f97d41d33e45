"""The SQLite store: the only place that knows the schema and the connection recipe."""

from .connection import SchemaTooNewError, inserted_id, open_store, schema_version, write_transaction
from .errors import store_errors
from .handle import Store
from .migrations import SCHEMA_VERSION

__all__ = [
    "SCHEMA_VERSION",
    "SchemaTooNewError",
    "Store",
    "inserted_id",
    "open_store",
    "schema_version",
    "store_errors",
    "write_transaction",
]
