"""The SQLite store: the only place that knows the schema, the connection recipe and the SQL.

One module per aggregate (``messages``, ``claims``, ``conversations``, ``broadcasts``) holds
named, typed query functions; callers import them from there and never write SQL.
"""

from .changes import data_version
from .connection import SchemaTooNewError, inserted_id, open_store, schema_version, write_transaction
from .errors import store_errors
from .handle import Store
from .migrations import SCHEMA_VERSION

__all__ = [
    "SCHEMA_VERSION",
    "SchemaTooNewError",
    "Store",
    "data_version",
    "inserted_id",
    "open_store",
    "schema_version",
    "store_errors",
    "write_transaction",
]
