"""The floor (Agent Bridge only): our send and receive against tools that do (next to) nothing on a
bare ``MCPServer``.

The five calls, each on a server process of its own, are timed by the same mcp client, in the
same run, interleaved call by call: ``send_message`` (a0 -> a1), ``receive_messages(limit=20)`` on
an inbox held at 100 unread messages, and on ``bench/noop_server.py``: ``noop`` (returns ``{}``), ``payload`` (returns one real
receive(20) answer of ours, captured before timing: the same 20 messages), ``insert`` (one SQLite
row in WAL mode, its own transaction), and on our own store, by plain SQL: ``read`` (the reader's
20 oldest unacknowledged rows, as stored) and ``insert_message`` (one message row). Each of ours is
reported as a ratio to the empty no-op, to its like-for-like floor (receive to ``payload``, send to
``insert``), and to its store floor (receive to ``read``, send to ``insert_message``).
"""

from __future__ import annotations

import json
from contextlib import AsyncExitStack
from typing import Any

import psutil

from .measure import InboxKeeper, _timed_interleaved
from .session import open_floor_tool, open_session
from .targets import READER, SENDERS, TEXT, Store, Target


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def _cpu_seconds(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system


async def floor(
    target: Target, store: Store, *, calls: int, warmup: int, limit: int, max_seconds: float
) -> dict[str, Any]:
    servers: dict[str, psutil.Process] = {}  # each call's server process, for its CPU per call

    async def spawned(key: str, opening: Any) -> Any:
        before = _children()
        entered = await stack.enter_async_context(opening)
        (pid,) = _children() - before
        servers[key] = psutil.Process(pid)
        return entered

    async with AsyncExitStack() as stack:
        sender = await spawned("send", open_session(target, store, SENDERS[0]))
        reader = await spawned("receive", open_session(target, store, READER, reads=True))
        keeper = InboxKeeper(target, store)
        stack.callback(keeper.close)
        errlog = stack.enter_context(open(store.dir / "noop-server.stderr.log", "a", encoding="utf-8"))  # noqa: SIM115 - closed by the ExitStack it is entered into
        answer = await reader.client.call_tool(target.recv_tool, target.recv_args(READER, limit, reader.state))
        received = target.received(answer.structured_content)
        if answer.is_error or received != limit:
            raise RuntimeError(f"the payload floor needs a full receive({limit}); got {received}")
        payload = store.dir / "receive-payload.json"
        payload.write_text(json.dumps(answer.structured_content), encoding="utf-8")
        server_args = (str(payload), str(store.dir / "noop-insert.db"), str(store.db), READER)

        async def floor_call(tool: str, args: dict[str, Any]):
            """One floor tool on a server process of its own: like our send and receive (each on its
            own server), every process serves one call per round."""
            return await spawned(tool, open_floor_tool(target.python(), tool, args, errlog, *server_args))

        timed = {
            "send": (lambda: sender.send(SENDERS[1], TEXT), None),
            "receive": (lambda: reader.receive(limit), keeper),
            "noop": (await floor_call("noop", {}), None),
            "payload": (await floor_call("payload", {}), None),
            "insert": (await floor_call("insert", {"recipient": SENDERS[1], "text": TEXT}), None),
            "read": (await floor_call("read", {"limit": limit}), None),
            "insert_message": (await floor_call("insert_message", {"recipient": SENDERS[1], "text": TEXT}), None),
        }
        cpu_before = {key: _cpu_seconds(proc) for key, proc in servers.items()}
        res = await _timed_interleaved(
            timed,
            calls,
            warmup,
            max_seconds,
        )
        for key, proc in servers.items():
            served = res[key]["n"] + warmup
            res[key]["server_cpu_per_call"] = (_cpu_seconds(proc) - cpu_before[key]) / served if served else None

    def over(ours: str, floor_key: str, stat: str = "median") -> float | None:
        base = res[floor_key][stat]
        return res[ours][stat] / base if base else None

    return {
        **res,
        "send_over_noop": over("send", "noop"),
        "receive_over_noop": over("receive", "noop"),
        "receive_over_payload": over("receive", "payload"),
        "send_over_insert": over("send", "insert"),
        # The same ratios in server CPU per call (user + system time of each server process over
        # the whole loop): what the server itself spends, apart from the client and the pipes.
        "cpu_send_over_noop": over("send", "noop", "server_cpu_per_call"),
        "cpu_send_over_insert": over("send", "insert", "server_cpu_per_call"),
        "cpu_receive_over_noop": over("receive", "noop", "server_cpu_per_call"),
        "cpu_receive_over_payload": over("receive", "payload", "server_cpu_per_call"),
        # Against the store floors: the same file, rows and indexes through plain SQL.
        "receive_over_read": over("receive", "read"),
        "send_over_insert_message": over("send", "insert_message"),
        "cpu_receive_over_read": over("receive", "read", "server_cpu_per_call"),
        "cpu_send_over_insert_message": over("send", "insert_message", "server_cpu_per_call"),
        "payload_bytes": payload.stat().st_size,
        "noop_server": "bench/noop_server.py: a bare MCPServer (noop, payload, insert, read, insert_message), same python and client",
        "receive_limit": limit,
    }
