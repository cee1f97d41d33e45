"""Helpers for dispatcher tests: fake launchers, config rewrites, listener processes, polling."""

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from harness import PROJECT

FAKE_WORKER = Path(__file__).parent / "workers" / "fake_worker.py"
DEADLINE = 120.0


def make_launcher(directory: Path, mode: str, executable: bool = True, **env: str) -> Path:
    path = directory / f"launch_{mode}.sh"
    exports = "".join(f"{k}={v} " for k, v in {"FAKE_WORKER_MODE": mode, **env}.items())
    path.write_text(f'#!/bin/sh\n{exports}exec "$AGENT_BRIDGE_PYTHON" {FAKE_WORKER} "$@"\n')
    path.chmod(0o755 if executable else 0o644)
    return path


def write_config_atomic(path: Path, launcher: Path | str, *, auto: bool = True, timeout: int = 60,
                        max_age: int = 86400) -> None:
    doc = {
        "agents": {
            "claude": {"auto": auto, "launcher": str(launcher), "worker_timeout_seconds": timeout},
            "kimi": {"auto": False, "launcher": "launchers/kimi_headless.sh"},
        },
        "dispatch_max_age_seconds": max_age,
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)


def cli(env: dict, *args: str, timeout: float = DEADLINE) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dispatcher", *args], cwd=PROJECT, env={**os.environ, **env},
        capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
    )


def start_listener(env: dict, agent: str = "claude") -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "dispatcher", "listener", "run", "--agent", agent], cwd=PROJECT,
        env={**os.environ, **env}, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def wait_until(predicate, deadline: float = DEADLINE, interval: float = 0.05, what: str = "condition"):
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {deadline}s waiting for {what}")


def attempt(db: Path, message_id: int) -> dict | None:
    conn = sqlite3.connect(db, timeout=30)
    conn.row_factory = sqlite3.Row
    try:
        row = conn.execute("SELECT * FROM dispatch_attempts WHERE message_id = ?", (message_id,)).fetchone()
        return dict(row) if row else None
    finally:
        conn.close()


def wait_finished(db: Path, message_id: int, deadline: float = DEADLINE) -> dict:
    return wait_until(
        lambda: (a := attempt(db, message_id)) and a["state"] == "finished" and a,
        deadline, what=f"attempt on message #{message_id} to finish",
    )


def status(env: dict, agent: str = "claude") -> dict:
    done = cli(env, "listener", "status", "--agent", agent)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)
