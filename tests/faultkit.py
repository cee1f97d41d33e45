"""Helpers for the fault-injection tests (tests/faults/).

Processes a fault test starts carry a marker in their environment (FAULT_RUN=<token>),
which every process below them inherits (listener -> supervisor -> launcher -> worker),
so a test can find them after their parents died and kill whatever is left at the end.
"""

import os
import random
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import psutil
from harness import PROJECT

SCRIPTED_WORKER = PROJECT / "tests" / "workers" / "scripted_worker.py"


def fault_seed(name: str) -> int:
    """The seed for one test: FAULT_SEED if set (to replay a failure), else a fresh one. Printed."""
    raw = os.environ.get("FAULT_SEED")
    seed = int(raw) if raw else random.SystemRandom().randrange(2**32)
    print(f"\n[{name}] FAULT_SEED={seed} (set FAULT_SEED={seed} to replay this run)", flush=True)
    return seed


def new_marker() -> str:
    return uuid.uuid4().hex


def _environ(proc: psutil.Process) -> dict[str, str]:
    try:
        return proc.environ()
    except (psutil.Error, OSError):
        return {}


def marked_processes(marker: str, cmd_contains: str | None = None) -> list[psutil.Process]:
    """Live (non-zombie) processes carrying FAULT_RUN=marker, optionally filtered by command line."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        if proc.pid == os.getpid() or proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        cmdline = " ".join(proc.info["cmdline"] or ())
        if cmd_contains is not None and cmd_contains not in cmdline:
            continue
        if _environ(proc).get("FAULT_RUN") == marker:
            found.append(proc)
    return found


def kill9(pid: int) -> bool:
    try:
        os.kill(pid, signal.SIGKILL)
        return True
    except ProcessLookupError:
        return False


def kill_process(proc: psutil.Process) -> bool:
    """SIGKILL a process found earlier; psutil refuses if its pid now names another process."""
    try:
        proc.kill()
        return True
    except psutil.NoSuchProcess:
        return False


def kill_marked(marker: str) -> list[int]:
    """SIGKILL every process still carrying the marker (test teardown)."""
    return [proc.pid for proc in marked_processes(marker) if kill_process(proc)]


def scripted_launcher(directory: Path) -> Path:
    """A launcher (as config.json names it) that runs the scripted worker."""
    path = directory / "scripted_launch.sh"
    path.write_text(f'#!/bin/sh\nexec "$AGENT_BRIDGE_PYTHON" {SCRIPTED_WORKER} "$@"\n')
    path.chmod(0o755)
    return path


def start_listener(env: dict[str, str], agent: str, log: Path) -> subprocess.Popen:
    """``python -m dispatcher listener run --agent AGENT`` in its own session."""
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "dispatcher", "listener", "run", "--agent", agent],
            cwd=PROJECT,
            env={**os.environ, **env},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )


def mcp_server_pid(tag: str) -> int | None:
    """The pid of the server.py child started with FAULT_TAG=tag (an McpAgent's server)."""
    for proc in psutil.Process().children(recursive=True):
        try:
            if "server.py" in " ".join(proc.cmdline()) and _environ(proc).get("FAULT_TAG") == tag:
                return proc.pid
        except psutil.Error:
            continue
    return None


def stop(proc: subprocess.Popen, timeout: float = 30) -> int | None:
    """SIGTERM, then SIGKILL after ``timeout``; returns the exit status."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)
    return proc.returncode
