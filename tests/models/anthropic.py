"""A scripted Anthropic Messages API server on 127.0.0.1 (Claude Code; Kimi Code with
``KIMI_MODEL_PROVIDER_TYPE=anthropic``).

It speaks just enough of the API for one worker turn: ``HEAD``/``GET /api/hello`` (a reachability
probe), ``POST /v1/messages`` (SSE when ``stream`` is true, one JSON message otherwise) and
``POST /v1/messages/count_tokens``. Every request turns into a ``script.Turn``, and the script's
step (a tool call or a final text) into the response. Every request is recorded, one JSON line
each (``path``, ``headers`` without credentials, ``body``), so tests can assert what the CLI
offered and sent.

    with AnthropicModel(tmp_path / "requests.jsonl") as model:
        env["ANTHROPIC_BASE_URL"] = model.base_url
        ...
        model.requests()          # every recorded request, oldest first
        model.messages_requests() # only the POST /v1/messages bodies

A request that names no bridge task (a CLI's side request: a title, a quota probe) gets a
short fixed text answer and ``end_turn``.
"""

import contextlib
import itertools
import json
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from . import script
from .loopback import LoopbackServer

MODEL = "claude-sonnet-4-5"
SIDE_ANSWER = "ok"
_SECRET_MARKERS = ("key", "auth", "token", "secret", "cookie", "password")


def _text_of(content: Any) -> str:
    """The text of a message's content (a string or a list of blocks), tool results excluded."""
    if isinstance(content, str):
        return content
    parts = []
    for block in content or []:
        if isinstance(block, dict) and block.get("type") == "text":
            parts.append(str(block.get("text", "")))
    return "\n".join(parts)


def _result_text(block: dict) -> str:
    content = block.get("content")
    if isinstance(content, str):
        return content
    parts = []
    for item in content or []:
        if isinstance(item, dict):
            if item.get("type") == "text":
                parts.append(str(item.get("text", "")))
            elif item.get("type") == "tool_reference":
                parts.append(f"tool_reference:{item.get('tool_name', '')}")
    return "\n".join(parts)


def offered_tools(body: dict) -> list[str]:
    """Every tool name in a request's ``tools[]`` (deferred ones included)."""
    return [str(tool.get("name")) for tool in body.get("tools") or [] if isinstance(tool, dict)]


def to_turn(body: dict) -> script.Turn:
    """A Messages request as the script sees it.

    prompt: the text of the user messages up to the first assistant message (a ``system``
    role entry in between is tolerated and skipped); tools: the names offered directly
    (tools marked ``defer_loading`` are not callable until loaded, so they do not count);
    tool_results: every tool_result block so far, in order."""
    prompt_parts: list[str] = []
    results: list[str] = []
    seen_assistant = False
    for message in body.get("messages") or []:
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if role == "assistant":
            seen_assistant = True
            continue
        if role != "user":
            continue
        content = message.get("content")
        if not seen_assistant:
            prompt_parts.append(_text_of(content))
        if isinstance(content, list):
            results.extend(_result_text(b) for b in content if isinstance(b, dict) and b.get("type") == "tool_result")
    tools = tuple(
        str(t.get("name")) for t in body.get("tools") or [] if isinstance(t, dict) and not t.get("defer_loading")
    )
    return script.Turn(prompt="\n".join(prompt_parts), tools=tools, tool_results=tuple(results))


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


class AnthropicModel(LoopbackServer):
    """The server, started at once in a background thread; a context manager (``close`` on exit)."""

    def __init__(self, record_path: Path | str, model: str = MODEL) -> None:
        self.model = model
        self._ids = itertools.count(1)
        self.errors: list[str] = []  # unexpected failures while answering (tests may assert it empty)
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_HEAD(self) -> None:
                owner._handle(self, "HEAD")

            def do_GET(self) -> None:
                owner._handle(self, "GET")

            def do_POST(self) -> None:
                owner._handle(self, "POST")

        super().__init__(record_path, Handler)
        self.start()

    @property
    def record_path(self) -> Path:
        return self.recording

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.stop()

    # -- recording -------------------------------------------------------------------

    def messages_requests(self) -> list[dict]:
        """The bodies of the ``POST /v1/messages`` requests, oldest first."""
        return [
            r["body"] for r in self.requests() if r["method"] == "POST" and urlsplit(r["path"]).path == "/v1/messages"
        ]

    def _record_request(self, method: str, path: str, headers: dict, body: Any) -> None:
        safe = {k.lower(): v for k, v in headers.items() if not any(marker in k.lower() for marker in _SECRET_MARKERS)}
        self._record({"method": method, "path": path, "headers": safe, "body": body})

    # -- answering -------------------------------------------------------------------

    def _handle(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        path = urlsplit(handler.path).path
        body: Any = None
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = {"unparsed_bytes": len(raw)}
        self._record_request(method, handler.path, dict(handler.headers.items()), body)
        try:
            if path == "/api/hello" and method in ("HEAD", "GET"):
                self._send(handler, 200, "application/json", b"{}" if method == "GET" else b"", head=method == "HEAD")
            elif method == "POST" and path == "/v1/messages/count_tokens":
                tokens = _tokens(json.dumps(body)) if body else 1
                self._send_json(handler, 200, {"input_tokens": tokens})
            elif method == "POST" and path == "/v1/messages" and isinstance(body, dict):
                self._messages(handler, body)
            else:
                self._send_json(
                    handler, 404, {"type": "error", "error": {"type": "not_found_error", "message": "not scripted"}}
                )
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception as exc:  # noqa: BLE001 - reported to the test, answered as a 500
            self.errors.append(f"{type(exc).__name__}: {exc}")
            with contextlib.suppress(OSError):
                self._send_json(handler, 500, {"type": "error", "error": {"type": "api_error", "message": str(exc)}})

    def step_for(self, body: dict) -> script.Step:
        turn = to_turn(body)
        tool_search = "ToolSearch" if "ToolSearch" in offered_tools(body) else None
        try:
            return script.next_step(turn, tool_search=tool_search)
        except ValueError:  # no bridge task in the prompt: a side request
            return script.Final(SIDE_ANSWER)

    def extra_usage(self, body: dict) -> int:
        """The tokens a ``USAGE=<n>`` line of the task adds to this response (script.extra_usage)."""
        return script.extra_usage(to_turn(body).prompt)

    def _messages(self, handler: BaseHTTPRequestHandler, body: dict) -> None:
        step = self.step_for(body)
        number = next(self._ids)
        message_id = f"msg_scripted_{number:04d}"
        input_tokens = _tokens(json.dumps(body.get("messages")) + json.dumps(body.get("system")))
        input_tokens += self.extra_usage(body)
        if isinstance(step, script.ToolCall):
            block = {
                "type": "tool_use",
                "id": f"toolu_scripted_{number:04d}",
                "name": step.name,
                "input": step.arguments,
            }
            stop_reason, output_tokens = "tool_use", _tokens(script.arguments_json(step)) + 10
        else:
            block = {"type": "text", "text": step.text}
            stop_reason, output_tokens = "end_turn", _tokens(step.text) + 1
        model = str(body.get("model") or self.model)
        usage = {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }
        if not body.get("stream"):
            self._send_json(
                handler,
                200,
                {
                    "id": message_id,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [block],
                    "stop_reason": stop_reason,
                    "stop_sequence": None,
                    "usage": usage,
                },
            )
            return
        events: list[tuple[str, dict]] = [
            (
                "message_start",
                {
                    "type": "message_start",
                    "message": {
                        "id": message_id,
                        "type": "message",
                        "role": "assistant",
                        "model": model,
                        "content": [],
                        "stop_reason": None,
                        "stop_sequence": None,
                        "usage": {**usage, "output_tokens": 1},
                    },
                },
            )
        ]
        if block["type"] == "tool_use":
            events.append(
                (
                    "content_block_start",
                    {"type": "content_block_start", "index": 0, "content_block": {**block, "input": {}}},
                )
            )
            arguments = script.arguments_json(step)
            half = len(arguments) // 2
            for piece in (arguments[:half], arguments[half:]):
                events.append(
                    (
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": 0,
                            "delta": {"type": "input_json_delta", "partial_json": piece},
                        },
                    )
                )
        else:
            events.append(
                (
                    "content_block_start",
                    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                )
            )
            events.append(
                (
                    "content_block_delta",
                    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": block["text"]}},
                )
            )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": 0}))
        events.append(
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                    "usage": {"output_tokens": output_tokens},
                },
            )
        )
        events.append(("message_stop", {"type": "message_stop"}))
        payload = "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events).encode()
        self._send(
            handler,
            200,
            "text/event-stream",
            payload,
            extra={"Cache-Control": "no-cache", "request-id": f"req_scripted_{number:04d}"},
        )

    @staticmethod
    def _send_json(handler: BaseHTTPRequestHandler, code: int, doc: dict) -> None:
        AnthropicModel._send(handler, code, "application/json", json.dumps(doc).encode())

    @staticmethod
    def _send(
        handler: BaseHTTPRequestHandler,
        code: int,
        content_type: str,
        payload: bytes,
        *,
        head: bool = False,
        extra: dict | None = None,
    ) -> None:
        handler.send_response(code)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(payload)))
        for name, value in (extra or {}).items():
            handler.send_header(name, value)
        handler.end_headers()
        if not head:
            handler.wfile.write(payload)
        handler.wfile.flush()


def main() -> None:
    """Serve by hand until SIGINT/SIGTERM: ``cd tests && python -m models.anthropic RECORD.jsonl``."""
    import argparse
    import signal

    parser = argparse.ArgumentParser(description="The scripted Anthropic Messages server on 127.0.0.1.")
    parser.add_argument("record", type=Path, help="JSONL file that receives every request")
    args = parser.parse_args()
    stop = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)  # before the server threads start: they inherit it
    with AnthropicModel(args.record) as model:
        print(f"ANTHROPIC_BASE_URL={model.base_url}", flush=True)
        signal.sigwait(stop)


if __name__ == "__main__":
    main()
