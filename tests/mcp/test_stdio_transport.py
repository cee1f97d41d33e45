"""The server's stdio transport (``dispatcher/mcp/mcp_stdio.py``): on pipes, lines read and answers
written by the event loop; on anything else, the SDK's threads; either way the wire claimed, so
nothing but the transport writes to it."""

import io
import json
import os
import socket
import subprocess
import sys
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


def test_a_server_on_regular_files_answers_through_the_sdks_threads(env, tmp_path):
    """stdin a file of requests, stdout a file: each request answered, then the server exits at EOF."""
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "who", "arguments": {}}}
    requests = tmp_path / "requests.jsonl"
    requests.write_text("".join(json.dumps(m) + "\n" for m in (INIT, INITIALIZED, call)))
    answers = tmp_path / "answers.jsonl"
    with open(requests, "rb") as stdin, open(answers, "wb") as stdout:
        done = subprocess.run(
            [sys.executable, str(PROJECT / "server.py")],
            cwd=PROJECT,
            env={**os.environ, **env, "AGENT_ID": "claude"},
            stdin=stdin,
            stdout=stdout,
            stderr=subprocess.PIPE,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    replies = [json.loads(line) for line in answers.read_text().splitlines()]
    assert [r["id"] for r in replies] == [1, 2]
    assert replies[1]["result"]["isError"] is False


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
