"""The bridge as a test worker's MCP server, spoken to over stdio without the MCP SDK's client.

A stand-in worker starts the real ``server.py`` as a CLI would and calls its tools. The SDK's
client costs about 2 CPU-seconds of imports per process, paid by every fake worker the suite
launches; newline-delimited JSON-RPC is all a worker needs to say. The package's own worker
(``dispatcher.ops.demo_worker``, the demo) keeps the SDK's client, so that path stays tested.
"""

import json
import os
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

PROTOCOL_VERSION = "2025-11-25"
# What the SDK's stdio client passes a server (its default environment) and what the bridge's worker passes on.
_PASSED_NAMES = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")
_PASSED_PREFIXES = ("AGENT_", "XDG_")


class _Server:
    def __init__(self) -> None:
        environment = {k: v for k, v in os.environ.items() if k in _PASSED_NAMES or k.startswith(_PASSED_PREFIXES)}
        self.proc = subprocess.Popen(
            [os.environ["AGENT_BRIDGE_PYTHON"], str(Path(os.environ["AGENT_BRIDGE_PROJECT"]) / "server.py")],
            env=environment,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self._last_id = 0

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self._last_id += 1
        self._write({"jsonrpc": "2.0", "id": self._last_id, "method": method, "params": params})
        for line in self.proc.stdout:  # type: ignore[union-attr]
            message = json.loads(line)
            if message.get("id") == self._last_id and "method" not in message:
                if "error" in message:
                    raise RuntimeError(f"{method} failed: {message['error'].get('message')}")
                return message["result"]
            if "method" in message and "id" in message:  # a request of the server's: this client offers nothing
                self._write(
                    {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "not offered"}}
                )
        raise RuntimeError(f"the bridge's server closed its output during {method} (exit status {self.proc.wait()})")

    def notify(self, method: str) -> None:
        self._write({"jsonrpc": "2.0", "method": method})

    def _write(self, message: dict[str, Any]) -> None:
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]

    def close(self) -> None:
        """As the SDK's client ends a server: its input closed, then a bounded wait, then a kill."""
        self.proc.stdin.close()  # type: ignore[union-attr]
        try:
            self.proc.wait(2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()  # type: ignore[union-attr]


@asynccontextmanager
async def bridge_tools() -> AsyncIterator[Any]:
    """``dispatcher.ops.demo_worker.bridge_tools`` without the SDK: yields ``call(tool, **arguments)``."""
    server = _Server()
    try:
        server.request(
            "initialize",
            {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "fake-worker", "version": "0"},
            },
        )
        server.notify("notifications/initialized")

        async def call(tool: str, **arguments: Any) -> dict[str, Any]:
            result = server.request("tools/call", {"name": tool, "arguments": arguments})
            if result.get("isError"):
                first = result["content"][0]
                raise RuntimeError(f"{tool} refused: {first.get('text', first)}")
            return result["structuredContent"]

        yield call
    finally:
        server.close()
