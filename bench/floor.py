"""The floor (Agent Bridge only): our send and receive against tools that do (next to) nothing on a
bare ``MCPServer``.

The five calls are timed by the same mcp client, in the same run, interleaved call by call:
``send_message`` (a0 -> a1), ``receive_messages(limit=20)`` on an inbox held at 100 unread
messages, and on ``bench/noop_server.py``: ``noop`` (returns ``{}``), ``payload`` (returns one real
receive(20) answer of ours, captured before timing: the same 20 messages) and ``insert`` (one SQLite
row in WAL mode, its own transaction). Each of ours is reported as a ratio to the empty no-op and
to its like-for-like floor: receive to ``payload``, send to ``insert``.
"""

from __future__ import annotations

import json
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from .measure import InboxKeeper, _timed_interleaved
from .session import CALL_TIMEOUT_S, CallOutcome, open_session
from .targets import READER, REPO, SENDERS, TEXT, Store, Target

NOOP_SERVER = Path(__file__).resolve().parent / "noop_server.py"


async def floor(
    target: Target, store: Store, *, calls: int, warmup: int, limit: int, max_seconds: float
) -> dict[str, Any]:
    async with AsyncExitStack() as stack:
        sender = await stack.enter_async_context(open_session(target, store, SENDERS[0]))
        reader = await stack.enter_async_context(open_session(target, store, READER, reads=True))
        keeper = InboxKeeper(target, store)
        stack.callback(keeper.close)
        errlog = stack.enter_context(open(store.dir / "noop-server.stderr.log", "a", encoding="utf-8"))  # noqa: SIM115 - closed by the ExitStack it is entered into
        answer = await reader.client.call_tool(target.recv_tool, target.recv_args(READER, limit, reader.state))
        received = target.received(answer.structured_content)
        if answer.is_error or received != limit:
            raise RuntimeError(f"the payload floor needs a full receive({limit}); got {received}")
        payload = store.dir / "receive-payload.json"
        payload.write_text(json.dumps(answer.structured_content), encoding="utf-8")
        params = StdioServerParameters(
            command=target.python(),
            args=[str(NOOP_SERVER), str(payload), str(store.dir / "noop-insert.db")],
            cwd=str(REPO),
        )
        noop_client = await stack.enter_async_context(
            Client(stdio_client(params, errlog=errlog), read_timeout_seconds=CALL_TIMEOUT_S)
        )

        def floor_call(tool: str, args: dict[str, Any]):
            async def call() -> CallOutcome:
                r = await noop_client.call_tool(tool, args)
                return CallOutcome(not r.is_error, 0, None if not r.is_error else f"{tool} failed")

            return call

        res = await _timed_interleaved(
            {
                "send": (lambda: sender.send(SENDERS[1], TEXT), None),
                "receive": (lambda: reader.receive(limit), keeper),
                "noop": (floor_call("noop", {}), None),
                "payload": (floor_call("payload", {}), None),
                "insert": (floor_call("insert", {"recipient": SENDERS[1], "text": TEXT}), None),
            },
            calls,
            warmup,
            max_seconds,
        )

    def over(ours: str, floor_key: str) -> float | None:
        base = res[floor_key]["median"]
        return res[ours]["median"] / base if base else None

    return {
        **res,
        "send_over_noop": over("send", "noop"),
        "receive_over_noop": over("receive", "noop"),
        "receive_over_payload": over("receive", "payload"),
        "send_over_insert": over("send", "insert"),
        "payload_bytes": payload.stat().st_size,
        "noop_server": "bench/noop_server.py: a bare MCPServer (noop, payload, insert), same python and client",
        "receive_limit": limit,
    }
