"""Start-up figures (Agent Bridge only), each the wall time of a new process.

* ``cold_store``: a new ``server.py`` process on a store that does not exist yet (config.json
  only, no database file), MCP handshake and the first ``send_message`` result included:
  what the first agent on a fresh install waits for.
* ``statusline``: ``agent-bridge-statusline`` from spawn to exit, on a store with every
  declared agent (17) in config.json: what Claude Code waits for at each status refresh.
* ``doctor_json``: ``agent-bridge doctor --json`` from spawn to exit on the same store.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import anyio

from .measure import _round, cold_start_seconds
from .stats import summarize
from .targets import RECIPIENTS, REPO, Store, Target


def _timed_process(argv: list[str], env: dict[str, str]) -> tuple[float, int]:
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=str(REPO), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          timeout=120)
    return time.perf_counter() - t0, proc.returncode


def _process_figure(argv: list[str], env: dict[str, str], runs: int, deadline: float) -> dict[str, Any]:
    _timed_process(argv, env)  # warm the page cache; not counted
    samples, codes = [], []
    for _ in range(runs):
        if time.monotonic() > deadline:
            break
        s, rc = _timed_process(argv, env)
        samples.append(s)
        codes.append(rc)
    return {**summarize(samples), "command": " ".join(Path(argv[0]).name if i == 0 else a
                                                      for i, a in enumerate(argv)),
            "exit_codes": sorted(set(codes)), "samples": _round(samples)}


def cold_store(target: Target, parent: Path, reps: int, deadline: float) -> dict[str, Any]:
    samples, errors = [], []
    for rep in range(reps + 1):
        if time.monotonic() > deadline:
            break
        d = parent / f"cold-store-{rep}"
        d.mkdir(parents=True)
        store = Store(dir=d, db=d / "bridge.db", config=d / "config.json")
        agents = {name: {"auto": False, "launcher": "launchers/none.sh"} for name in RECIPIENTS}
        store.config.write_text(json.dumps({"agents": agents}))
        elapsed, ok, err = anyio.run(cold_start_seconds, target, store)
        created = store.db.exists()
        shutil.rmtree(d, ignore_errors=True)
        if rep == 0:
            continue  # the first rep warms the page cache for the interpreter and the SDK
        samples.append(elapsed)
        if not ok or not created:
            errors.append(err or "the store was not created")
    return {**summarize(samples), "errors": len(errors), "error_samples": errors[:3], "samples": _round(samples)}


def measure(target: Target, store: Store, *, runs: int, cold_reps: int, max_seconds: float) -> dict[str, Any]:
    deadline = time.monotonic() + max_seconds
    env = {**os.environ, **target.env(store, "reader")}
    bindir = Path(target.python()).parent
    return {
        "cold_store": cold_store(target, store.dir / "cold", cold_reps, deadline),
        "statusline": _process_figure([str(bindir / "agent-bridge-statusline")], env, runs, deadline),
        "doctor_json": _process_figure([str(bindir / "agent-bridge"), "doctor", "--json"], env,
                                       max(3, runs // 4), deadline),
    }
