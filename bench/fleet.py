"""The fleet: N declared agents, N idle listeners on one store, their CPU and RSS together.

``uv run python -m bench.fleet [--listeners 50] [--seconds 60]``

Each listener is a real ``agent-bridge listener run --agent aN`` process (agents ``a0``..``aN-1``,
``auto`` on, nothing to dispatch) against one temporary store. Once every progress document
says ``idle`` and a settling second has passed, the listeners' CPU time (user + system, from
psutil) is sampled over ``--seconds``; the total is reported as a share of one core, with each
listener's RSS (median and sum). The machine's 1-minute load before and after is recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

PROJECT = Path(__file__).resolve().parent.parent


def _wait(predicate, deadline: float) -> None:
    end = time.monotonic() + deadline
    while not predicate():
        if time.monotonic() > end:
            raise TimeoutError("the fleet did not become idle in time")
        time.sleep(0.2)


def _idle(progress: Path) -> bool:
    try:
        return json.loads(progress.read_text()).get("stage") == "idle"
    except (OSError, ValueError):
        return False


def measure(listeners: int = 50, seconds: float = 60.0) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp:
        root = Path(tmp)
        launcher = root / "instant.sh"
        launcher.write_text("#!/bin/sh\nexit 0\n")
        launcher.chmod(0o755)
        agents = [f"a{n}" for n in range(listeners)]
        (root / "config.json").write_text(
            json.dumps({"agents": {a: {"auto": True, "launcher": str(launcher)} for a in agents}})
        )
        env = {
            **os.environ,
            "AGENT_BRIDGE_DB": str(root / "bridge.db"),
            "AGENT_BRIDGE_CONFIG": str(root / "config.json"),
            "AGENT_BRIDGE_RUNTIME_DIR": str(root / "runtime"),
            "AGENT_BRIDGE_WORKSPACE": str(root),
        }
        procs: list[subprocess.Popen] = []
        try:
            for agent in agents:  # one at a time: 50 interpreters starting at once would swamp 2 cores
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "dispatcher", "listener", "run", "--agent", agent],
                        cwd=PROJECT,
                        env=env,
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )
                _wait(lambda a=agent: _idle(root / "runtime" / f"{a}.progress.json"), 120)
            time.sleep(1.0)  # let the last start-up settle before the sample
            handles = [psutil.Process(p.pid) for p in procs]
            load_before = os.getloadavg()[0]
            before = [sum(h.cpu_times()[:2]) for h in handles]
            wall_before = time.monotonic()
            time.sleep(seconds)
            after = [sum(h.cpu_times()[:2]) for h in handles]
            wall = time.monotonic() - wall_before
            rss = [h.memory_info().rss / 2**20 for h in handles]
            load_after = os.getloadavg()[0]
            alive = sum(p.poll() is None for p in procs)
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(60)
    cpu = (sum(after) - sum(before)) / wall * 100
    return {
        "listeners": listeners,
        "alive_at_end": alive,
        "seconds": round(wall, 1),
        "cpu_percent_total": round(cpu, 3),
        "cpu_percent_each": round(cpu / listeners, 4),
        "rss_mib_median": round(statistics.median(rss), 1),
        "rss_mib_total": round(sum(rss), 1),
        "load_1min_before": round(load_before, 2),
        "load_1min_after": round(load_after, 2),
        "cpus": os.cpu_count(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listeners", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
    r = measure(args.listeners, args.seconds)
    print(json.dumps(r, indent=2))
    print(
        f"{r['listeners']} idle listeners over {r['seconds']} s: {r['cpu_percent_total']:.2f}% of one core in total "
        f"({r['cpu_percent_each']:.3f}% each), RSS {r['rss_mib_median']:.1f} MiB each, {r['rss_mib_total']:.0f} MiB "
        f"in all; load(1m) {r['load_1min_before']} -> {r['load_1min_after']} on {r['cpus']} CPUs"
    )


if __name__ == "__main__":
    main()
