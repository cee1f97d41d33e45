"""The floor (Agent Bridge only): our send and receive against a no-op tool on a bare ``MCPServer``.

The three calls are timed by the same mcp client, in the same run, interleaved call by call:
``send_message`` (a0 -> a1), ``receive_messages(limit=20)`` on an inbox held at 100 unread
messages, and ``noop`` on ``bench/noop_server.py``. Each median is reported as a ratio to the
no-op median: how many times the cost of a tool call that does nothing.
"""

from __future__ import annotations

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
        params = StdioServerParameters(command=target.python(), args=[str(NOOP_SERVER)], cwd=str(REPO))
        noop_client = await stack.enter_async_context(
            Client(stdio_client(params, errlog=errlog), read_timeout_seconds=CALL_TIMEOUT_S)
        )

        async def noop() -> CallOutcome:
            r = await noop_client.call_tool("noop", {})
            return CallOutcome(not r.is_error, 0, None if not r.is_error else "noop failed")

        res = await _timed_interleaved(
            {
                "send": (lambda: sender.send(SENDERS[1], TEXT), None),
                "receive": (lambda: reader.receive(limit), keeper),
                "noop": (noop, None),
            },
            calls,
            warmup,
            max_seconds,
        )
    base = res["noop"]["median"]
    return {
        **res,
        "send_over_noop": res["send"]["median"] / base if base else None,
        "receive_over_noop": res["receive"]["median"] / base if base else None,
        "noop_server": "bench/noop_server.py: a bare MCPServer with one no-op tool, same python and client",
        "receive_limit": limit,
    }
