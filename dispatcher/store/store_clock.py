"""The clock that the store's times are written and judged by (``store_now``).

A lease, a renewal or a claim is a time one process writes and another compares with its own
"now". On PostgreSQL the two may run on different hosts, whose clocks differ: a host a lease
ahead would judge every other host's live lease expired. So on PostgreSQL every process reads
the database server's clock (``clock_timestamp()``: the moment of the call, not the start of
the transaction), as Multica and River do; a SQLite file is one host's, whose wall clock
(``core.clock.now``) every process shares.
"""

import sqlite3

from dispatcher.core import clock
from dispatcher.store.types import Connection


def store_now(conn: Connection) -> float:
    """Now, in Unix seconds, by the clock every process of this store shares."""
    if isinstance(conn, sqlite3.Connection):
        return clock.now()
    row = conn.execute("SELECT extract(epoch FROM clock_timestamp())::double precision").fetchone()
    return float(row[0])
