"""What traces cost a send: ``send_message`` over real stdio to two servers on one store, one
with tracing off (no ``OTEL_*`` set) and one with it on (spans to an OTLP/HTTP sink on 127.0.0.1
that answers 200 to everything), called in turn, so that both see the same machine.
``uv run python -m bench.traces [--calls N] [--warmup W] [--json]`` (docs/traces.md).

The sink only reads and answers: what the exporter's thread costs the server shows, what a
collector does with the spans does not. Figures are wall-clock milliseconds per call, as the
client sees them.
"""

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from contextlib import AsyncExitStack
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from bench.stats import summarize

REPO = Path(__file__).resolve().parent.parent
TEXT = "Benchmark note: please review the change in dispatcher/store.py and reply when done. " + "x" * 32


class _Sink(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - the http.server name
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the http.server signature
        pass


def _server(root: Path, agent: str, extra: dict[str, str]) -> StdioServerParameters:
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(root),
        "AGENT_ID": agent,
        "AGENT_BRIDGE_DB": str(root / "bridge.db"),
        "AGENT_BRIDGE_CONFIG": str(root / "config.json"),
        "AGENT_BRIDGE_RUNTIME_DIR": str(root / "runtime"),
        **extra,
    }
    return StdioServerParameters(command=sys.executable, args=[str(REPO / "server.py")], env=env, cwd=str(REPO))


async def _measure(root: Path, endpoint: str, calls: int, warmup: int) -> dict[str, list[float]]:
    configs = {"off": ("a_off", {}), "on": ("a_on", {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint})}
    samples: dict[str, list[float]] = {name: [] for name in configs}
    async with AsyncExitStack() as stack:
        clients = {}
        for name, (agent, extra) in configs.items():
            clients[name] = await stack.enter_async_context(Client(stdio_client(_server(root, agent, extra))))
        for n in range(warmup + calls):
            for name in ("off", "on") if n % 2 == 0 else ("on", "off"):
                started = time.perf_counter()
                result = await clients[name].call_tool("send_message", {"recipient": "reader", "text": TEXT})
                elapsed = time.perf_counter() - started
                if result.is_error:
                    raise RuntimeError(f"send_message failed on the {name} server")
                if n >= warmup:
                    samples[name].append(elapsed)
    return samples


def _row(name: str, figures: dict) -> str:
    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value * 1000:8.3f}"

    return f"{name:<12}{figures['n']:>6}  {ms(figures['median'])}  {ms(figures['p99'])}  {ms(figures['mean'])}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="timed sends per server (default 2000)")
    parser.add_argument("--warmup", type=int, default=100, help="untimed sends per server first (default 100)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    sink = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    try:
        with tempfile.TemporaryDirectory(prefix="bench-traces-") as tmp:
            root = Path(tmp)
            agents = {
                name: {"auto": False, "launcher": "launchers/scripted_headless.sh"}
                for name in ("a_off", "a_on", "reader")
            }
            (root / "config.json").write_text(json.dumps({"agents": agents}))
            samples = anyio.run(_measure, root, f"http://127.0.0.1:{sink.server_address[1]}", args.calls, args.warmup)
    finally:
        sink.shutdown()
        sink.server_close()
    figures = {name: summarize(values) for name, values in samples.items()}
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"send_message over stdio, {args.calls} calls each, interleaved (ms)")
    print(f"{'tracing':<12}{'n':>6}  {'median':>8}  {'p99':>8}  {'mean':>8}")
    for name, found in figures.items():
        print(_row(name, found))
    off, on = figures["off"]["median"], figures["on"]["median"]
    if off and on:
        print(f"on - off, median: {(on - off) * 1000:+.3f} ms ({(on / off - 1) * 100:+.1f} %)")


if __name__ == "__main__":
    main()
