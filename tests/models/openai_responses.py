"""A scripted OpenAI Responses API server on 127.0.0.1, for ``codex exec``.

Just enough of ``POST /v1/responses`` (``stream: true``, server-sent events) for one
worker turn: each request becomes a ``script.Turn`` (the user text of the input, the
offered tools, the ``function_call_output`` items so far), and the script's ``Step``
goes back as a ``function_call`` or an assistant ``message``, between
``response.created`` and ``response.completed`` (with ``usage``).

Codex 0.171.0 sends MCP tools as one tool of ``"type": "namespace"`` (``"name":
"mcp__agent_bridge"``) holding ``function`` tools (``"name": "claim_message"``); the
turn sees them as ``mcp__agent_bridge__claim_message`` (which ``script.bridge_name``
maps), and the call goes back with ``"namespace"`` and ``"name"`` split again. Built-in
tools are named by their ``name`` or, for the typed ones (``web_search`` ...), by type.

For a known model slug (``gpt-5.5``) Codex defers MCP tools behind ``tool_search``: the
script's first call is then a ``tool_search_call`` (a BM25 query naming the bridge tools),
and the namespace it returns (``tool_search_output``) is called by full name from then on
(as deferred tools); the search counts as one tool result. A freeform tool (``apply_patch``, ``"type": "custom"``) is called with
a ``custom_tool_call`` carrying the raw ``input`` text.

Every request is appended to a JSONL recording (method, path, selected headers, body),
so tests can assert what the CLI offered and sent. The recording holds the task text:
it is the model vendor's side and belongs outside the bridge's files.

Only the HTTP(S) transport is spoken. Codex's custom providers (``model_providers.<id>``
with ``wire_api = "responses"``) use it directly; a WebSocket upgrade is refused (426).
``fail_status`` makes every ``POST`` fail with that HTTP status instead (a failed turn).
"""

import itertools
import json
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from . import script
from .loopback import LoopbackServer

TOOL_SEARCH = "tool_search"  # offered (as a tool of that type) for known model slugs such as gpt-5.5
_RECORDED_HEADERS = (
    "content-type",
    "accept",
    "authorization",
    "originator",
    "user-agent",
    "upgrade",
    "content-encoding",
    "session-id",
    "thread-id",
)


def _text_of(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [
            part.get("text", "") for part in content if isinstance(part, dict) and isinstance(part.get("text"), str)
        ]
    return []


def offered_tools(body: dict) -> dict[str, tuple[str | None, str]]:
    """The tools of a request, as the turn names them -> (namespace or None, name)."""
    tools: dict[str, tuple[str | None, str]] = {}
    for tool in body.get("tools") or []:
        if not isinstance(tool, dict):
            continue
        if tool.get("type") == "namespace":
            for inner in tool.get("tools") or []:
                if isinstance(inner, dict) and inner.get("name"):
                    tools[f"{tool['name']}__{inner['name']}"] = (tool["name"], inner["name"])
        else:
            name = tool.get("name") or tool.get("type") or "?"
            tools[name] = (None, name)
    return tools


def to_turn(body: dict) -> tuple[script.Turn, dict[str, tuple[str | None, str]]]:
    """A Responses request as the script sees it, and the offered tools by turn name."""
    prompt: list[str] = []
    results: list[str] = []
    found: list[dict] = []
    for item in body.get("input") or []:
        if not isinstance(item, dict):
            continue
        kind = item.get("type", "message")
        if kind == "message" and item.get("role") == "user":
            prompt.extend(_text_of(item.get("content")))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            output = item.get("output")
            results.append(output if isinstance(output, str) else "".join(_text_of(output)))
        elif kind == "tool_search_output":  # the tools it found are offered from now on
            found.extend(t for t in item.get("tools") or [] if isinstance(t, dict))
            results.append(json.dumps([t.get("name") for t in item.get("tools") or [] if isinstance(t, dict)]))
    tools = offered_tools(body)
    # Tools found by tool_search stay out of the turn's list (the script then calls them by full
    # name, as deferred tools), but the call goes back by their namespace and name.
    callable_tools = {**offered_tools({"tools": found}), **tools}
    return script.Turn(prompt="\n".join(prompt), tools=tuple(tools), tool_results=tuple(results)), callable_tools


def _usage(body: dict, output: list[dict]) -> dict:
    """Deterministic token counts: about a token per four bytes of input and output."""
    input_tokens = len(json.dumps(body.get("input") or [])) // 4 + script.extra_usage(to_turn(body)[0].prompt)
    output_tokens = max(1, len(json.dumps(output)) // 4)
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }


class ResponsesServer(LoopbackServer):
    """``with ResponsesServer(recording) as server:`` ... ``server.base_url`` ends in ``/v1``."""

    def __init__(self, recording: Path, *, fail_status: int | None = None) -> None:
        self.fail_status = fail_status
        self._ids = itertools.count(1)
        super().__init__(recording, self._handler())

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _next_id(self) -> int:
        with self._lock:
            return next(self._ids)

    def respond(self, body: dict) -> list[dict]:
        """The SSE events answering one request body."""
        turn, tools = to_turn(body)
        step = script.next_step(turn, tool_search=TOOL_SEARCH if TOOL_SEARCH in tools else None)
        n = self._next_id()
        custom = {t.get("name") for t in body.get("tools") or [] if isinstance(t, dict) and t.get("type") == "custom"}
        if isinstance(step, script.ToolCall) and step.name == TOOL_SEARCH:
            # Codex's tool_search (known model slugs defer MCP tools behind it): a BM25 query.
            names = step.arguments.get("query", "").removeprefix("select:").replace(",", " ")
            items = [
                {
                    "type": "tool_search_call",
                    "id": f"ts_{n}",
                    "call_id": f"call_{n}",
                    "execution": "client",
                    "status": "completed",
                    "arguments": {"query": names.replace("mcp__agent_bridge__", ""), "limit": 20},
                }
            ]
        elif isinstance(step, script.ToolCall) and step.name in custom:
            # A freeform tool (apply_patch): its input is the raw text, not JSON arguments.
            items = [
                {
                    "type": "custom_tool_call",
                    "id": f"ctc_{n}",
                    "call_id": f"call_{n}",
                    "name": step.name,
                    "input": step.arguments.get("input", ""),
                    "status": "completed",
                }
            ]
        elif isinstance(step, script.ToolCall):
            namespace, name = tools.get(step.name, (None, step.name))
            item = {
                "type": "function_call",
                "id": f"fc_{n}",
                "call_id": f"call_{n}",
                "name": name,
                "arguments": script.arguments_json(step),
                "status": "completed",
            }
            if namespace:
                item["namespace"] = namespace
            items = [item]
        else:
            items = [
                {
                    "type": "message",
                    "id": f"msg_{n}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": step.text, "annotations": []}],
                }
            ]
        response = {
            "id": f"resp_{n}",
            "object": "response",
            "status": "in_progress",
            "model": body.get("model"),
            "output": [],
        }
        events: list[dict] = [{"type": "response.created", "response": response}]
        for index, item in enumerate(items):
            events.append(
                {"type": "response.output_item.added", "output_index": index, "item": {**item, "status": "in_progress"}}
            )
            if item["type"] == "message":
                events.append(
                    {
                        "type": "response.output_text.delta",
                        "output_index": index,
                        "content_index": 0,
                        "item_id": item["id"],
                        "delta": item["content"][0]["text"],
                    }
                )
            events.append({"type": "response.output_item.done", "output_index": index, "item": item})
        events.append(
            {
                "type": "response.completed",
                "response": {**response, "status": "completed", "output": items, "usage": _usage(body, items)},
            }
        )
        return events

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
                pass

            def _entry(self, body: Any) -> dict:
                headers = {k: self.headers[k] for k in _RECORDED_HEADERS if self.headers.get(k) is not None}
                if "authorization" in headers:
                    headers["authorization"] = headers["authorization"].split(" ", 1)[0] + " <redacted>"
                return {"method": self.command, "path": self.path, "headers": headers, "body": body}

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                server._record(self._entry(None))
                if self.headers.get("upgrade", "").lower() == "websocket":
                    self._send(426, {"error": {"message": "this scripted server speaks HTTP only"}})
                elif self.path.split("?")[0].endswith("/models"):
                    self._send(200, {"object": "list", "data": [], "models": []})
                else:
                    self._send(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = {"unparsed_bytes": len(raw)}
                server._record(self._entry(body))
                if not self.path.split("?")[0].endswith("/responses") or "input" not in body:
                    self._send(404, {"error": {"message": "not found"}})
                    return
                if server.fail_status is not None:
                    self._send(server.fail_status, {"error": {"message": "scripted failure", "type": "server_error"}})
                    return
                events = server.respond(body)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                for event in events:
                    self.wfile.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
                self.wfile.flush()
                self.close_connection = True

        return Handler


def main() -> None:
    """``uv run python -m tests.models.openai_responses --record FILE``: serve until interrupted."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", type=Path, required=True, help="JSONL file every request is appended to")
    parser.add_argument("--fail-status", type=int, help="answer every POST with this HTTP status")
    args = parser.parse_args()
    server = ResponsesServer(args.record, fail_status=args.fail_status).start()
    print(server.base_url, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
