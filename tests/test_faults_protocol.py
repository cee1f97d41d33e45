"""Fault injection, part 6: bad input on the server's stdin, spoken raw (newline-delimited JSON-RPC).

No MCP client here: a subprocess pipe, so the test controls every byte. The server must
stay up and answer every request that carries an id (with a JSON-RPC error or a tool
error) - never leave its caller waiting. Lines that name no id (garbage, notifications)
get no answer, which is what JSON-RPC asks for.
"""

import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from faultkit import query
from harness import PROJECT

READ_TIMEOUT = 90.0
INVALID_REQUEST = -32600


class RawServer:
    def __init__(self, env: dict[str, str], stderr: Path) -> None:
        self._stderr = open(stderr, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, str(PROJECT / "server.py")], cwd=PROJECT, env={**os.environ, **env, "AGENT_ID": "claude"},
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
        )
        self._inbox: queue.Queue = queue.Queue()
        self._early: dict = {}
        threading.Thread(target=self._read, daemon=True).start()
        self._next_id = 1000

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._inbox.put(json.loads(line))
        self._inbox.put(None)  # EOF

    def write(self, raw: bytes) -> None:
        self.proc.stdin.write(raw + b"\n")
        self.proc.stdin.flush()

    def send(self, message: dict) -> None:
        self.write(json.dumps(message).encode())

    def next_message(self, timeout: float = READ_TIMEOUT) -> dict:
        try:
            message = self._inbox.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no message from the server within {timeout:.0f} s") from None
        assert message is not None, f"the server closed stdout (exit status {self.proc.poll()})"
        return message

    def response(self, request_id, timeout: float = READ_TIMEOUT) -> dict:
        """The reply to ``request_id`` (replies to other ids are kept for later)."""
        while request_id not in self._early:
            message = self.next_message(timeout)
            self._early[message.get("id")] = message
        return self._early.pop(request_id)

    def request(self, method: str, params: dict | None = None) -> dict:
        self._next_id += 1
        message = {"jsonrpc": "2.0", "id": self._next_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        return self.response(self._next_id)

    def ping_ok(self) -> None:
        assert self.request("ping") == {"jsonrpc": "2.0", "id": self._next_id, "result": {}}

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._stderr.close()


@pytest.fixture(scope="module")
def server(env, bridge_root):
    raw = RawServer(env, bridge_root / "raw-server.stderr")
    raw.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}})
    assert raw.response(1)["result"]["serverInfo"]["name"] == "agent_bridge"
    raw.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    yield raw
    raw.close()
    assert raw.proc.returncode == 0
    assert "Traceback" not in (bridge_root / "raw-server.stderr").read_text()


def tool_call(name: str, arguments: dict, request_id: int) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                       "params": {"name": name, "arguments": arguments}}).encode()


def message_count(db_path) -> int:
    return query(db_path, "SELECT count(*) FROM messages")[0][0]


def test_garbage_lines_get_no_answer_and_the_server_keeps_serving(server):
    for raw in (
        b"this is not json",
        b'{"jsonrpc":"2.0","id":2,"method":',  # cut short: no id can be read
        b"42", b'"a string"', b"null", b"[1, 2, 3]", b"[]",
        b'{"hello": "world"}',  # JSON, no id
        b'{"jsonrpc":"2.0","id":null,"method":"tools/list"}',  # a null id is no id
        b"\xff\xfe\x00 binary \x80",
        b"   ",
        b"[" * 100_000,  # absurdly deep
    ):
        server.write(raw)
    # Nothing came back for any of them: the very next message answers this ping.
    server.send({"jsonrpc": "2.0", "id": "after-garbage", "method": "ping"})
    assert server.next_message() == {"jsonrpc": "2.0", "id": "after-garbage", "result": {}}


@pytest.mark.parametrize(("raw", "request_id"), [
    (b'{"id": 3, "hello": "world"}', 3),  # valid JSON, not JSON-RPC
    (b'{"jsonrpc": "1.0", "id": 4, "method": "ping"}', 4),
    (b'{"jsonrpc": "2.0", "id": "five", "method": "tools/call", "params": [1, 2]}', "five"),
    (b'{"jsonrpc": "2.0", "id": 6, "method": 7}', 6),
    (b'{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": "send_message"}', 7),
])
def test_json_that_is_not_json_rpc_is_answered_with_an_error(server, raw, request_id):
    server.write(raw)
    reply = server.response(request_id)
    assert reply["error"]["code"] == INVALID_REQUEST
    assert reply["error"]["message"].startswith("invalid_request: ")
    server.ping_ok()


def test_a_batch_gets_one_error_per_request_in_it(server):
    server.write(b'[{"jsonrpc":"2.0","id":41,"method":"ping"}, {"jsonrpc":"2.0","method":"ping"},'
                 b' {"jsonrpc":"2.0","id":"42","method":"tools/list"}]')
    for request_id in (41, "42"):
        assert server.response(request_id)["error"]["code"] == INVALID_REQUEST
    server.ping_ok()


@pytest.mark.parametrize("where", ["text", "recipient", "dedup_key", "tool", "method", "key"])
def test_lone_surrogate_escapes_are_refused_and_nothing_is_written(server, db_path, where):
    before = message_count(db_path)
    args = {"recipient": "kimi", "text": "hello"}
    name, method = "send_message", "tools/call"
    if where in ("text", "recipient", "dedup_key"):
        args[where] = "a\ud800b" if where != "dedup_key" else "\udfff"
    elif where == "tool":
        name = "send\ud800"
    elif where == "key":
        args["\udbff"] = "x"
    raw = json.dumps({"jsonrpc": "2.0", "id": 77, "method": method if where != "method" else "tools/\ud800",
                      "params": {"name": name, "arguments": args}})
    assert "\\ud800" in raw or "\\udfff" in raw or "\\udbff" in raw  # sent as a JSON escape, as a client would
    server.write(raw.encode())
    reply = server.response(77)
    assert reply["error"]["code"] == INVALID_REQUEST
    assert reply["error"]["message"].startswith("invalid_text: ")
    assert message_count(db_path) == before
    server.ping_ok()


def test_a_valid_surrogate_pair_still_works(server, db_path):
    server.write(tool_call("send_message", {"recipient": "kimi", "text": "smile \ud83d\ude00"}, 88))
    reply = server.response(88)
    assert reply["result"]["isError"] is False
    message_id = reply["result"]["structuredContent"]["id"]
    assert query(db_path, "SELECT text FROM messages WHERE id = ?", (message_id,)) == [("smile \U0001f600",)]


def test_a_20_mib_line_is_answered_and_the_server_stays_up(server, db_path):
    before = message_count(db_path)
    big = "x" * (20 * 1024 * 1024)
    server.write(tool_call("send_message", {"recipient": "kimi", "text": big}, 99))
    reply = server.response(99)
    assert reply["result"]["isError"] is True
    assert reply["result"]["content"][0]["text"].startswith("text_too_large: ")
    # 20 MiB of garbage, and a 20 MiB request that is not JSON-RPC, on the same pipe.
    server.write(b"y" * (20 * 1024 * 1024))
    server.write(json.dumps({"id": 100, "padding": big}).encode())
    assert server.response(100)["error"]["code"] == INVALID_REQUEST
    assert message_count(db_path) == before
    server.ping_ok()


def test_requests_keep_their_order_and_all_get_answers(server):
    """Good and bad requests interleaved: every id is answered exactly once."""
    good, bad = [], []
    for i in range(20):
        request_id = 500 + i
        if i % 2:
            server.write(tool_call("send_message", {"recipient": "kimi", "text": f"x\ud800{i}"}, request_id))
            bad.append(request_id)
        else:
            server.write(tool_call("receive_messages", {"limit": 1}, request_id))
            good.append(request_id)
    for request_id in good:
        assert "result" in server.response(request_id)
    for request_id in bad:
        assert server.response(request_id)["error"]["code"] == INVALID_REQUEST
    server.ping_ok()
    assert server.proc.poll() is None
