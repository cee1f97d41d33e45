"""A scripted OpenAI Chat Completions server on 127.0.0.1 (opencode's ``@ai-sdk/openai-compatible``
provider).

Just enough of ``POST /v1/chat/completions`` with ``stream: true`` (server-sent
``chat.completion.chunk`` events, then a usage chunk with ``choices: []``, then
``data: [DONE]``) for one worker turn. Each request becomes a ``script.Turn``: the prompt is
the text of the user messages before the first assistant message, the tools are the
``function`` names of ``tools[]``, and the tool results are the ``role: "tool"`` messages so
far. The script's ``Step`` goes back as one ``tool_calls`` delta or as ``content``.

A request with no tools that names no bridge task (opencode's title request, which it skips
under ``--title``) gets a short fixed answer. Every request is appended to a JSONL recording
(method, path, selected headers with the credential redacted, body): it holds the task text,
so it is the model vendor's side and lives outside the bridge's files.

``fail_status`` makes every ``POST`` fail with that HTTP status instead (401 is what an
OpenAI-compatible endpoint answers a bad key with; opencode reports it as ``APIError``).
"""

import itertools
import json
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from . import script
from .loopback import LoopbackServer

SIDE_ANSWER = "ok"
_RECORDED_HEADERS = ("content-type", "accept", "authorization", "user-agent")


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(part.get("text", "")) for part in content if isinstance(part, dict) and part.get("type") == "text"
        )
    return ""


def offered_tools(body: dict) -> tuple[str, ...]:
    return tuple(
        str(tool["function"]["name"])
        for tool in body.get("tools") or []
        if isinstance(tool, dict) and isinstance(tool.get("function"), dict) and tool["function"].get("name")
    )


def to_turn(body: dict) -> script.Turn:
    """A Chat Completions request as the script sees it."""
    prompt: list[str] = []
    results: list[str] = []
    seen_assistant = False
    for message in body.get("messages") or []:
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if role == "assistant":
            seen_assistant = True
        elif role == "user" and not seen_assistant:
            prompt.append(_text_of(message.get("content")))
        elif role == "tool":
            results.append(_text_of(message.get("content")))
    return script.Turn(prompt="\n".join(prompt), tools=offered_tools(body), tool_results=tuple(results))


def _usage(body: dict, output: str) -> dict:
    """Deterministic token counts: about a token per four bytes of messages and of the answer."""
    prompt_tokens = len(json.dumps(body.get("messages") or [])) // 4 + script.extra_usage(to_turn(body).prompt)
    completion_tokens = max(1, len(output) // 4)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


class ChatCompletionsServer(LoopbackServer):
    """``with ChatCompletionsServer(recording) as server:`` ... ``server.base_url`` ends in ``/v1``."""

    def __init__(self, recording: Path, *, fail_status: int | None = None) -> None:
        self.fail_status = fail_status
        self._ids = itertools.count(1)
        super().__init__(recording, self._handler())

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def chat_requests(self) -> list[dict]:
        """The bodies of the ``POST .../chat/completions`` requests, oldest first."""
        return [
            r["body"]
            for r in self.requests()
            if r["method"] == "POST" and r["path"].split("?")[0].endswith("/chat/completions")
        ]

    def _next_id(self) -> int:
        with self._lock:
            return next(self._ids)

    def step_for(self, body: dict) -> script.Step:
        turn = to_turn(body)
        if not turn.tools and "is a task" not in turn.prompt:
            return script.Final(SIDE_ANSWER)
        try:
            return script.next_step(turn)
        except ValueError:  # a side request that quotes the task (a title) but offers no tools
            return script.Final(SIDE_ANSWER)

    def chunks(self, body: dict) -> list[dict]:
        """The ``chat.completion.chunk`` objects answering one request body."""
        step = self.step_for(body)
        n = self._next_id()
        base = {"id": f"chatcmpl-{n}", "object": "chat.completion.chunk", "created": 0, "model": body.get("model")}
        if isinstance(step, script.ToolCall):
            arguments = script.arguments_json(step)
            delta: dict = {
                "role": "assistant",
                "tool_calls": [
                    {
                        "index": 0,
                        "id": f"call_{n}",
                        "type": "function",
                        "function": {"name": step.name, "arguments": arguments},
                    }
                ],
            }
            finish, output = "tool_calls", arguments
        else:
            delta, finish, output = {"role": "assistant", "content": step.text}, "stop", step.text
        return [
            {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
            {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
            {**base, "choices": [], "usage": _usage(body, output)},
        ]

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
                if self.path.split("?")[0].endswith("/models"):
                    self._send(200, {"object": "list", "data": []})
                else:
                    self._send(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = {"unparsed_bytes": len(raw)}
                server._record(self._entry(body))
                if not self.path.split("?")[0].endswith("/chat/completions") or "messages" not in body:
                    self._send(404, {"error": {"message": "not found"}})
                    return
                if server.fail_status is not None:
                    kind = "invalid_api_key" if server.fail_status == 401 else "server_error"
                    self._send(
                        server.fail_status,
                        {"error": {"message": f"scripted failure ({kind})", "type": kind, "code": kind}},
                    )
                    return
                chunks = server.chunks(body)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                for chunk in chunks:
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True

        return Handler


def main() -> None:
    """``uv run python -m tests.models.openai_chat --record FILE``: serve until interrupted."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", type=Path, required=True, help="JSONL file every request is appended to")
    parser.add_argument("--fail-status", type=int, help="answer every POST with this HTTP status")
    args = parser.parse_args()
    server = ChatCompletionsServer(args.record, fail_status=args.fail_status).start()
    print(server.base_url, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
