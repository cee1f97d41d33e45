"""Fault injection, part 6: bad input on the server's stdin, spoken raw (newline-delimited JSON-RPC).

No MCP client here: a subprocess pipe, so the test controls every byte. The server must
stay up and answer every request line (with a JSON-RPC error or a tool error) - never
leave its caller waiting. The reply carries the request's id when it can be read (also
a float or an overlong integer, echoed as written), else null, as JSON-RPC 2.0 asks.
Only notifications, responses and blank lines get no answer.
"""

import json

import pytest
from harness import sql
from raw_jsonrpc import RawServer

INVALID_REQUEST = -32600
PARSE_ERROR = -32700


@pytest.fixture(scope="module")
def server(env, bridge_root):
    raw = RawServer(env, bridge_root / "raw-server.stderr")
    raw.send(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"},
            },
        }
    )
    assert raw.response(1)["result"]["serverInfo"]["name"] == "agent_bridge"
    raw.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    yield raw
    raw.close()
    assert raw.proc.returncode == 0
    assert "Traceback" not in (bridge_root / "raw-server.stderr").read_text()


def tool_call(name: str, arguments: dict, request_id: int) -> bytes:
    return json.dumps(
        {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
    ).encode()


def message_count(db_path) -> int:
    return sql(db_path, "SELECT count(*) FROM messages")[0][0]


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        (b"this is not json", PARSE_ERROR),
        (b"\xff\xfe\x00 binary \x80", PARSE_ERROR),
        (b"[" * 100_000, INVALID_REQUEST),  # absurdly deep
        (b"42", INVALID_REQUEST),
        (b'"a string"', INVALID_REQUEST),
        (b"null", INVALID_REQUEST),
        (b"[]", INVALID_REQUEST),
        (b'{"hello": "world"}', INVALID_REQUEST),  # JSON, no id, no method
        (b'{"jsonrpc":"2.0","id":null,"method":"tools/list"}', INVALID_REQUEST),  # MCP ids are never null
    ],
)
def test_garbage_is_answered_with_a_null_id(server, raw, code):
    server.write(raw)
    reply = server.next_message()
    assert reply["id"] is None and reply["error"]["code"] == code, reply
    server.ping_ok()


def test_a_cut_off_request_is_answered_with_its_id(server):
    server.write(b'{"jsonrpc":"2.0","id":2,"method":')
    assert server.response(2)["error"]["code"] == PARSE_ERROR
    server.ping_ok()


def test_notifications_and_blank_lines_get_no_answer(server):
    for raw in (
        b"   ",
        b"",
        b'{"jsonrpc":"2.0","method":"notifications/no_such_thing"}',
        b'{"jsonrpc":"2.0","method":"notifications/x","params":[1]}',  # a broken notification
        b'{"jsonrpc":"2.0","id":12345,"result":{}}',  # a response to nothing
    ):
        server.write(raw)
    # Nothing came back for any of them: the very next message answers this ping.
    server.send({"jsonrpc": "2.0", "id": "after-garbage", "method": "ping"})
    assert server.next_message() == {"jsonrpc": "2.0", "id": "after-garbage", "result": {}}


def deep(levels: int, request_id: str = "7") -> bytes:
    """A send_message call whose text argument is nested ``levels`` lists deep, id last."""
    text = "[" * levels + "]" * levels
    return (
        b'{"jsonrpc":"2.0","method":"tools/call","params":{"name":"send_message","arguments":'
        b'{"recipient":"kimi","text":' + text.encode() + b'}},"id":' + request_id.encode() + b"}"
    )


@pytest.mark.parametrize(
    ("raw", "echoed", "code", "prefix"),
    [
        (b'{"jsonrpc":"2.0","id":1.5,"method":"ping"}', 1.5, INVALID_REQUEST, "invalid_request: "),
        (b'{"jsonrpc":"2.0","id":3.0,"method":"tools/list"}', 3.0, INVALID_REQUEST, "invalid_request: "),
        (b'{"jsonrpc":"2.0","id":true,"method":"ping"}', None, INVALID_REQUEST, "invalid_request: "),
        (b'{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}', None, INVALID_REQUEST, "invalid_request: "),
        (deep(900, "71"), 71, INVALID_REQUEST, "invalid_request: "),
        (deep(250, "72"), 72, INVALID_REQUEST, "invalid_request: "),
        (deep(200_000, '"deep"'), "deep", INVALID_REQUEST, "invalid_request: "),
        (
            tool_call("mark_read", {"message_ids": [1]}, 73).replace(b"[1]", b"[" + b"9" * 4301 + b"]"),
            73,
            INVALID_REQUEST,
            "invalid_request: ",
        ),
        (
            b'{"jsonrpc":"2.0","id":' + b"5" * 5000 + b',"method":"ping"}',
            "5" * 5000,
            INVALID_REQUEST,
            "invalid_request: ",
        ),
        (
            tool_call("send_message", {"recipient": "kimi", "text": "a\rb"}, 74).replace(b"\\r", b"\r"),
            74,
            PARSE_ERROR,
            "parse_error: ",
        ),
        (b'{"jsonrpc":"2.0","id":"\\ud800x","method":"ping"}', "\ud800x", INVALID_REQUEST, "invalid_text: "),
    ],
    ids=[
        "float",
        "integral-float",
        "bool",
        "object",
        "nested-900",
        "nested-250",
        "nested-200000",
        "int-4301-digits",
        "id-5000-digits",
        "bare-cr-in-string",
        "lone-surrogate-id",
    ],
)
def test_every_request_line_gets_an_answer(server, db_path, raw, echoed, code, prefix):
    """Each of these requests is answered with one reply: none of them is left unanswered."""
    before = message_count(db_path)
    server.write(raw)
    reply = server.next_message()
    assert reply["id"] == echoed, reply["id"] if not isinstance(reply["id"], str) else reply["id"][:40]
    assert reply["error"]["code"] == code
    assert reply["error"]["message"].startswith(prefix)
    assert message_count(db_path) == before
    server.ping_ok()


def test_lines_end_at_newline_only(server, db_path):
    """A CR between tokens is whitespace, and a CRLF line ending still works."""
    server.write(b'{"jsonrpc":"2.0",\r"id":"cr","method":"ping"}\r')
    assert server.next_message() == {"jsonrpc": "2.0", "id": "cr", "result": {}}
    before = message_count(db_path)
    server.write(tool_call("send_message", {"recipient": "kimi", "text": "escaped \r is fine"}, 75))
    assert server.response(75)["result"]["isError"] is False
    assert sql(db_path, "SELECT text FROM messages ORDER BY id DESC LIMIT 1") == [("escaped \r is fine",)]
    assert message_count(db_path) == before + 1


@pytest.mark.parametrize(
    ("raw", "request_id"),
    [
        (b'{"id": 3, "hello": "world"}', 3),  # valid JSON, not JSON-RPC
        (b'{"jsonrpc": "1.0", "id": 4, "method": "ping"}', 4),
        (b'{"jsonrpc": "2.0", "id": "five", "method": "tools/call", "params": [1, 2]}', "five"),
        (b'{"jsonrpc": "2.0", "id": 6, "method": 7}', 6),
        (b'{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": "send_message"}', 7),
    ],
)
def test_json_that_is_not_json_rpc_is_answered_with_an_error(server, raw, request_id):
    server.write(raw)
    reply = server.response(request_id)
    assert reply["error"]["code"] == INVALID_REQUEST
    assert reply["error"]["message"].startswith("invalid_request: ")
    server.ping_ok()


def test_a_batch_gets_one_error_per_request_in_it(server):
    server.write(
        b'[{"jsonrpc":"2.0","id":41,"method":"ping"}, {"jsonrpc":"2.0","method":"ping"},'
        b' {"jsonrpc":"2.0","id":"42","method":"tools/list"}]'
    )
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
    raw = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 77,
            "method": method if where != "method" else "tools/\ud800",
            "params": {"name": name, "arguments": args},
        }
    )
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
    assert sql(db_path, "SELECT text FROM messages WHERE id = ?", (message_id,)) == [("smile \U0001f600",)]


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
