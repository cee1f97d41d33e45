"""One attempt at one message: barrier, request file, worker in its own process group,
timeout, and a verdict from the store's evidence."""

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..config import BridgeConfig
from ..logs import get_logger
from ..rows import fetch_message
from ..settings import PROJECT_DIR, BridgeSettings
from ..store import open_store
from . import queue
from .attempts import AlreadyAttempted, clean_diagnostics, mark_spawned, record_attempt
from .outcome import conclude
from .paths import AgentPaths, ensure_private_dir
from .procs import group_alive, kill_group, start_time
from .prompts import worker_prompt

KILL_GRACE_SECONDS = 5.0
REQUEST_NAME = "request.md"
log = get_logger("agent_bridge.dispatch")


class DispatchRefused(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


@dataclass
class Launch:
    proc: subprocess.Popen
    diagnostics: Path


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)


def _launch(settings: BridgeSettings, config: BridgeConfig, paths: AgentPaths, message, prompt: str) -> Launch:
    agent, message_id = message["recipient"], message["id"]
    attempt_dir = ensure_private_dir(paths.attempt_dir(message_id))
    request = attempt_dir / REQUEST_NAME
    diagnostics = attempt_dir / "diagnostics.json"
    _write_private(request, prompt)
    _write_private(diagnostics, "")  # exists as 0600 before the launcher writes into it
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
    log_fd = os.open(attempt_dir / "worker.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
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
    message = fetch_message(conn, message_id)
    if message is None:
        raise DispatchRefused("message_not_found", f"there is no message #{message_id}.")
    agent = message["recipient"]
    if agent not in config.agents:
        raise DispatchRefused("unknown_agent", f"message #{message_id} is for {agent}, which config.json does not declare.")
    if not queue.is_candidate(conn, agent, message_id, now):
        raise DispatchRefused(
            "not_dispatchable",
            f"message #{message_id} is not dispatchable: it must be an unacknowledged, unclaimed task (or a review "
            "result in an active conversation) that was never attempted. See `agent-bridge listener pending`.",
        )
    if not manual and message["created_at"] < now - config.dispatch_max_age_seconds:
        raise DispatchRefused("stale", f"message #{message_id} is older than dispatch_max_age_seconds.")
    timeout = config.agents[agent].worker_timeout_seconds
    try:
        record_attempt(
            conn, message_id=message_id, agent=agent, supervisor_pid=os.getpid(),
            supervisor_start=start_time(os.getpid()), deadline=now + timeout, now=now,
        )
    except AlreadyAttempted:
        raise DispatchRefused("already_attempted", f"message #{message_id} was already attempted; attempts are never repeated.") from None
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
        return conclude(conn, message_id, fallback="failed", error_kind=f"spawn:{type(exc).__name__}")
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
    return conclude(
        conn, message_id, fallback="timeout" if timed_out else "failed",
        error_kind="timeout" if timed_out else None,
        exit_code=launch.proc.returncode, diagnostics=_read_diagnostics(launch.diagnostics),
    )
