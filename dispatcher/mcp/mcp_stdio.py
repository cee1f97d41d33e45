"""The MCP stdio transport with a guard in front of the SDK's own.

The SDK's stdio transport drops a line it cannot validate as a JSON-RPC message without
a word, and reads a request with an id it does not accept as a notification, so the
caller would wait forever. The guard (``jsonrpc_guard``) sits between stdin and the
transport: lines the SDK accepts pass through untouched; every other line that is a
request gets its JSON-RPC error here.

stdin is split on ``\\n`` only: with universal newlines a bare ``\\r`` inside a string
would cut one request into two unreadable halves, neither of them answerable.

Where stdin and stdout are pipes or sockets (an MCP client's, always), both are served by the
event loop itself, not by the SDK's worker threads: a call then costs no thread hand-offs (one
to read its line, two to write and flush the answer), which a server woken after an idle moment
pays most (docs/performance.md). stdin is read by asyncio's read pipe transport; a pipe on stdout
is written by its write pipe transport, a socket by the loop's ``sock_sendall`` (see
``_SocketStdout``: stdin and stdout are often one socket). Anything else (a terminal, a file) is
read and written as the SDK does, in worker threads. Either way the wire is claimed as the SDK
claims it: while serving, fd 0 reads the null device and fd 1 writes to stderr, so a child or a
stray print never touches the wire.

The end of stdin reaches the server only once every request read has been answered
(``_InFlight``): the SDK's session ends at EOF and would drop the answers still in flight.
"""

import asyncio
import io
import os
import socket
import stat
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, BinaryIO

import anyio
import mcp_types
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

from dispatcher.core.logs import get_logger
from dispatcher.mcp.jsonrpc_guard import replies_for_line
from dispatcher.mcp.sdk_private import claim_fd, lowlevel_server, open_stdin_diversion, open_stdout_diversion

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


def _pipe_fd(stream: Any) -> int | None:
    """The stream's descriptor when the event loop can wait on it (a pipe or a socket); None for a
    file, a terminal (whose non-blocking mode would be the shell's too) or no descriptor at all."""
    try:
        fd: int = stream.fileno()
        mode = os.fstat(fd).st_mode
    except (AttributeError, OSError, ValueError):  # (io.UnsupportedOperation is both of the last two)
        return None
    return fd if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) else None


async def _pipe_lines(fd: int) -> AsyncIterator[str]:
    """The lines of a pipe, read by the event loop; each keeps its "\\n" (the last may lack one),
    and invalid UTF-8 becomes U+FFFD, as the SDK's text wrapper gives them. A "\\n" byte is never
    part of a longer UTF-8 sequence, so splitting the bytes first decodes the same."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    pipe = os.fdopen(fd, "rb", buffering=0, closefd=False)  # the transport closes this, never the fd
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
    pending: list[bytes] = []  # a line's start, until its end arrives (pieces: no quadratic copying)
    try:
        while chunk := await reader.read(1 << 16):
            *ended, rest = chunk.split(b"\n")
            for piece in ended:
                yield b"".join([*pending, piece, b"\n"]).decode("utf-8", errors="replace")
                pending.clear()
            if rest:
                pending.append(rest)
        if pending:
            yield b"".join(pending).decode("utf-8", errors="replace")
    finally:
        transport.close()
        os.set_blocking(fd, True)  # the descriptor is shared with whoever started us


class _PipeStdout:
    """The SDK's stdout (``write``, then ``flush``, per message) on a pipe the event loop writes;
    ``flush`` returns once the pipe has taken every byte, as a file's flush does."""

    def __init__(self, fd: int, writer: asyncio.StreamWriter) -> None:
        self._fd = fd
        self._writer = writer

    @classmethod
    async def open(cls, fd: int) -> "_PipeStdout":
        loop = asyncio.get_running_loop()
        pipe = os.fdopen(fd, "wb", buffering=0, closefd=False)
        transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, pipe)
        transport.set_write_buffer_limits(high=0)  # drain waits until nothing is left unwritten
        return cls(fd, asyncio.StreamWriter(transport, protocol, None, loop))

    async def write(self, text: str) -> None:
        self._writer.write(text.encode("utf-8"))

    async def flush(self) -> None:
        await self._writer.drain()

    def close(self) -> None:
        self._writer.close()
        os.set_blocking(self._fd, True)


class _SocketStdout:
    """The SDK's stdout on a socket, sent by the event loop (``sock_sendall`` returns once the
    socket has taken every byte). Not a write pipe transport: that one watches its descriptor for
    reading, to learn that the reader went away, and takes anything readable for that. A socket
    is readable whenever its peer writes, and the same socket is stdin too under inetd, systemd's
    ``Accept=yes``, ``socat EXEC:`` or an ssh socketpair: it closed itself at the first request."""

    def __init__(self, fd: int) -> None:
        self._socket = socket.socket(fileno=fd)  # (detached on close: the descriptor is not ours)
        self._socket.setblocking(False)

    async def write(self, text: str) -> None:
        await asyncio.get_running_loop().sock_sendall(self._socket, text.encode("utf-8"))

    async def flush(self) -> None:
        """Nothing is buffered here: ``write`` returned once the socket had it all."""

    def close(self) -> None:
        self._socket.setblocking(True)  # the descriptor is shared with whoever started us
        self._socket.detach()


async def _loop_stdout(fd: int) -> _PipeStdout | _SocketStdout:
    if stat.S_ISSOCK(os.fstat(fd).st_mode):
        return _SocketStdout(fd)
    return await _PipeStdout.open(fd)


class _GuardedStdin:
    """Stdin lines for the SDK's transport, answering the requests it would drop."""

    def __init__(self, wire: BinaryIO) -> None:
        if (fd := _pipe_fd(wire)) is not None:
            self._lines: Any = _pipe_lines(fd)
        else:
            # Same decoding as the SDK's own stdin wrapper (invalid UTF-8 becomes U+FFFD),
            # but lines end at "\n" only (see the module docstring).
            text = io.TextIOWrapper(wire, encoding="utf-8", errors="replace", newline="\n")
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


END_WAIT_SECONDS = 60.0  # at the end of stdin, how long the answers still in flight may take


class _InFlight:
    """The requests read and not answered yet. The server ends its session when stdin ends and
    drops the answers still in flight: a send from a client that closed its input right after it
    ran and was never answered. So the end of stdin reaches the server only once they are all
    answered (or ``END_WAIT_SECONDS`` passed, for a handler that never ends)."""

    def __init__(self) -> None:
        self._ids: set[Any] = set()
        self._changed = anyio.Event()

    def read(self, item: Any) -> None:
        message = item.message if isinstance(item, SessionMessage) else None
        if isinstance(message, mcp_types.JSONRPCRequest):
            self._ids.add(message.id)
        elif isinstance(message, mcp_types.JSONRPCNotification) and message.method == "notifications/cancelled":
            cancelled = (message.params or {}).get("requestId")  # a cancelled request gets no answer
            if isinstance(cancelled, str | int):  # (the client's word: anything else is no id)
                self._answered(cancelled)

    def written(self, item: Any) -> None:
        message = item.message if isinstance(item, SessionMessage) else None
        if isinstance(message, mcp_types.JSONRPCResponse | mcp_types.JSONRPCError):
            self._answered(message.id)

    def _answered(self, request_id: Any) -> None:
        self._ids.discard(request_id)
        self._changed.set()

    async def drained(self) -> None:
        with anyio.move_on_after(END_WAIT_SECONDS):
            while self._ids:
                self._changed = anyio.Event()
                await self._changed.wait()
        if self._ids:
            log.warning("stdin_ended_unanswered", requests=len(self._ids))


class _StreamProxy:
    """One of the SDK's streams, seen through: everything not overridden is the stream's own."""

    def __init__(self, stream: Any, in_flight: _InFlight) -> None:
        self._stream = stream
        self._in_flight = in_flight

    def __getattr__(self, name: str) -> Any:  # aclose, last_context (the sender's context), ...
        return getattr(self._stream, name)

    async def __aenter__(self) -> "_StreamProxy":
        await self._stream.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._stream.__aexit__(*exc)


class _HeldRead(_StreamProxy):
    """The server's read stream, whose end waits for ``_InFlight.drained``."""

    async def receive(self) -> Any:
        try:
            item = await self._stream.receive()
        except anyio.EndOfStream:
            await self._in_flight.drained()
            raise
        self._in_flight.read(item)
        return item

    def __aiter__(self) -> "_HeldRead":
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None


class _CountedWrite(_StreamProxy):
    """The server's write stream, telling ``_InFlight`` of each answer sent."""

    async def send(self, item: Any) -> None:
        await self._stream.send(item)
        self._in_flight.written(item)


async def serve_stdio(mcp: MCPServer) -> None:
    """``MCPServer.run_stdio_async``, with stdin behind the guard, and on pipes without threads."""
    # The SDK claims fd 0 and fd 1 only when it opens them itself; the stdin it is handed here is
    # claimed as it would claim it, and so is stdout where it is a pipe (else the SDK claims it).
    stdin_wire, release_stdin = claim_fd(0, sys.stdin, "rb", open_stdin_diversion)
    release_stdout: Any = None
    stdout: _PipeStdout | _SocketStdout | None = None
    try:
        if _pipe_fd(sys.stdout) is not None:
            stdout_wire, release_stdout = claim_fd(1, sys.stdout, "wb", open_stdout_diversion)
            stdout = await _loop_stdout(stdout_wire.fileno())
        stdin = _GuardedStdin(stdin_wire)
        # The SDK only iterates its stdin by line (async for), and writes then flushes its stdout.
        async with stdio_server(stdin=stdin, stdout=stdout) as (read_stream, write_stream):  # type: ignore[arg-type]  # ducks
            stdin.attach(write_stream)
            lowlevel = lowlevel_server(mcp)
            in_flight = _InFlight()
            held, counted = _HeldRead(read_stream, in_flight), _CountedWrite(write_stream, in_flight)
            await lowlevel.run(held, counted, lowlevel.create_initialization_options())
    finally:
        if stdout is not None:
            stdout.close()
        for release in (release_stdout, release_stdin):
            if release is not None:
                release()


def run_stdio(mcp: MCPServer) -> None:
    anyio.run(serve_stdio, mcp)
