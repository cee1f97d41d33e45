"""send -> a real worker's first receive answer. ``uv run python -m bench.real_worker [--messages N]``.

Like ``bench.listener``'s send -> worker start, but the launcher starts a real worker: a
Python process (this file, run as a script) that opens its own MCP server (server.py with the
environment the dispatcher gave it: AGENT_BRIDGE_ROLE=worker, its AGENT_ID and store) through
the mcp stdio client, calls ``receive_messages``, notes the wall clock when the answer
arrives and exits. The figure is that moment minus the message's ``created_at``: what an
agent CLI would wait, at the least, before it can see its task.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
AGENTS = {"claude", "kimi"}
MARK_DIR_ENV = "BENCH_FIRST_RECEIVE_DIR"


async def _worker() -> None:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    mark_dir = Path(os.environ[MARK_DIR_ENV])
    message_id = int(os.environ["AGENT_BRIDGE_MESSAGE_ID"])
    params = StdioServerParameters(
        command=sys.executable, args=[str(PROJECT / "server.py")], env=dict(os.environ), cwd=str(PROJECT)
    )
    with open(mark_dir / f"{message_id}.stderr.log", "a", encoding="utf-8") as errlog:
        async with Client(stdio_client(params, errlog=errlog), read_timeout_seconds=30) as client:
            r = await client.call_tool("receive_messages", {"limit": 20})
            answered = time.time()
            ids = [m["id"] for m in (r.structured_content or {}).get("messages") or []]
    (mark_dir / f"{message_id}.json").write_text(
        json.dumps({"answered": answered, "error": r.is_error, "got_task": message_id in ids})
    )


def _setup(root: Path) -> dict[str, str]:
    launcher = root / "real-worker.sh"
    launcher.write_text(f'#!/bin/sh\nexec "$AGENT_BRIDGE_PYTHON" {str(Path(__file__).resolve())!r} --as-worker\n')
    launcher.chmod(0o755)
    (root / "marks").mkdir()
    (root / "config.json").write_text(
        json.dumps(
            {
                "agents": {
                    "claude": {"auto": True, "launcher": str(launcher), "worker_timeout_seconds": 60},
                    "kimi": {"auto": False, "launcher": str(launcher)},
                }
            }
        )
    )
    return {
        **os.environ,
        "AGENT_BRIDGE_DB": str(root / "bridge.db"),
        "AGENT_BRIDGE_CONFIG": str(root / "config.json"),
        "AGENT_BRIDGE_RUNTIME_DIR": str(root / "runtime"),
        "AGENT_BRIDGE_WORKSPACE": str(root),
        MARK_DIR_ENV: str(root / "marks"),
    }


def _wait(predicate, deadline: float = 60.0):
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if value := predicate():
            return value
        time.sleep(0.005)
    raise TimeoutError("benchmark wait timed out")


def measure(messages: int = 100) -> dict:
    sys.path.insert(0, str(PROJECT))
    from dispatcher.bridge.messages import send_message
    from dispatcher.store import open_store

    from .stats import summarize

    with tempfile.TemporaryDirectory(prefix="bench-real-worker-") as tmp:
        root = Path(tmp)
        env = _setup(root)
        conn = open_store(root / "bridge.db")
        listener = subprocess.Popen(
            [sys.executable, "-m", "dispatcher", "listener", "run", "--agent", "claude"],
            cwd=PROJECT,
            env=env,
            stdin=subprocess.DEVNULL,
        )
        to_receive, to_worker, failures = [], [], []
        try:
            progress = root / "runtime" / "claude.progress.json"
            _wait(lambda: progress.exists() and json.loads(progress.read_text()).get("stage") == "idle")
            reader = sqlite3.connect(root / "bridge.db")
            for n in range(messages):
                sent = send_message(
                    conn, sender="kimi", recipient="claude", text=f"bench {n}", kind="task", agents=AGENTS
                )
                created = reader.execute("SELECT created_at FROM messages WHERE id = ?", (sent["id"],)).fetchone()[0]
                done = _wait(
                    lambda: (
                        (
                            r := reader.execute(
                                "SELECT worker_started_at, state FROM dispatch_attempts WHERE message_id = ?",
                                (sent["id"],),  # noqa: B023 - the closure runs at once, inside this iteration
                            ).fetchone()
                        )
                        and r[1] == "finished"
                        and r
                    )
                )
                mark = root / "marks" / f"{sent['id']}.json"
                if done[0]:
                    to_worker.append(done[0] - created)
                if mark.exists():
                    m = json.loads(mark.read_text())
                    if m["error"] or not m["got_task"]:
                        failures.append(f"message {sent['id']}: error={m['error']} got_task={m['got_task']}")
                    to_receive.append(m["answered"] - created)
                else:
                    log = root / "marks" / f"{sent['id']}.stderr.log"
                    failures.append(
                        f"message {sent['id']}: no answer; "
                        f"{log.read_text()[-300:] if log.exists() else 'no server log'}"
                    )
                _wait(lambda: json.loads(progress.read_text()).get("current") is None)
            reader.close()
        finally:
            listener.terminate()
            listener.wait(30)
            conn.close()
    return {
        "messages": messages,
        "send_to_first_receive": summarize(to_receive),
        "send_to_worker_recorded": summarize(to_worker),
        "failures": len(failures),
        "failure_samples": failures[:3],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100)
    parser.add_argument("--as-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.as_worker:
        import anyio

        anyio.run(_worker)
        return
    out = measure(args.messages)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
