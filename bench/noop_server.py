"""The floor: a bare ``MCPServer`` over the SDK's own stdio transport, with three tools that do
(next to) nothing.

``python bench/noop_server.py [PAYLOAD_JSON DB [STORE READER]]``. No store, no config, no validation beyond the
SDK's: what any MCP stdio tool call costs with this SDK and client on this machine. Each tool is
``async def``, as every tool of ours is (the SDK runs a plain ``def`` tool in a worker thread,
which would add a thread hop to the floor that our calls never pay).

- ``noop``: returns an empty object.
- ``payload`` (with PAYLOAD_JSON): returns that file's object, read once at start. ``bench/floor.py``
  hands it one real ``receive_messages(limit=20)`` answer, so this is the SDK's cost of carrying
  the same 20 messages (validation, structured content and its text twin, JSON) and nothing else.
- ``insert`` (with DB): one row into a one-table SQLite file in WAL mode, synchronous=NORMAL (the
  bridge's settings), one transaction per call, returning ``{id, duplicate, conversation_id}`` as
  a send does: the floor of a call that writes.
- ``read`` and ``insert_message`` (with STORE, the bench's own ``bridge.db``, and READER): the same
  store our servers use, with plain SQL and no rules. ``read`` selects READER's 20 oldest
  unacknowledged messages and returns them as they are stored (one object per row); ``insert_message``
  inserts one message row (sender, recipient, text, created_at) in a write transaction and returns
  its id. These are the floors of a tool that has to read or write this store at all: the SDK plus
  SQLite's own work on the same file, rows and indexes, while other processes commit to it.
"""

import json
import sqlite3
import sys
import time
from typing import Any

from mcp.server.mcpserver import MCPServer

mcp = MCPServer(name="noop")


@mcp.tool()
async def noop() -> dict[str, Any]:
    """Do nothing and return an empty object."""
    return {}


if len(sys.argv) >= 3:
    with open(sys.argv[1], encoding="utf-8") as f:
        PAYLOAD: dict[str, Any] = json.load(f)
    db = sqlite3.connect(sys.argv[2], isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("CREATE TABLE IF NOT EXISTS rows (id INTEGER PRIMARY KEY, sender TEXT, recipient TEXT, text TEXT)")

    @mcp.tool()
    async def payload() -> dict[str, Any]:
        """Return the constant payload (the shape and size of a receive_messages(limit=20) answer)."""
        return PAYLOAD

    @mcp.tool()
    async def insert(recipient: str, text: str) -> dict[str, Any]:
        """Insert one row in its own transaction and return its id, as a send would."""
        with db:
            row_id = db.execute(
                "INSERT INTO rows (sender, recipient, text) VALUES ('noop', ?, ?)", (recipient, text)
            ).lastrowid
        return {"id": row_id, "duplicate": False, "conversation_id": None}


if len(sys.argv) == 5:
    store = sqlite3.connect(sys.argv[3], isolation_level=None, timeout=30)
    store.execute("PRAGMA synchronous=NORMAL")
    reader = sys.argv[4]

    @mcp.tool()
    async def read(limit: int = 20) -> dict[str, Any]:
        """Return the reader's oldest unacknowledged messages, as stored."""
        cursor = store.execute(
            "SELECT * FROM messages WHERE recipient = ? AND acknowledged_at IS NULL ORDER BY id LIMIT ?",
            (reader, limit),
        )
        columns = [c[0] for c in cursor.description]
        rows = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
        return {"messages": rows, "cursor": rows[-1]["id"] if rows else None}

    @mcp.tool()
    async def insert_message(recipient: str, text: str) -> dict[str, Any]:
        """Insert one message row in a write transaction and return its id, as a send would."""
        store.execute("BEGIN IMMEDIATE")
        try:
            (row_id,) = store.execute(
                "INSERT INTO messages (sender, recipient, text, created_at) VALUES ('noop', ?, ?, ?) RETURNING id",
                (recipient, text, time.time()),
            ).fetchone()
        except BaseException:
            store.execute("ROLLBACK")
            raise
        store.execute("COMMIT")
        return {"id": row_id, "duplicate": False, "conversation_id": None}


if __name__ == "__main__":
    mcp.run()
