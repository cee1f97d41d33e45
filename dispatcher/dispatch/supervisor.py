"""One attempt at one message: barrier, request file, worker in its own process group,
timeout, and a verdict from the store's evidence."""

import json
import os
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..config import BridgeConfig
from ..logs import get_logger
from ..private_files import create_private_file, ensure_private_dir, open_private_append
from ..settings import PROJECT_DIR, BridgeSettings
from ..store import open_store
from .attempts import begin_attempt, clean_diagnostics, mark_spawned
from .outcome import settle
from .paths import AgentPaths
from .procs import group_alive, kill_group, start_time
from .prompts import worker_prompt

KILL_GRACE_SECONDS = 5.0
REQUEST_NAME = "request.md"
log = get_logger("agent_bridge.dispatch")


@dataclass
class Launch:
    proc: subprocess.Popen
    diagnostics: Path


def _launch(settings: BridgeSettings, config: BridgeConfig, paths: AgentPaths, message, prompt: str) -> Launch:
    agent, message_id = message["recipient"], message["id"]
    attempt_dir = ensure_private_dir(paths.attempt_dir(message_id))
    request = attempt_dir / REQUEST_NAME
    diagnostics = attempt_dir / "diagnostics.json"
    create_private_file(request, prompt)
    create_private_file(diagnostics, "")  # exists as 0600 before the launcher writes into it
    workspace = settings.workspace
    if not workspace.is_dir():
        raise NotADirectoryError(workspace)
    env = {
        **os.environ,
        "AGENT_ID": agent,
        "AGENT_BRIDGE_MESSAGE_ID": str(message_id),
        "AGENT_BRIDGE_DB": str(settings.db.resolve()),
        "AGENT_BRIDGE_CONFIG": str(settings.config_path().resolve()),
        "AGENT_BRIDGE_PROJECT": str(PROJECT_DIR),
        "AGENT_BRIDGE_PYTHON": sys.executable,
        "AGENT_BRIDGE_ATTEMPT_DIR": str(attempt_dir),
        "AGENT_BRIDGE_DIAGNOSTICS_FILE": str(diagnostics),
        "AGENT_BRIDGE_WORKSPACE": str(workspace),
    }
    log_fd = open_private_append(attempt_dir / "worker.log")
    try:
        proc = subprocess.Popen(
            [str(config.launcher_path(agent, PROJECT_DIR)), str(request)],
            cwd=workspace, env=env, stdin=subprocess.DEVNULL, stdout=log_fd, stderr=subprocess.STDOUT,
            start_new_session=True,  # own session and process group: a timeout kills exactly this
        )
    finally:
        os.close(log_fd)
    return Launch(proc, diagnostics)


def _read_diagnostics(path: Path) -> dict | None:
    try:
        return clean_diagnostics(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None


def supervise(settings: BridgeSettings, config: BridgeConfig, message_id: int, *, manual: bool = False) -> str:
    """Run one attempt and return its outcome. Raises DispatchRefused before any launch."""
    conn = open_store(settings.db)
    try:
        return _supervise(conn, settings, config, message_id, manual)
    finally:
        conn.close()


def _supervise(conn, settings: BridgeSettings, config: BridgeConfig, message_id: int, manual: bool) -> str:
    now = time.time()
    message = begin_attempt(
        conn, message_id=message_id, config=config, now=now, manual=manual, supervisor_pid=os.getpid(),
        supervisor_start=start_time(os.getpid()), worker_token=secrets.token_hex(16),
    )
    agent = message["recipient"]
    timeout = config.agents[agent].worker_timeout_seconds
    log.info("attempt_recorded", message_id=message_id, agent=agent, sender=message["sender"], manual=manual)

    paths = AgentPaths.of(settings, agent).ensure()
    try:
        return _run_worker(conn, settings, config, paths, message, timeout, deadline=now + timeout)
    finally:
        # The request file is the only copy of the task text outside the store.
        (paths.attempt_dir(message_id) / REQUEST_NAME).unlink(missing_ok=True)


def _run_worker(conn, settings, config, paths, message, timeout: int, deadline: float) -> str:
    message_id = message["id"]
    try:
        launch = _launch(settings, config, paths, message, worker_prompt(conn, message))
    except OSError as exc:
        log.warning("spawn_failed", message_id=message_id, error=type(exc).__name__)
        return settle(conn, message_id, fallback="failed", error_kind=f"spawn:{type(exc).__name__}")
    pid = launch.proc.pid
    mark_spawned(conn, message_id, pid, start_time(pid))
    log.info("worker_started", message_id=message_id, worker_pid=pid)

    timed_out = False
    try:
        launch.proc.wait(timeout=max(0.0, deadline - time.time()))
    except subprocess.TimeoutExpired:
        timed_out = True
        log.warning("worker_timeout", message_id=message_id, worker_pid=pid, timeout_seconds=timeout)
        kill_group(pid, KILL_GRACE_SECONDS)
        launch.proc.wait()
    if group_alive(pid):  # the leader is gone but something it started is still in the group
        kill_group(pid, KILL_GRACE_SECONDS)
    return settle(
        conn, message_id, fallback="timeout" if timed_out else "failed",
        error_kind="timeout" if timed_out else None,
        exit_code=launch.proc.returncode, diagnostics=_read_diagnostics(launch.diagnostics),
    )
