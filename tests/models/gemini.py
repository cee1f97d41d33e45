"""A scripted Gemini API server on 127.0.0.1: just enough of v1beta for one gemini-cli worker turn.

``POST /v1beta/models/<model>:streamGenerateContent?alt=sse`` (the main chat) and
``POST …:generateContent`` are answered by the scripted model (``script.next_step``): the
request becomes a ``Turn`` (user text parts, the offered ``functionDeclarations`` names, the
``functionResponse`` parts so far) and the step goes back as a ``functionCall`` part or a
text part, with ``usageMetadata`` and ``finishReason``. A non-streaming call that asks for
JSON (gemini-cli's model router and its other utility calls) gets a minimal JSON answer;
``countTokens`` and model listing are answered minimally too.

Every request is appended to a JSONL recording (method, path, parsed body), so a test can
assert what the CLI offered and sent. ``fail_with`` makes every model call answer with an
HTTP error instead (to provoke the CLI's error result); the router's side call is
still answered, so only the main model call fails.
"""

import json
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from . import script
from .loopback import LoopbackServer

MODEL_VERSION = "scripted-gemini"


def turn_of(body: dict) -> script.Turn:
    """The scripted model's view of one generateContent request."""
    texts, results = [], []
    for content in body.get("contents") or []:
        for part in content.get("parts") or []:
            if not isinstance(part, dict):
                continue
            if content.get("role", "user") == "user" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            response = part.get("functionResponse")
            if isinstance(response, dict):
                results.append(json.dumps(response.get("response"), sort_keys=True))
    tools = tuple(
        decl["name"]
        for tool in body.get("tools") or []
        for decl in (tool.get("functionDeclarations") or [])
        if isinstance(decl, dict) and isinstance(decl.get("name"), str)
    )
    return script.Turn(prompt="\n".join(texts), tools=tools, tool_results=tuple(results))


def offered_tools(body: dict) -> list[str]:
    return list(turn_of(body).tools)


def _usage(body: dict) -> dict:
    prompt = len(json.dumps(body.get("contents") or [])) // 4 + 1 + script.extra_usage(turn_of(body).prompt)
    return {"promptTokenCount": prompt, "candidatesTokenCount": 12, "totalTokenCount": prompt + 12}


def answer(body: dict) -> dict:
    """One GenerateContentResponse for a chat request, from the script."""
    step = script.next_step(turn_of(body))
    if isinstance(step, script.ToolCall):
        part = {"functionCall": {"name": step.name, "args": step.arguments}}
    else:
        part = {"text": step.text}
    return {
        "candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": _usage(body),
        "modelVersion": MODEL_VERSION,
    }


def _utility_answer(body: dict) -> dict:
    """gemini-cli's side calls (router, next-speaker check, ...) want JSON text: a small, valid one."""
    doc = {"complexity_reasoning": "scripted", "complexity_score": 1, "next_speaker": "user", "reasoning": "scripted"}
    return {
        "candidates": [
            {"content": {"role": "model", "parts": [{"text": json.dumps(doc)}]}, "finishReason": "STOP", "index": 0}
        ],
        "usageMetadata": _usage(body),
        "modelVersion": MODEL_VERSION,
    }


def _wants_json(body: dict) -> bool:
    config = body.get("generationConfig") or {}
    return (
        config.get("responseMimeType") == "application/json"
        or "responseJsonSchema" in config
        or "responseSchema" in config
    )


class GeminiServer(LoopbackServer):
    """``with GeminiServer(recording) as server:`` … ``server.base_url`` for GOOGLE_GEMINI_BASE_URL."""

    def __init__(self, recording: Path) -> None:
        self.fail_with: int | None = None  # an HTTP status every main chat call answers with, when set
        super().__init__(recording, self._handler())

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def _send_json(self, status: int, doc: dict) -> None:
                data = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _error(self, status: int) -> None:
                self._send_json(
                    status,
                    {
                        "error": {
                            "code": status,
                            "message": f"scripted server says {status}",
                            "status": "UNAVAILABLE" if status >= 500 else "RESOURCE_EXHAUSTED",
                        }
                    },
                )

            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                server._record({"method": "GET", "path": self.path})
                if "/models" in self.path:
                    self._send_json(
                        200,
                        {
                            "models": [
                                {
                                    "name": "models/scripted",
                                    "supportedGenerationMethods": [
                                        "generateContent",
                                        "streamGenerateContent",
                                        "countTokens",
                                    ],
                                }
                            ]
                        },
                    )
                else:
                    self._send_json(404, {"error": {"code": 404, "message": "not scripted", "status": "NOT_FOUND"}})

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {"_unparsed": raw.decode("utf-8", "replace")}
                server._record({"method": "POST", "path": self.path, "body": body})
                path = self.path.split("?", 1)[0]
                if path.endswith(":countTokens"):
                    self._send_json(200, {"totalTokens": _usage(body)["promptTokenCount"]})
                elif path.endswith(":streamGenerateContent") or path.endswith(":generateContent"):
                    if server.fail_with and path.endswith(":streamGenerateContent"):
                        self._error(server.fail_with)
                    elif path.endswith(":streamGenerateContent"):
                        self._stream(body)
                    else:
                        self._send_json(200, _utility_answer(body) if _wants_json(body) else answer(body))
                else:
                    self._send_json(404, {"error": {"code": 404, "message": "not scripted", "status": "NOT_FOUND"}})

            def _stream(self, body: dict) -> None:
                try:
                    doc = _utility_answer(body) if _wants_json(body) else answer(body)
                except ValueError as exc:  # a request the script cannot read: a visible 400, not a hang
                    self._send_json(400, {"error": {"code": 400, "message": str(exc), "status": "INVALID_ARGUMENT"}})
                    return
                data = f"data: {json.dumps(doc)}\r\n\r\n".encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler


def main() -> None:
    """``PYTHONPATH=tests python -m models.gemini RECORDING``: serve until interrupted, base URL on stdout."""
    import sys
    import time

    if len(sys.argv) != 2:
        sys.exit("usage: python -m models.gemini RECORDING.jsonl")
    with GeminiServer(Path(sys.argv[1])) as server:
        print(server.base_url, flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
