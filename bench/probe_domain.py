"""Send-rate probes without MCP, run as a script by the interpreter of the system probed.

    python probe_domain.py raw    --db F --seconds S --max N
    python probe_domain.py schema --db F --seconds S --max N --sql INSERT --row JSON
    python probe_domain.py ours   --db F --seconds S --max N --config C --repo R
    python probe_domain.py dlb    --db F --seconds S --max N        (DLB_STORE set by the caller)

Prints one JSON line: {"count", "seconds", "per_second", ...}. Stdlib only at the top,
so it runs under dlb-mcp's own venv as well as ours.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sqlite3
import sys
import time

TEXT = "Benchmark note: please review the change in dispatcher/store.py and reply when done. " + "x" * 32

# The reference: the columns of Agent Bridge's messages table, no secondary index.
RAW_TABLE = """
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY, sender TEXT, recipient TEXT, kind TEXT, text TEXT,
    reply_to INTEGER, conversation_id TEXT, dedup_key TEXT, created_at REAL,
    response_deadline REAL, delivered_at REAL, acknowledged_at REAL,
    claim_owner TEXT, claim_expires_at REAL
)"""


def loop(fn, seconds: float, max_count: int) -> dict:
    n = 0
    t0 = time.perf_counter()
    deadline = t0 + seconds
    while n < max_count:
        fn(n)
        n += 1
        if n % 16 == 0 and time.perf_counter() >= deadline:
            break
    elapsed = time.perf_counter() - t0
    return {"count": n, "seconds": elapsed, "per_second": n / elapsed}


def raw_connection(db: str) -> sqlite3.Connection:
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


def single_row_inserts(conn: sqlite3.Connection, sql: str, row: list) -> callable:
    """One autocommit INSERT per row: the transaction form of a plain send_message."""

    def insert(_n: int) -> None:
        conn.execute(sql, row)

    return insert


def probe_raw(a) -> dict:
    conn = raw_connection(a.db)
    conn.execute(RAW_TABLE)
    sql = "INSERT INTO messages (sender, recipient, kind, text, created_at) VALUES (?, ?, ?, ?, ?)"
    out = loop(single_row_inserts(conn, sql, ["a0", "reader", "message", TEXT, time.time()]), a.seconds, a.max)
    conn.close()
    return out


def probe_schema(a) -> dict:
    conn = raw_connection(a.db)
    out = loop(single_row_inserts(conn, a.sql, json.loads(a.row)), a.seconds, a.max)
    conn.close()
    return out


def probe_ours(a) -> dict:
    sys.path.insert(0, a.repo)
    from dispatcher.bridge.messages import send_message
    from dispatcher.store import open_store

    conn = open_store(a.db)
    params = inspect.signature(send_message).parameters
    kwargs = {"sender": "a0", "recipient": "reader", "text": TEXT}
    if "agents" in params:
        from dispatcher.core.config import load_config

        kwargs["agents"] = load_config(a.config).agents
    out = loop(lambda n: send_message(conn, **kwargs), a.seconds, a.max)
    conn.close()
    return out


def probe_dlb(a) -> dict:
    from dlb_mcp import store

    return loop(lambda n: store.send(to="reader", body=TEXT, from_="a0"), a.seconds, a.max)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["raw", "schema", "ours", "dlb"])
    p.add_argument("--db", required=True)
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--max", type=int, default=100_000)
    p.add_argument("--sql")
    p.add_argument("--row")
    p.add_argument("--config")
    p.add_argument("--repo")
    a = p.parse_args()
    out = {"raw": probe_raw, "schema": probe_schema, "ours": probe_ours, "dlb": probe_dlb}[a.mode](a)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
