"""The plumbing every scripted model server shares: an HTTP server on 127.0.0.1 (any free
port) in a daemon thread, and a JSON-lines recording of every request it received."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class LoopbackServer:
    def __init__(self, recording: Path | str, handler: type[BaseHTTPRequestHandler]) -> None:
        self.recording = Path(recording)
        self.recording.parent.mkdir(parents=True, exist_ok=True)
        self.recording.touch()
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    def start(self):
        if not self._thread.is_alive():
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            self._httpd.shutdown()
            self._thread.join(10)
        self._httpd.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def requests(self) -> list[dict]:
        """Every recorded request, oldest first."""
        with self._lock:
            lines = self.recording.read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    def _record(self, entry: dict) -> None:
        with self._lock, self.recording.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry) + "\n")
