"""The MCP stdio transport with a guard in front of the SDK's own.

The SDK's stdio transport drops a line it cannot validate as a JSON-RPC message without
a word, so a request carrying, say, a lone surrogate escape ("\\ud800", which pydantic's
JSON parser rejects) or object-less params would leave its caller waiting forever. The
guard sits between stdin and the transport: valid lines pass through untouched; an
invalid one that still names a request id is answered with a JSON-RPC error.
"""

import io
import json
import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio
from mcp import types as mcp_types
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

from .logs import get_logger

log = get_logger("agent_bridge.mcp")


def _has_lone_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        return any("\ud800" <= ch <= "\udfff" for ch in value)
    if isinstance(value, dict):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_lone_surrogate(v) for v in value)
    return False


def _refusal(request: Any, text: str) -> mcp_types.JSONRPCError | None:
    if not isinstance(request, dict) or "result" in request or "error" in request:
        return None  # not a request (a malformed response is not answered)
    request_id = request.get("id")
    if isinstance(request_id, bool) or not isinstance(request_id, int | str) or _has_lone_surrogate(request_id):
        return None  # no usable id: a notification, or an id that cannot be echoed
    error = mcp_types.ErrorData(code=mcp_types.INVALID_REQUEST, message=text)
    return mcp_types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error)


def refusals_for_line(line: str) -> list[mcp_types.JSONRPCError] | None:
    """None for a line the SDK accepts; else the error replies owed to the request ids it names."""
    try:
        mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
        return None  # valid: the SDK answers it
    except ValueError:
        pass
    try:
        return _refusals(json.loads(line))  # unlike pydantic, json accepts lone surrogate escapes
    except (ValueError, RecursionError):
        return []  # not JSON at all (or absurdly deep): there is no id to answer


def _refusals(parsed: Any) -> list[mcp_types.JSONRPCError]:
    if isinstance(parsed, list):
        text = "invalid_request: JSON-RPC batches are not supported; send one request per line. Nothing was done."
        replies = [_refusal(item, text) for item in parsed]
    elif _has_lone_surrogate(parsed):
        replies = [_refusal(parsed, (
            "invalid_text: the request holds a lone surrogate escape (\\ud800-\\udfff), which is not "
            "valid Unicode; nothing was done. Send well-formed UTF-16 pairs or plain UTF-8."
        ))]
    else:
        replies = [_refusal(parsed, (
            "invalid_request: not a valid JSON-RPC 2.0 request (it needs \"jsonrpc\": \"2.0\", a string "
            "method and, if any, object params); nothing was done."
        ))]
    return [reply for reply in replies if reply is not None]


class _GuardedStdin:
    """Stdin lines for the SDK's transport, answering the requests it would drop."""

    def __init__(self) -> None:
        # Same decoding as the SDK's own stdin wrapper (invalid UTF-8 becomes U+FFFD).
        self._lines = anyio.wrap_file(io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace"))
        self._replies: Any = None
        self._ready = anyio.Event()

    def attach(self, write_stream: Any) -> None:
        self._replies = write_stream
        self._ready.set()

    async def __aiter__(self) -> AsyncIterator[str]:
        async for line in self._lines:
            refusals = refusals_for_line(line)
            if refusals is None:
                yield line
                continue
            log.info("invalid_line", answered=len(refusals))
            await self._ready.wait()
            for refusal in refusals:
                await self._replies.send(SessionMessage(refusal))


async def serve_stdio(mcp: MCPServer) -> None:
    """``MCPServer.run_stdio_async``, with stdin behind the guard."""
    stdin = _GuardedStdin()
    async with stdio_server(stdin=stdin) as (read_stream, write_stream):
        stdin.attach(write_stream)
        lowlevel = mcp._lowlevel_server
        await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())


def run_stdio(mcp: MCPServer) -> None:
    anyio.run(serve_stdio, mcp)
