"""One MCP client session against a target's server, over real stdio with the mcp 2.x client."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from .targets import REPO, Store, Target

CALL_TIMEOUT_S = 30.0
NOOP_SERVER = Path(__file__).resolve().parent / "noop_server.py"


@dataclass
class CallOutcome:
    ok: bool
    value: int | None  # the new id for a send, the number of messages for a receive
    error: str | None = None
    ids: list[int] | None = None  # the ids a receive returned


class Session:
    def __init__(self, target: Target, client: Client, agent: str, state: Any) -> None:
        self.target = target
        self.client = client
        self.agent = agent
        self.state = state

    async def send(self, recipient: str, text: str) -> CallOutcome:
        args = self.target.send_args(self.agent, recipient, text, self.state)
        return await self._call(self.target.send_tool, args, self.target.sent_id)

    async def receive(self, limit: int = 20) -> CallOutcome:
        args = self.target.recv_args(self.agent, limit, self.state)
        return await self._call(self.target.recv_tool, args, self.target.received)

    async def consume(self, limit: int = 20) -> CallOutcome:
        """Take up to ``limit`` messages out of the inbox for good: receive, then acknowledge
        them where the system needs a separate call for that (ours: mark_read)."""
        args = self.target.recv_args(self.agent, limit, self.state)
        got = await self._call(self.target.recv_tool, args, self.target.received_ids)
        if not got.ok or self.target.ack_tool is None:
            return CallOutcome(got.ok, len(got.ids or []), got.error)
        if got.ids:
            acked = await self._call(self.target.ack_tool, self.target.ack_args(got.ids, self.state), lambda _: 0)
            if not acked.ok:
                return acked
        return CallOutcome(True, len(got.ids))

    async def _call(self, tool: str, args: dict[str, Any], extract) -> CallOutcome:
        try:
            r = await self.client.call_tool(tool, args)
        except Exception as exc:  # noqa: BLE001 - a timeout or a broken pipe counts as an error, not a crash
            return CallOutcome(False, None, f"{type(exc).__name__}: {exc}"[:300])
        if r.is_error:
            text = " ".join(getattr(c, "text", "") for c in r.content)
            return CallOutcome(False, None, text[:300] or "tool error")
        value = extract(r.structured_content)
        if isinstance(value, list):
            return CallOutcome(True, len(value), ids=value)
        return CallOutcome(True, value)

    async def tool_schemas(self, names: list[str]) -> dict[str, Any]:
        listed = await self.client.list_tools()
        return {t.name: t.input_schema for t in listed.tools if t.name in names} | {
            "_all_tools": sorted(t.name for t in listed.tools)
        }


@asynccontextmanager
async def open_session(target: Target, store: Store, agent: str, *, reads: bool = False) -> AsyncIterator[Session]:
    """Spawn the target's server for ``agent`` on ``store`` and connect to it.

    The server's stderr goes to a log file in the store directory (dlb-mcp logs every
    request at INFO there), so it neither floods the terminal nor blocks on a pipe.
    """
    log_path = store.dir / f"server-{agent}.stderr.log"
    with open(log_path, "a", encoding="utf-8") as errlog:
        transport = stdio_client(target.server_params(store, agent), errlog=errlog)
        async with Client(transport, read_timeout_seconds=CALL_TIMEOUT_S) as client:
            state = await target.setup(client, agent, reads=reads)
            yield Session(target, client, agent, state)


def server_log_tail(store: Store, agent: str, chars: int = 1500) -> str:
    path = store.dir / f"server-{agent}.stderr.log"
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-chars:]
    except OSError:
        return ""


@asynccontextmanager
async def open_floor_tool(
    python: str, tool: str, args: dict[str, Any], errlog: IO[str], *server_args: str
) -> AsyncIterator[Callable[[], Awaitable[CallOutcome]]]:
    """A server of ``bench/noop_server.py`` (with ``server_args``) of its own, connected; yields a
    call of its ``tool`` with ``args``: one of the floors our calls are set against."""
    params = StdioServerParameters(command=python, args=[str(NOOP_SERVER), *server_args], cwd=str(REPO))
    async with Client(stdio_client(params, errlog=errlog), read_timeout_seconds=CALL_TIMEOUT_S) as client:

        async def call() -> CallOutcome:
            r = await client.call_tool(tool, args)
            return CallOutcome(not r.is_error, 0, None if not r.is_error else f"{tool} failed")

        yield call
