"""The server's stdio transport (``dispatcher/mcp/mcp_stdio.py``): on pipes and sockets, lines read
and answers written by the event loop; on anything else, the SDK's threads; either way the wire
claimed, so nothing but the transport writes to it. A real MCP exchange over every kind of wire
(docs/transport.md): one socket as stdin and stdout once got no answer at all."""

import io
import json
import os
import pty
import socket
import subprocess
import sys
import termios
import textwrap

import anyio
import pytest
from harness import PROJECT

from dispatcher.mcp.mcp_stdio import _pipe_fd, _pipe_lines

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
SEND = {
    "jsonrpc": "2.0",
    "id": 3,
    "method": "tools/call",
    "params": {"name": "send_message", "arguments": {"recipient": "kimi", "text": "over the wire"}},
}


def _assert_answered(answers: list[dict]) -> None:
    """initialize, tools/list and a send, each answered."""
    assert [a["id"] for a in answers] == [1, 2, 3], answers
    assert answers[0]["result"]["serverInfo"]["name"]
    assert "send_message" in {tool["name"] for tool in answers[1]["result"]["tools"]}
    assert answers[2]["result"]["isError"] is False, answers[2]
    assert json.loads(answers[2]["result"]["content"][0]["text"])["id"] > 0


def lines_of(*writes: bytes) -> list[str]:
    """What ``_pipe_lines`` yields for a pipe given these writes, then closed."""
    read, write = os.pipe()

    async def collect() -> list[str]:
        async def feed() -> None:
            for chunk in writes:
                await anyio.to_thread.run_sync(os.write, write, chunk)
            os.close(write)

        async with anyio.create_task_group() as tg:
            tg.start_soon(feed)
            return [line async for line in _pipe_lines(read)]

    try:
        return anyio.run(collect)
    finally:
        os.close(read)


def test_lines_cut_across_writes_come_whole_with_their_newline():
    assert lines_of(b'{"a":', b'1}\n{"b"', b":2}\n\n") == ['{"a":1}\n', '{"b":2}\n', "\n"]


def test_a_last_line_without_newline_still_comes():
    assert lines_of(b"one\ntwo") == ["one\n", "two"]


def test_invalid_utf8_becomes_the_replacement_character_and_cr_stays_inside_a_line():
    assert lines_of(b'{"t":"a\r\xffb"}\n') == ['{"t":"a\r\ufffdb"}\n']


def test_a_multibyte_character_cut_between_writes_decodes_whole():
    euro = "€".encode()
    assert lines_of(b"x" + euro[:1], euro[1:] + b"\n") == ["x€\n"]


def test_a_line_of_many_reads_is_one_line():
    big = b"y" * (5 * 65536 + 17)
    assert lines_of(big[:100000], big[100000:] + b"\n") == [big.decode() + "\n"]


def test_pipes_and_sockets_are_served_by_the_loop_files_are_not(tmp_path):
    read, write = os.pipe()
    try:
        with os.fdopen(read, "rb", closefd=False) as pipe:
            assert _pipe_fd(pipe) == read
    finally:
        os.close(read)
        os.close(write)
    ours, theirs = socket.socketpair()
    with ours, theirs:
        assert _pipe_fd(ours) == ours.fileno()
    with open(tmp_path / "f", "wb") as f:
        assert _pipe_fd(f) is None
    assert _pipe_fd(io.BytesIO()) is None  # no descriptor at all
    with open(tmp_path / "f", "rb") as f:
        pass
    assert _pipe_fd(f) is None  # closed


@pytest.mark.parametrize("stdin", ["a regular file", "a pipe closed at once"])
def test_requests_followed_at_once_by_the_end_of_stdin_are_all_answered(env, tmp_path, stdin):
    """Every request read is answered before the server exits at EOF (the SDK's session used to
    end at once and drop the answers in flight: a send stored and never answered). The file is
    served by the SDK's threads, the pipe by the event loop; stdout is a file either way."""
    requests = b"".join(json.dumps(m).encode() + b"\n" for m in (INIT, INITIALIZED, LIST, SEND))
    (tmp_path / "requests.jsonl").write_bytes(requests)
    answers = tmp_path / "answers.jsonl"
    with open(tmp_path / "requests.jsonl", "rb") as file, open(answers, "wb") as stdout:
        done = subprocess.run(
            [sys.executable, str(PROJECT / "server.py")],
            cwd=PROJECT,
            env={**os.environ, **env, "AGENT_ID": "claude"},
            stdin=file if stdin == "a regular file" else None,
            input=requests if stdin == "a pipe closed at once" else None,
            stdout=stdout,
            stderr=subprocess.PIPE,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    _assert_answered([json.loads(line) for line in answers.read_text().splitlines()])


STRAY_SERVER = textwrap.dedent(
    """
    import os, sys
    import anyio
    from mcp.server.mcpserver import MCPServer
    from dispatcher.mcp.mcp_stdio import serve_stdio

    mcp = MCPServer("stray")

    @mcp.tool()
    async def stray() -> str:
        print("printed to stdout")
        os.write(1, b"written to fd 1\\n")
        os.system("echo from a child")
        return "ok"

    anyio.run(serve_stdio, mcp)
    """
)


@pytest.mark.parametrize("stdout", ["pipe", "socket"])
def test_stray_output_of_a_tool_or_its_child_never_reaches_the_wire(stdout):
    """The wire claimed on the fast path: stdout, fd 1 and a child's output go to stderr."""
    if stdout == "socket":
        ours, theirs = socket.socketpair()
        reader, out_target = ours.makefile("rb"), theirs
        ours.close()  # (the file keeps the socket open until it is closed)
    else:
        read, write = os.pipe()
        reader, out_target = os.fdopen(read, "rb"), os.fdopen(write, "wb")
    with out_target:  # the server's end: the test keeps only its own
        proc = subprocess.Popen(
            [sys.executable, "-c", STRAY_SERVER],
            cwd=PROJECT,
            stdin=subprocess.PIPE,
            stdout=out_target.fileno(),
            stderr=subprocess.PIPE,
        )
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "stray", "arguments": {}}}
    proc.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in (INIT, INITIALIZED, call)))
    proc.stdin.flush()
    replies = [json.loads(reader.readline()) for _ in range(2)]  # (stdin stays open until answered)
    proc.stdin.close()
    assert reader.read() == b""  # and nothing else ever came on the wire
    reader.close()
    with proc.stderr:
        stderr = proc.stderr.read().decode()
    assert proc.wait(120) == 0, stderr
    assert [r["id"] for r in replies] == [1, 2]
    assert replies[1]["result"]["content"][0]["text"] == "ok"
    for stray in ("printed to stdout", "written to fd 1", "from a child"):
        assert stray in stderr


class _Wire:
    """A client's end of one transport: what the server gets as fd 0 and fd 1, and how the client
    writes requests, reads answer lines and ends its input."""

    def __init__(self, server_ends, send, reader, end, ours=()) -> None:
        self.server_ends = server_ends  # fd 0's and fd 1's objects (one object when they are one)
        self.send, self.reader, self.end = send, reader, end
        self._ours = [reader, *ours]

    def fds(self) -> tuple[int, int]:
        return self.server_ends[0].fileno(), self.server_ends[-1].fileno()

    def hand_over(self) -> None:
        """Close the test's copies of the server's ends: a server that dies is then EOF here."""
        for each in self.server_ends:
            each.close()

    def close(self) -> None:
        self.hand_over()
        for each in self._ours:
            each.close()


def _socket_wire(client_in: socket.socket, client_out: socket.socket, *server_ends: socket.socket) -> _Wire:
    return _Wire(
        server_ends,
        client_in.sendall,
        client_out.makefile("rb"),
        lambda: client_in.shutdown(socket.SHUT_WR),  # EOF for the server; its answers still flow
        ours={client_in, client_out},
    )


def _open_wire(kind: str) -> _Wire:
    if kind == "pipes":
        in_read, in_write = os.pipe()
        out_read, out_write = os.pipe()
        writer = os.fdopen(in_write, "wb", buffering=0)
        server_ends = (os.fdopen(in_read, "rb"), os.fdopen(out_write, "wb"))
        return _Wire(server_ends, writer.write, os.fdopen(out_read, "rb"), writer.close, ours=[writer])
    if kind == "one socketpair":  # socat EXEC:, an ssh channel's socketpair
        ours, theirs = socket.socketpair()
        return _socket_wire(ours, ours, theirs)
    if kind == "one tcp socket":  # inetd, systemd's Accept=yes
        with socket.create_server(("127.0.0.1", 0)) as listening:
            ours = socket.create_connection(listening.getsockname())
            theirs, _ = listening.accept()
        return _socket_wire(ours, ours, theirs)
    if kind == "two sockets":
        ours_in, theirs_in = socket.socketpair()
        ours_out, theirs_out = socket.socketpair()
        ours_out.shutdown(socket.SHUT_WR)  # nothing comes from the client on the answers' socket
        return _socket_wire(ours_in, ours_out, theirs_in, theirs_out)
    assert kind == "a terminal"
    master, slave = pty.openpty()
    attrs = termios.tcgetattr(slave)
    attrs[1] &= ~termios.ONLCR  # answers end in "\n", not "\r\n"
    attrs[3] &= ~termios.ECHO  # the requests typed are not read back as output
    termios.tcsetattr(slave, termios.TCSANOW, attrs)
    terminal = os.fdopen(master, "wb", buffering=0)
    return _Wire(
        (os.fdopen(slave, "rb"),),
        terminal.write,
        os.fdopen(os.dup(master), "rb"),
        lambda: terminal.write(b"\x04"),  # Ctrl-D at a line's start: EOF
        ours=[terminal],
    )


@pytest.mark.parametrize("kind", ["pipes", "one socketpair", "one tcp socket", "two sockets", "a terminal"])
def test_a_real_call_is_answered_over_every_kind_of_stdio(env, kind):
    """initialize, tools/list and a send over each wire an MCP server meets; stdin and stdout one
    socket is how inetd, systemd's Accept=yes, socat EXEC: and ssh hand it over."""
    wire = _open_wire(kind)
    try:
        proc = subprocess.Popen(
            [sys.executable, str(PROJECT / "server.py")],
            cwd=PROJECT,
            env={**os.environ, **env, "AGENT_ID": "claude"},
            stdin=wire.fds()[0],
            stdout=wire.fds()[1],
            stderr=subprocess.PIPE,
        )
        wire.hand_over()
        answers = []
        for request in (INIT, INITIALIZED, LIST, SEND):
            wire.send(json.dumps(request).encode() + b"\n")
            if "id" in request and not (line := wire.reader.readline()):
                pytest.fail(f"no answer to {request['method']}; the server said: {proc.communicate(timeout=120)[1]}")
            if "id" in request:
                answers.append(json.loads(line))
        wire.end()
        with proc.stderr:
            stderr = proc.stderr.read().decode()
        assert proc.wait(120) == 0, stderr
        _assert_answered(answers)
    finally:
        wire.close()
