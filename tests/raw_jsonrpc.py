"""A server.py process spoken to raw, newline-delimited JSON-RPC on a pipe: no MCP client, so a test
controls every byte it writes and sees every reply as the server wrote it."""

import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path

from harness import PROJECT

READ_TIMEOUT = 90.0


def _int_or_digits(token: str) -> int | str:
    """An echoed 5000-digit id stays text: int() refuses more than 4300 digits."""
    return int(token) if len(token) <= 4300 else token


class RawServer:
    """One server.py (AGENT_ID claude) whose replies a reader thread queues as they arrive."""

    def __init__(self, env: dict[str, str], stderr: Path) -> None:
        self._stderr = open(stderr, "ab")  # noqa: SIM115 - the server's stderr for its whole life; close() closes it
        self.proc = subprocess.Popen(
            [sys.executable, str(PROJECT / "server.py")],
            cwd=PROJECT,
            env={**os.environ, **env, "AGENT_ID": "claude"},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
        )
        self._inbox: queue.Queue = queue.Queue()
        self._early: dict = {}
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._next_id = 1000

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._inbox.put(json.loads(line, parse_int=_int_or_digits))
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
        self.proc.stdout.close()
        self._reader.join(30)
        self.proc.stdout.close()
        self._stderr.close()
