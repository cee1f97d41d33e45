"""The MCP stdio transport with a guard in front of the SDK's own.

The SDK's stdio transport drops a line it cannot validate as a JSON-RPC message without
a word, and reads a request with an id it does not accept as a notification, so the
caller would wait forever. The guard (``jsonrpc_guard``) sits between stdin and the
transport: lines the SDK accepts pass through untouched; every other line that is a
request gets its JSON-RPC error here.

stdin is split on ``\\n`` only: with universal newlines a bare ``\\r`` inside a string
would cut one request into two unreadable halves, neither of them answerable.
"""

import io
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

from dispatcher.core.logs import get_logger
from dispatcher.mcp.jsonrpc_guard import replies_for_line

log = get_logger("agent_bridge.mcp")


@dataclass(frozen=True)
class _RawLine:
    """A finished JSON-RPC line, sent through the SDK's own stdout writer.

    The writer serialises each message with ``model_dump_json`` and writes it as one
    line, so a refusal shares its single writer and never interleaves with the SDK's
    replies. Raw text, because the SDK's types cannot hold every id that must be echoed.
    """

    text: str

    def model_dump_json(self, **_: Any) -> str:
        return self.text


class _GuardedStdin:
    """Stdin lines for the SDK's transport, answering the requests it would drop."""

    def __init__(self) -> None:
        # Same decoding as the SDK's own stdin wrapper (invalid UTF-8 becomes U+FFFD),
        # but lines end at "\n" only (see the module docstring).
        text = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace", newline="\n")
        self._lines = anyio.wrap_file(text)
        self._replies: Any = None
        self._ready = anyio.Event()

    def attach(self, write_stream: Any) -> None:
        self._replies = write_stream
        self._ready.set()

    async def __aiter__(self) -> AsyncIterator[str]:
        async for line in self._lines:
            replies = replies_for_line(line)
            if replies is None:
                yield line
                continue
            log.info("invalid_line", answered=len(replies))
            await self._ready.wait()
            for reply in replies:
                # The SDK's writer only calls model_dump_json on it (see _RawLine).
                await self._replies.send(SessionMessage(_RawLine(reply)))  # type: ignore[arg-type]  # a duck


async def serve_stdio(mcp: MCPServer) -> None:
    """``MCPServer.run_stdio_async``, with stdin behind the guard."""
    stdin = _GuardedStdin()
    # The SDK only iterates its stdin by line (async for), which _GuardedStdin does.
    async with stdio_server(stdin=stdin) as (read_stream, write_stream):  # type: ignore[arg-type]  # a duck
        stdin.attach(write_stream)
        lowlevel = mcp._lowlevel_server
        await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())


def run_stdio(mcp: MCPServer) -> None:
    anyio.run(serve_stdio, mcp)
