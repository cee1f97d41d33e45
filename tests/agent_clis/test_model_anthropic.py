"""The scripted Anthropic Messages server (tests/models/anthropic.py), without any CLI: its SSE
and JSON answers follow the script, and it records every request without credentials."""

import json
import urllib.request

import pytest
from models.anthropic import AnthropicModel, to_turn

TASK = "Message #12 from kimi is a task. Handle it.\n\nMODE=block\n"
TOOLS = [
    {"name": f"mcp__agent_bridge__{t}", "input_schema": {"type": "object"}}
    for t in ("claim_message", "send_message", "release_message")
]


def post(model: AnthropicModel, body: dict, path: str = "/v1/messages?beta=true") -> tuple[str, str]:
    request = urllib.request.Request(
        model.base_url + path,
        data=json.dumps(body).encode(),
        method="POST",
        headers={
            "content-type": "application/json",
            "x-api-key": "sekrit",
            "authorization": "Bearer sekrit",
            "anthropic-version": "2023-06-01",
        },
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.headers["Content-Type"], response.read().decode()


def sse_events(payload: str) -> list[dict]:
    return [json.loads(line[len("data: ") :]) for line in payload.splitlines() if line.startswith("data: ")]


@pytest.fixture
def model(tmp_path):
    with AnthropicModel(tmp_path / "requests.jsonl") as server:
        yield server


def test_streams_the_scripted_tool_call_and_records_the_request_without_credentials(model):
    body = {
        "model": "claude-x",
        "stream": True,
        "tools": TOOLS,
        "max_tokens": 100,
        "messages": [{"role": "user", "content": [{"type": "text", "text": TASK}]}],
    }
    content_type, payload = post(model, body)
    assert content_type == "text/event-stream"
    events = sse_events(payload)
    assert [e["type"] for e in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert events[1]["content_block"]["name"] == "mcp__agent_bridge__claim_message"
    arguments = json.loads("".join(e["delta"]["partial_json"] for e in events[2:4]))
    assert arguments == {"message_id": 12}
    assert events[5]["delta"]["stop_reason"] == "tool_use"
    assert events[0]["message"]["usage"]["input_tokens"] > 0 and events[5]["usage"]["output_tokens"] > 0

    [recorded] = model.requests()
    assert recorded["path"] == "/v1/messages?beta=true" and recorded["body"] == body
    assert "x-api-key" not in recorded["headers"] and "authorization" not in recorded["headers"]
    assert "sekrit" not in model.record_path.read_text()
    assert recorded["headers"]["anthropic-version"] == "2023-06-01"
    assert model.messages_requests() == [body]
    assert model.errors == []


def test_answers_json_when_not_streaming_and_ends_the_turn_after_the_plan(model):
    history = [{"role": "user", "content": TASK}]
    for number in range(3):  # claim, result, release: each answered by a tool result
        history += [
            {"role": "assistant", "content": [{"type": "tool_use", "id": f"t{number}", "name": "x", "input": {}}]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": f"t{number}", "content": [{"type": "text", "text": "ok"}]}
                ],
            },
        ]
    _, payload = post(model, {"model": "m", "stream": False, "tools": TOOLS, "messages": history})
    doc = json.loads(payload)
    assert doc["stop_reason"] == "end_turn" and doc["content"] == [
        {"type": "text", "text": "block: finished message 12"}
    ]
    assert doc["usage"]["input_tokens"] > 0


def test_to_turn_tolerates_system_entries_and_defers_to_tool_search(model):
    body = {
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": TASK}],
        "tools": [{"name": "ToolSearch"}, {"name": "mcp__agent_bridge__claim_message", "defer_loading": True}],
    }
    turn = to_turn(body)
    assert turn.prompt == TASK and turn.tools == ("ToolSearch",) and turn.tool_results == ()
    step = model.step_for(body)
    assert step.name == "ToolSearch" and step.arguments["query"].startswith("select:mcp__agent_bridge__claim")


def test_a_side_request_without_a_task_gets_a_short_answer_and_hello_is_up(model):
    _, payload = post(model, {"model": "m", "messages": [{"role": "user", "content": "title this"}]})
    assert json.loads(payload)["content"][0]["text"] == "ok"
    with urllib.request.urlopen(
        urllib.request.Request(model.base_url + "/api/hello", method="HEAD"), timeout=30
    ) as response:
        assert response.status == 200
    assert [r["method"] for r in model.requests()] == ["POST", "HEAD"]
