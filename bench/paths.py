"""Every send path (Agent Bridge only), per call, at three levels.

Paths, each one ``send_message`` call (sender -> recipient, a1 answering a0):

* ``plain``: a note a0 -> a1, no kind, no key.
* ``task_dedup``: a task a0 -> a1 with a fresh ``dedup_key`` per call.
* ``reply``: a1's ``result`` with ``reply_to`` = a task a0 sent it (the task is sent untimed first).
* ``conversation_turn``: a1's ``result`` answering the root task of a conversation a0 started
  (``start_conversation`` untimed first), which takes one turn.

Levels, each on its own fresh store:

* ``stdio``: the MCP tool call over stdio with the mcp client (server.py), the paths
  interleaved call by call.
* ``domain``: ``dispatcher.bridge.messages.send_message`` called in this process (no MCP, no JSON).
* ``raw``: the SQL statements ``send_message`` runs for that path, replayed with the stdlib
  ``sqlite3`` on a connection from ``open_store`` (same pragmas): a single autocommit INSERT
  for ``plain``; ``BEGIN IMMEDIATE`` + the same lookups + INSERT (+ the conversation UPDATE)
  + ``COMMIT`` for the others.

Each figure is the median (and p99) of per-call wall times; the ratios are medians over the
raw median of the same path.
"""

from __future__ import annotations

import time
from contextlib import AsyncExitStack
from typing import Any

from .measure import _round
from .session import open_session
from .stats import summarize
from .targets import TEXT, Store, Target

PATHS = ("plain", "task_dedup", "reply", "conversation_turn")
A, B = "a0", "a1"


def _ok(r: Any) -> dict:
    if r.is_error:
        raise RuntimeError(" ".join(getattr(c, "text", "") for c in r.content)[:300])
    return r.structured_content


async def stdio(target: Target, store: Store, *, calls: int, warmup: int, max_seconds: float) -> dict[str, Any]:
    samples: dict[str, list[float]] = {p: [] for p in PATHS}
    async with AsyncExitStack() as stack:
        a = (await stack.enter_async_context(open_session(target, store, A))).client
        b = (await stack.enter_async_context(open_session(target, store, B))).client

        async def prep(path: str, n: int) -> tuple[Any, str, dict]:
            if path == "plain":
                return a, "send_message", {"recipient": B, "text": TEXT}
            if path == "task_dedup":
                return a, "send_message", {"recipient": B, "text": TEXT, "kind": "task", "dedup_key": f"bench-{n}"}
            if path == "reply":
                task = _ok(await a.call_tool("send_message", {"recipient": B, "text": TEXT, "kind": "task"}))
                return b, "send_message", {"recipient": A, "text": TEXT, "kind": "result", "reply_to": task["id"]}
            conv = _ok(await a.call_tool("start_conversation", {"recipient": B, "goal": TEXT}))
            return b, "send_message", {"recipient": A, "text": TEXT, "kind": "result", "reply_to": conv["message_id"]}

        deadline = time.monotonic() + max_seconds
        for n in range(warmup + calls):
            if n >= warmup and time.monotonic() > deadline:
                break
            order = PATHS if n % 2 == 0 else PATHS[::-1]
            for path in order:
                client, tool, args = await prep(path, n)
                t0 = time.perf_counter()
                r = await client.call_tool(tool, args)
                elapsed = time.perf_counter() - t0
                _ok(r)
                if n >= warmup:
                    samples[path].append(elapsed)
    return {p: {**summarize(s), "samples": _round(s)} for p, s in samples.items()}


def _in_process(store: Store, *, calls: int, warmup: int, raw: bool) -> dict[str, Any]:
    from dispatcher.bridge.conversations import start_conversation
    from dispatcher.bridge.messages import send_message
    from dispatcher.store import open_store

    conn = open_store(store.db)
    agents = frozenset([A, B])
    insert = (
        "INSERT INTO messages (sender, recipient, kind, text, reply_to, conversation_id, dedup_key,"
        " created_at, response_deadline, origin) VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL, 'agent')"
    )

    def domain_call(path: str, n: int, prep: Any) -> None:
        if path == "plain":
            send_message(conn, sender=A, recipient=B, text=TEXT, agents=agents)
        elif path == "task_dedup":
            send_message(conn, sender=A, recipient=B, text=TEXT, agents=agents, kind="task", dedup_key=f"k{n}")
        else:
            send_message(conn, sender=B, recipient=A, text=TEXT, agents=agents, kind="result", reply_to=prep)

    def raw_call(path: str, n: int, prep: Any) -> None:
        now = time.time()
        if path == "plain":
            conn.execute(insert, (A, B, None, TEXT, None, None, None, now))
            return
        conn.execute("BEGIN IMMEDIATE")
        if path == "task_dedup":
            conn.execute("SELECT * FROM messages WHERE sender = ? AND dedup_key = ?", (A, f"k{n}")).fetchall()
            # A key names one message or one broadcast: a fresh key is also looked up among broadcasts.
            conn.execute("SELECT id FROM broadcasts WHERE sender = ? AND dedup_key = ?", (A, f"k{n}")).fetchall()
            conn.execute(insert, (A, B, "task", TEXT, None, None, f"k{n}", now))
        elif path == "reply":
            conn.execute("SELECT * FROM messages WHERE id = ?", (prep,)).fetchall()
            conn.execute(insert, (B, A, "result", TEXT, prep, None, None, now))
        else:
            msg_id, conv_id = prep
            conn.execute("SELECT * FROM messages WHERE id = ?", (msg_id,)).fetchall()
            conn.execute("SELECT * FROM conversations WHERE id = ?", (conv_id,)).fetchall()
            conn.execute("SELECT id, kind, sender, recipient FROM messages WHERE id = ?", (msg_id,)).fetchall()
            new_id = conn.execute(insert, (B, A, "result", TEXT, msg_id, conv_id, None, now)).lastrowid
            conn.execute(
                "UPDATE conversations SET turn_count = turn_count + 1, in_flight_message_id = ?,"
                " updated_at = ? WHERE id = ?",
                (new_id, now, conv_id),
            )
        conn.execute("COMMIT")

    def prepare(path: str) -> Any:
        if path == "reply":
            return send_message(conn, sender=A, recipient=B, text=TEXT, agents=agents, kind="task")["id"]
        if path == "conversation_turn":
            c = start_conversation(conn, initiator=A, recipient=B, goal=TEXT, agents=agents, max_body_bytes=65536)
            return (c["message_id"], c["conversation_id"]) if raw else c["message_id"]
        return None

    call = raw_call if raw else domain_call
    samples: dict[str, list[float]] = {p: [] for p in PATHS}
    try:
        for n in range(warmup + calls):
            for path in PATHS if n % 2 == 0 else PATHS[::-1]:
                prep = prepare(path)
                t0 = time.perf_counter()
                call(path, n, prep)
                elapsed = time.perf_counter() - t0
                if n >= warmup:
                    samples[path].append(elapsed)
    finally:
        conn.close()
    return {p: {**summarize(s), "samples": _round(s)} for p, s in samples.items()}


def measure(target: Target, stores: dict[str, Store], *, calls: int, warmup: int, max_seconds: float) -> dict:
    import anyio

    out: dict[str, Any] = {
        "stdio": anyio.run(lambda: stdio(target, stores["stdio"], calls=calls, warmup=warmup, max_seconds=max_seconds)),
        "domain": _in_process(stores["domain"], calls=calls, warmup=warmup, raw=False),
        "raw": _in_process(stores["raw"], calls=calls, warmup=warmup, raw=True),
    }
    out["ratios"] = {
        p: {
            lvl: (out[lvl][p]["median"] / out["raw"][p]["median"]) if out["raw"][p]["median"] else None
            for lvl in ("stdio", "domain")
        }
        for p in PATHS
    }
    return out
