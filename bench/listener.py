"""Dispatcher figures: send-to-supervisor-start and send-to-worker-start latency, the
idle listener's CPU and RSS, after start and after the N dispatches, and the RSS floor under it:
a fresh interpreter's RSS after importing, one at a time and cumulatively, what the listener
imports (``RSS_FLOOR``).
``uv run python -m bench.listener [--messages N] [--idle-seconds S]``.

A real listener process runs against a temporary store; messages are sent one at a time
through the domain layer (the send path is measured elsewhere), each after the previous
attempt settled, with a launcher that exits at once. Supervisor start is the attempt's
``started_at`` (written by the forked supervisor behind the barrier); worker start is
the moment its pid and start time were recorded (the gate opens right after, see supervisor.py).
"""

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

PROJECT = Path(__file__).resolve().parent.parent
AGENTS = {"claude", "kimi"}


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _wait(predicate, deadline: float = 60.0):
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if value := predicate():
            return value
        time.sleep(0.005)
    raise TimeoutError("benchmark wait timed out")


def _setup(root: Path, db: str | None = None) -> dict[str, str]:
    launcher = root / "instant.sh"
    launcher.write_text("#!/bin/sh\nexit 0\n")
    launcher.chmod(0o755)
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
        "AGENT_BRIDGE_DB": db or str(root / "bridge.db"),
        "AGENT_BRIDGE_CONFIG": str(root / "config.json"),
        "AGENT_BRIDGE_RUNTIME_DIR": str(root / "runtime"),
        "AGENT_BRIDGE_WORKSPACE": str(root),
    }


# What an idle listener process holds, step by step; each step adds its imports to the ones before.
# pydantic and pydantic-settings are not among them: the listener leaves them to forked children
# (dispatch/checked.py validates the settings and config.json). Nor click and the command line:
# `listener run` execs dispatch/listener_main.py once they have checked its arguments.
RSS_FLOOR = (
    ("the interpreter", ""),
    ("+ sqlite3", "import sqlite3"),
    ("+ structlog (the logs; loaded without rich or asyncio)", "import dispatcher.core.logs"),
    ("+ the listener's own modules", "import dispatcher.dispatch.listener_main"),
)


def rss_floor() -> list[dict]:
    """Resident memory (``VmRSS``, what ``psutil``'s ``rss`` reads) of a fresh ``python -c`` after
    each cumulative step of ``RSS_FLOOR``: the median of three runs each."""
    steps, code = [], []
    for label, statement in RSS_FLOOR:
        code.append(statement)
        probe = "; ".join(
            [
                *filter(None, code),
                "print(next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmRSS')))",
            ]
        )
        runs = [
            int(
                subprocess.run(
                    [sys.executable, "-c", probe], cwd=PROJECT, capture_output=True, text=True, check=True
                ).stdout
            )
            for _ in range(3)
        ]
        steps.append({"step": label, "rss_mib": round(statistics.median(runs) / 1024, 1)})
    return steps


def start_listener(env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "dispatcher", "listener", "run", "--agent", "claude"],
        cwd=PROJECT,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def idle_sample(listener: subprocess.Popen, progress: Path, seconds: float) -> tuple[psutil.Process, float]:
    """Once the listener is idle: its process, and the share of a core it used over ``seconds``."""
    _wait(lambda: progress.exists() and json.loads(progress.read_text()).get("stage") == "idle")
    proc = psutil.Process(listener.pid)
    time.sleep(1.0)  # let start-up settle before the idle sample
    before, wall = proc.cpu_times(), time.monotonic()
    time.sleep(seconds)
    after, wall = proc.cpu_times(), time.monotonic() - wall
    return proc, (after.user + after.system - before.user - before.system) / wall * 100


def measure(messages: int = 100, idle_seconds: float = 20.0, db: str | None = None, floor: bool = True) -> dict:
    """``db``: a ``postgresql://`` store to run on instead of a SQLite file in a temporary directory;
    ``floor``: also measure the RSS floor import by import (``rss_floor``)."""
    sys.path.insert(0, str(PROJECT))
    from dispatcher.bridge.messages import send_message
    from dispatcher.store import open_store

    with tempfile.TemporaryDirectory(prefix="bench-listener-") as tmp:
        root = Path(tmp)
        env = _setup(root, db)
        conn = open_store(db or root / "bridge.db")
        listener = start_listener(env)
        try:
            progress = root / "runtime" / "claude.progress.json"
            proc, idle_cpu = idle_sample(listener, progress, idle_seconds)
            rss_mib = proc.memory_info().rss / 2**20

            to_supervisor, to_worker = [], []
            reader = open_store(db) if db else sqlite3.connect(root / "bridge.db")
            for n in range(messages):
                sent = send_message(
                    conn, sender="kimi", recipient="claude", text=f"bench {n}", kind="task", agents=AGENTS
                )
                created = reader.execute("SELECT created_at FROM messages WHERE id = ?", (sent["id"],)).fetchone()[0]
                row = _wait(
                    lambda sid=sent["id"]: reader.execute(
                        "SELECT started_at, worker_start_time, state FROM dispatch_attempts WHERE message_id = ?",
                        (sid,),
                    ).fetchone()
                )
                to_supervisor.append((row[0] - created) * 1000)
                done = _wait(
                    lambda sid=sent["id"]: (
                        (
                            r := reader.execute(
                                "SELECT worker_started_at, state FROM dispatch_attempts WHERE message_id = ?", (sid,)
                            ).fetchone()
                        )
                        and r[1] == "finished"
                        and r
                    )
                )
                if done[0]:
                    to_worker.append((done[0] - created) * 1000)
                # The listener goes back to idle waiting before the next send.
                _wait(lambda: json.loads(progress.read_text()).get("current") is None)
            rss_after_mib = proc.memory_info().rss / 2**20
        finally:
            listener.terminate()
            listener.wait(30)
    return {
        "messages": messages,
        "send_to_supervisor_ms": {"median": statistics.median(to_supervisor), "p99": _percentile(to_supervisor, 0.99)},
        "send_to_worker_ms": {"median": statistics.median(to_worker), "p99": _percentile(to_worker, 0.99)},
        "idle_listener": {
            "cpu_percent": round(idle_cpu, 3),
            "rss_mib": round(rss_mib, 1),
            "rss_after_dispatches_mib": round(rss_after_mib, 1),
            "seconds": idle_seconds,
        },
        **({"rss_floor": rss_floor()} if floor else {}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100)
    parser.add_argument("--idle-seconds", type=float, default=20.0)
    args = parser.parse_args()
    result = measure(args.messages, args.idle_seconds)
    print(json.dumps(result, indent=2))
    s, w, i = result["send_to_supervisor_ms"], result["send_to_worker_ms"], result["idle_listener"]
    print(f"send -> supervisor start: median {s['median']:.1f} ms, p99 {s['p99']:.1f} ms (target: median < 100 ms)")
    print(f"send -> worker start:     median {w['median']:.1f} ms, p99 {w['p99']:.1f} ms")
    print(
        f"idle listener: {i['cpu_percent']:.2f}% of a core, RSS {i['rss_mib']:.1f} MiB after start, "
        f"{i['rss_after_dispatches_mib']:.1f} MiB after {result['messages']} dispatches (target: < 1% CPU)"
    )
    print("RSS floor: " + "; ".join(f"{step['step']} {step['rss_mib']} MiB" for step in result["rss_floor"]))


if __name__ == "__main__":
    main()
