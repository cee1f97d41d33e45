"""The connector-neutral names the domain uses for what the store hands it.

The domain only passes a ``Connection`` on to the store's query functions (and closes the
read-only ones it opened); it reads a ``Row`` by column name. Both are aliases of the one
connector's types: the query functions are typed against them, so strict mypy checks every
call, and a second connector changes these two lines (to a union or a protocol), not the domain.
"""

import sqlite3
from typing import TypeAlias

Connection: TypeAlias = sqlite3.Connection
Row: TypeAlias = sqlite3.Row
