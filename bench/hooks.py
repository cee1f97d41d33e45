"""Send → hook output visible: the hook rung of the wake ladder.

Each run commits one message for agent ``claude`` (a real store, WAL, as the server writes it),
then starts a fresh ``agent-bridge hook claude UserPromptSubmit --agent claude`` process (the
command ``register claude --hooks`` writes, the console script beside this Python) with a new
session id on stdin, and times from the committed send to the moment the process has printed
the notice naming that message's id. That is the whole cost Claude Code adds to a prompt when
mail waits: process start, the read-only store read, the per-session state file, the JSON.

    uv run python -m bench.hooks [--runs 50] [--json]

Printed: p50/p99/min/max in milliseconds, the 1-minute load average before and after, the
number of CPUs. Every run's output is checked (the id, never the text); a miss fails the run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dispatcher.bridge.messages import send_message
from dispatcher.store import open_store

from .stats import summarize

AGENTS = frozenset({"claude", "kimi"})
SECRET = "bench-secret-text"


def hook_binary() -> str:
    beside = Path(sys.executable).parent / "agent-bridge"
    return str(beside) if beside.exists() else "agent-bridge"


def one_run(conn, env: dict, n: int) -> float:
    message = send_message(
        conn, sender="kimi", recipient="claude", text=f"{SECRET} {n}", agents=AGENTS, max_body_bytes=65536, kind="task"
    )["id"]
    start = time.perf_counter()  # the send has committed (autocommit connection)
    proc = subprocess.Popen(
        [hook_binary(), "hook", "claude", "UserPromptSubmit", "--agent", "claude"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    proc.stdin.write(
        json.dumps({"session_id": f"bench-{n}", "hook_event_name": "UserPromptSubmit", "prompt": "hi"}).encode()
    )
    proc.stdin.close()
    line = proc.stdout.readline()
    elapsed = time.perf_counter() - start
    proc.stdin = None  # already closed: communicate() must not flush it
    _, err = proc.communicate(timeout=60)
    text = line.decode()
    if f"#{message} from kimi" not in text or SECRET in text or proc.returncode != 0:
        raise SystemExit(f"run {n}: unexpected hook output {text[:200]!r} (exit {proc.returncode}, {err[:200]!r})")
    conn.execute("UPDATE messages SET acknowledged_at = ? WHERE id = ?", (time.time(), message))
    return elapsed


def measure(runs: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-hooks-") as tmp:
        root = Path(tmp)
        db = root / "bridge.db"
        conn = open_store(db)  # stays open: the store is "in use", as with live servers
        env = {**os.environ, "AGENT_BRIDGE_DB": str(db), "AGENT_BRIDGE_RUNTIME_DIR": str(root / "runtime")}
        env.pop("AGENT_ID", None)
        load_before = os.getloadavg()[0]
        one_run(conn, env, -1)  # warm the page cache; not counted
        samples = [one_run(conn, env, n) for n in range(runs)]
        load_after = os.getloadavg()[0]
        conn.close()
    stats = summarize(samples)
    return {
        "what": "committed send -> fresh `agent-bridge hook claude UserPromptSubmit` printed the notice",
        "runs": runs,
        "ms": {k: (round(v * 1000, 1) if isinstance(v, float) else v) for k, v in stats.items()},
        "load_1min_before": round(load_before, 2),
        "load_1min_after": round(load_after, 2),
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
    }


def latency_cli(measure, default_runs: int, description: str, argv: list[str] | None = None) -> None:
    """``--runs N [--json]``: run ``measure(N)`` and print its p50/p99 line (or the JSON)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--runs", type=int, default=default_runs)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    result = measure(args.runs)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    ms = result["ms"]
    print(
        f"{result['what']}: n={result['runs']} p50={ms['median']} ms p99={ms['p99']} ms "
        f"min={ms['min']} ms max={ms['max']} ms; load(1m) {result['load_1min_before']} -> "
        f"{result['load_1min_after']} on {result['cpus']} CPUs"
    )
    if share := result.get("bridge_ms"):
        print(f"  of which the bridge ({result['bridge_share']}): p50={share['median']} ms p99={share['p99']} ms")


def main(argv: list[str] | None = None) -> None:
    latency_cli(measure, 50, __doc__.split("\n\n")[0], argv)


if __name__ == "__main__":
    main()
