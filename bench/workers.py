"""Several workers per agent: N tasks of S seconds each through ``max_workers=N`` against one
such task alone, as a ratio (issue 29: 4 x 20 s in <= 1.3x the time of one), and the idle
listener's CPU with ``max_workers`` set (its idle cost must not change).
``uv run python -m bench.workers [--tasks 4] [--seconds 20] [--idle-seconds 10]``.

A real listener process runs against a temporary SQLite store; the launcher is a scripted
worker that sleeps S seconds and exits (its verdict, ``no_evidence``, does not matter here).
Each run's time is from the first send to the last attempt's recorded ``finished_at``.
"""

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from bench.listener import AGENTS, PROJECT, _setup, _wait, idle_sample, start_listener


def _configure(root: Path, seconds: float, workers: int) -> None:
    launcher = root / "sleeper.sh"
    launcher.write_text(f"#!/bin/sh\nsleep {seconds}\nexit 0\n")
    launcher.chmod(0o755)
    agent = {"auto": True, "launcher": str(launcher), "worker_timeout_seconds": 600, "max_workers": workers}
    doc = {"agents": {"claude": agent, "kimi": {"auto": False, "launcher": str(launcher)}}}
    (root / "config.json").write_text(json.dumps(doc))


def _run(conn, reader, tasks: int) -> float:
    from dispatcher.bridge.messages import send_message

    sent_at = time.time()
    ids = [
        send_message(conn, sender="kimi", recipient="claude", text=f"bench {n}", kind="task", agents=AGENTS)["id"]
        for n in range(tasks)
    ]
    finished = []
    for mid in ids:
        row = _wait(
            lambda m=mid: (
                (
                    r := reader.execute(
                        "SELECT state, finished_at FROM dispatch_attempts WHERE message_id = ?", (m,)
                    ).fetchone()
                )
                and r[0] == "finished"
                and r
            ),
            deadline=600.0,
        )
        finished.append(row[1])
    return max(finished) - sent_at


def measure(tasks: int = 4, seconds: float = 20.0, idle_seconds: float = 10.0) -> dict:
    sys.path.insert(0, str(PROJECT))
    from dispatcher.store import open_store

    with tempfile.TemporaryDirectory(prefix="bench-workers-") as tmp:
        root = Path(tmp)
        env = _setup(root)
        _configure(root, seconds, tasks)
        conn = open_store(root / "bridge.db")
        reader = open_store(root / "bridge.db")
        listener = start_listener(env)
        try:
            _, idle_cpu = idle_sample(listener, root / "runtime" / "claude.progress.json", idle_seconds)
            one = _run(conn, reader, 1)
            many = _run(conn, reader, tasks)
        finally:
            listener.terminate()
            listener.wait(30)
            conn.close()
            reader.close()
    return {
        "tasks": tasks,
        "task_seconds": seconds,
        "one_task_seconds": round(one, 2),
        "all_tasks_seconds": round(many, 2),
        "ratio": round(many / one, 3),
        "idle_listener_cpu_percent": round(idle_cpu, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    args = parser.parse_args()
    result = measure(args.tasks, args.seconds, args.idle_seconds)
    print(json.dumps(result, indent=2))
    print(
        f"{result['tasks']} tasks of {result['task_seconds']:.0f} s through max_workers={result['tasks']}: "
        f"{result['all_tasks_seconds']:.1f} s, one alone {result['one_task_seconds']:.1f} s, "
        f"ratio {result['ratio']:.2f} (target: <= 1.3)"
    )


if __name__ == "__main__":
    main()
