"""The stdin guard's decision, line by line: pass to the SDK, answer (with which id), or stay silent."""

import json

import pytest
from mcp import types as mcp_types

from dispatcher.mcp.jsonrpc_guard import SDK_MAX_DEPTH, replies_for_line


def nested(depth: int) -> str:
    """A ping whose params hold lists so that the whole message is ``depth`` containers deep."""
    inner = depth - 2
    return '{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":' + "[" * inner + "]" * inner + "}}"


def test_sdk_max_depth_is_the_sdk_readers_limit():
    mcp_types.jsonrpc_message_adapter.validate_json(nested(SDK_MAX_DEPTH))
    with pytest.raises(ValueError):
        mcp_types.jsonrpc_message_adapter.validate_json(nested(SDK_MAX_DEPTH + 1))
    assert replies_for_line(nested(SDK_MAX_DEPTH)) is None
    assert "nested deeper than" in json.loads(replies_for_line(nested(SDK_MAX_DEPTH + 1))[0])["error"]["message"]


@pytest.mark.parametrize(
    "line",
    [
        '{"jsonrpc":"2.0","id":1,"method":"ping"}',
        '{"jsonrpc":"2.0","id":"x","method":"ping"}\r\n',
        '{"jsonrpc":"2.0","method":"notifications/initialized"}',
        '{"jsonrpc":"2.0","id":1,"result":{}}',
    ],
)
def test_lines_the_sdk_takes_pass_untouched(line):
    assert replies_for_line(line) is None


@pytest.mark.parametrize(
    "line",
    [
        "",
        "  \r\n",
        '{"jsonrpc":"2.0","method":"notifications/x","params":[1]}',  # a broken notification
        '{"jsonrpc":"2.0","method":"x","params":{"a":' + "[" * 500 + "]" * 500 + "}}",  # a deep notification
        '{"jsonrpc":"2.0","id":1.5,"result":{}}',  # a broken response
        '{"jsonrpc":"2.0","error":{}}',
    ],
)
def test_notifications_responses_and_blank_lines_are_never_answered(line):
    assert replies_for_line(line) == []


@pytest.mark.parametrize(
    ("line", "id_text", "code"),
    [
        ('{"jsonrpc":"2.0","id":1.5,"method":"ping"}', "1.5", -32600),
        ('{"jsonrpc":"2.0","id":-2.5e3,"method":"ping"}', "-2.5e3", -32600),
        ('{"jsonrpc":"2.0","id":' + "7" * 5000 + ',"method":"ping"}', "7" * 5000, -32600),
        ('{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}', '"\\ud800"', -32600),
        ('{"jsonrpc":"2.0","id":true,"method":"ping"}', "null", -32600),
        ('{"jsonrpc":"2.0","id":null,"method":"ping"}', "null", -32600),
        ('{"jsonrpc":"2.0","id":[1],"method":"ping"}', "null", -32600),
        ('{"jsonrpc":"2.0","method":"ping","params":{"a":' + "[" * 100_000 + "]" * 100_000 + '},"id":8}', "8", -32600),
        ('{"jsonrpc":"2.0","id":9,"method":"ping","params":{"a":' + "1" * 4301 + "}}", "9", -32600),
        ('{"jsonrpc":"2.0","id":10,"method":"ping","params":{"t":"a\rb"}}', "10", -32700),
        ('{"jsonrpc":"2.0","id":11,"method":', "11", -32700),
        ('{"id":"a\rb","method":"ping"}', '"a\\rb"', -32700),
        ('{"id":3,"hello":"world"}', "3", -32600),
        ('{"hello":"world"}', "null", -32600),
        ('{"jsonrpc":"2.0","method":7}', "null", -32600),
        ("this is not json", "null", -32700),
        ("42", "null", -32600),
        ("[]", "null", -32600),
        ("[" * 20_000_000, "null", -32600),
    ],
)
def test_every_request_gets_one_answer_with_the_id_it_can_read(line, id_text, code):
    replies = replies_for_line(line)
    assert len(replies) == 1
    reply = replies[0]
    assert reply.startswith('{"jsonrpc":"2.0","id":' + id_text + ',"error":')
    error = json.loads(reply, parse_int=lambda digits: int(digits) if len(digits) < 4300 else digits)["error"]
    assert error["code"] == code
    assert error["message"].split(": ")[0] in ("invalid_request", "parse_error", "invalid_text")
    assert "nothing was done" in error["message"]


def test_a_batch_gets_one_answer_per_request_in_it():
    line = (
        '[{"jsonrpc":"2.0","id":41,"method":"ping"}, {"jsonrpc":"2.0","method":"ping"}, 5,'
        ' {"jsonrpc":"2.0","id":"42","method":"tools/list"}]'
    )
    ids = [json.loads(reply)["id"] for reply in replies_for_line(line)]
    assert ids == [41, None, "42"]


def test_the_answer_names_the_problem():
    def message(line: str) -> str:
        return json.loads(replies_for_line(line)[0])["error"]["message"]

    assert "integer, not a fraction" in message('{"jsonrpc":"2.0","id":1.5,"method":"ping"}')
    assert "more than 4300 digits" in message('{"jsonrpc":"2.0","id":1,"method":"x","params":{"a":' + "1" * 4301 + "}}")
    assert "Invalid control character, character" in message('{"jsonrpc":"2.0","id":1,"method":"x\r"}')
    assert "lone surrogate" in message('{"jsonrpc":"2.0","id":1,"method":"\\udc00"}')
    assert "batches are not supported" in message("[1]")
