"""Start-up figures (Agent Bridge only), each the wall time of a new process.

* ``cold_store`` (every system): a new server process on a store that does not exist yet
  (ours: config.json only, no database file; dlb-mcp: DLB_STORE names a missing file), MCP
  handshake and the first send result included: what the first agent on a fresh install
  waits for. Each rep also times the bare SDK import (``python -c "import <server module>;
  import os; os._exit(0)"``) just before, so the two are measured side by side.
* ``statusline`` (ours): ``agent-bridge-statusline`` from spawn to exit, on a store with every
  declared agent (17) in config.json: what Claude Code waits for at each status refresh.
* ``doctor_json`` (ours): ``agent-bridge doctor --json`` from spawn to exit on the same store.
* ``top_once`` (ours): ``agent-bridge top --once`` (one frame of the live view, needs the
  ``top`` extra) from spawn to exit on the same store: the time before ``top`` shows anything.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import anyio

from .measure import _round, bare_import_seconds, cold_start_seconds
from .stats import summarize
from .targets import RECIPIENTS, REPO, Store, Target


def _timed_process(argv: list[str], env: dict[str, str]) -> tuple[float, int]:
    t0 = time.perf_counter()
    proc = subprocess.run(
        argv, env=env, cwd=str(REPO), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120
    )
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
    return {
        **summarize(samples),
        "command": " ".join(Path(argv[0]).name if i == 0 else a for i, a in enumerate(argv)),
        "exit_codes": sorted(set(codes)),
        "samples": _round(samples),
    }


def cold_store(target: Target, parent: Path, reps: int, deadline: float) -> dict[str, Any]:
    """Rep by rep: the bare SDK import (exit without teardown), then the server on a new store."""
    samples, imports, errors = [], [], []
    for rep in range(reps + 1):
        if time.monotonic() > deadline:
            break
        d = parent / f"cold-store-{rep}"
        d.mkdir(parents=True)
        store = target._store_paths(d)
        if store.config is not None:
            agents = {name: {"auto": False, "launcher": "launchers/none.sh"} for name in RECIPIENTS}
            store.config.write_text(json.dumps({"agents": agents}))
        imp = bare_import_seconds(target, teardown=False)
        elapsed, ok, err = anyio.run(cold_start_seconds, target, store)
        created = store.db.exists()
        shutil.rmtree(d, ignore_errors=True)
        if rep == 0:
            continue  # the first rep warms the page cache for the interpreter and the SDK
        samples.append(elapsed)
        imports.append(imp)
        if not ok or not created:
            errors.append(err or "the store was not created")
    imp_summary = summarize(imports)
    return {
        **summarize(samples),
        "errors": len(errors),
        "error_samples": errors[:3],
        "samples": _round(samples),
        "bare_import_without_teardown": {**imp_summary, "samples": _round(imports)},
        "over_bare_import_median": (statistics.median(samples) - imp_summary["median"]) if samples else None,
    }


def measure(target: Target, store: Store, *, runs: int, max_seconds: float) -> dict[str, Any]:
    deadline = time.monotonic() + max_seconds
    env = {**os.environ, **target.env(store, "reader")}
    bindir = Path(target.python()).parent
    return {
        "statusline": _process_figure([str(bindir / "agent-bridge-statusline")], env, runs, deadline),
        "doctor_json": _process_figure(
            [str(bindir / "agent-bridge"), "doctor", "--json"], env, max(3, runs // 4), deadline
        ),
        "top_once": _process_figure(
            [str(bindir / "agent-bridge"), "top", "--once"], {**env, "COLUMNS": "160"}, max(3, runs // 4), deadline
        ),
    }
