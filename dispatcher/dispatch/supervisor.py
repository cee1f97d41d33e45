"""One attempt at one message: the barrier, then the worker (``worker_run``).

Forked from the listener, a supervisor records its attempt (the barrier) and launches its worker
from the view of config.json the listener decided with (``ConfigView``: each agent's permission
profile, prices and caps, as ``BridgeConfig`` validated them): it never loads pydantic (README,
"The listener's footprint"). ``agent-bridge dispatch`` hands it a ``BridgeConfig``. What runs the
worker and judges it (the verdict's modules, subprocess) loads after the barrier, so that the
attempt is recorded as soon as the supervisor runs.
"""

import os
from pathlib import Path
from typing import TYPE_CHECKING

from dispatcher.core import clock, traces
from dispatcher.core.logs import get_logger
from dispatcher.core.processes import start_time
from dispatcher.core.settings_view import ListenerSettings
from dispatcher.dispatch.attempts import begin_attempt, get_attempt
from dispatcher.dispatch.faults import fault_point
from dispatcher.dispatch.leftovers import remove_request
from dispatcher.dispatch.paths import AgentPaths
from dispatcher.dispatch.procs import become_subreaper
from dispatcher.store import open_store
from dispatcher.store.store_clock import store_now

if TYPE_CHECKING:
    from collections.abc import Callable

    from dispatcher.dispatch.worker_run import WorkerConfig

log = get_logger("agent_bridge.dispatch")


def supervise(settings: ListenerSettings, config: "WorkerConfig", message_id: int, *, manual: bool = False) -> str:
    """Run one attempt and return its outcome. Raises DispatchRefused before any launch.

    Call it in a process of its own (the listener's forked supervisor, or the CLI): it
    becomes a subreaper and ends every descendant once the worker is done.
    """
    subreaper = become_subreaper()
    conn = open_store(settings.db)
    try:
        return _supervise(conn, settings, config, message_id, manual, subreaper)
    finally:
        conn.close()
        traces.flush()  # a forked supervisor ends with os._exit: its spans leave now, or never


def _supervise(
    conn,
    settings: ListenerSettings,
    config: "WorkerConfig",
    message_id: int,
    manual: bool,
    subreaper: bool,
) -> str:
    now, began = store_now(conn), clock.monotonic()
    token = os.urandom(16).hex()  # secrets.token_hex(16), without loading OpenSSL (secrets' hmac) before the barrier
    message = begin_attempt(
        conn,
        message_id=message_id,
        config=config,
        now=now,
        manual=manual,
        supervisor_pid=os.getpid(),
        supervisor_start=start_time(os.getpid()),
        worker_token=token,
    )
    fault_point("after_barrier")
    agent = message["recipient"]
    log.info("attempt_recorded", message_id=message_id, agent=agent, sender=message["sender"], manual=manual)
    # The attempt's span continues the sender's trace (the message's traceparent, docs/traces.md).
    with traces.span("process", agent, message_id, parent=message["traceparent"], manual=manual) as span:
        outcome = _attempt(conn, settings, config, message, token, began, subreaper)
        traces.annotate(span, outcome=outcome)
    return outcome


def _attempt(
    conn, settings: ListenerSettings, config: "WorkerConfig", message, token: str, began: float, subreaper: bool
) -> str:
    """The recorded attempt: its workspace, its worker and its verdict; returns the outcome."""
    message_id, agent = message["id"], message["recipient"]
    timeout = config.agents[agent].worker_timeout_seconds
    paths = AgentPaths.of(settings, agent).ensure()
    from dispatcher.dispatch import isolation  # after the barrier (module docstring), as git is
    from dispatcher.dispatch.worker_run import run_worker

    try:
        workspace, git_common_dir, checkout = _workspace(conn, settings, config, paths, message)
    except isolation.IsolationRefused as exc:
        from dispatcher.dispatch.outcome import settle

        log.warning("isolation_refused", message_id=message_id, agent=agent, kind=exc.code)
        return settle(conn, message_id, fallback="failed", error_kind=exc.code)
    fault_point("after_worktree")
    outcome = "crashed"
    try:
        # The budget runs on the monotonic clock: no step of the wall clock stretches or cuts it.
        outcome = run_worker(
            conn,
            settings,
            config,
            paths,
            message,
            token,
            timeout,
            deadline=began + timeout,
            subreaper=subreaper,
            workspace=workspace,
            git_common_dir=git_common_dir,
            after_worker=lambda: isolation.close_worktree(conn, message_id),
            beside_worker=_pool_filler(paths, checkout, config.worktree_pool_size),
        )
    finally:
        remove_request(paths, message_id)
        isolation.settle_worktree(conn, message_id, outcome)
    fault_point("after_request_removed")
    return outcome


def _workspace(
    conn, settings: ListenerSettings, config: "WorkerConfig", paths: AgentPaths, message
) -> tuple[Path, Path | None, Path | None]:
    """Where the worker runs: its attempt's worktree (with the repository's git directory and the
    workspace it started from), or the agent's workspace (docs/worktrees.md)."""
    from dispatcher.dispatch.isolation import open_worktree

    agent = message["recipient"]
    workspace = config.workspace(agent, settings.workspace)
    worktree = open_worktree(
        conn,
        paths,
        message,
        workspace,
        config.agents[agent].isolation,
        config.permissions(agent).writes,
        pool_size=config.worktree_pool_size,
    )
    if worktree is None:
        return workspace, None, None
    row = get_attempt(conn, message["id"])
    # The pool is filled from the workspace config.json names, never from a path read back from
    # the store (on PostgreSQL an agent's role may write the attempt's worktree columns).
    return worktree, Path(row["worktree_common_dir"]) if row is not None else None, workspace


def _pool_filler(paths: AgentPaths, checkout: Path | None, size: int) -> "Callable[[], None] | None":
    """What refills the repository's pool of ready worktrees beside the worker, once it has
    started (off the path from send to worker start): None without a worktree or a pool."""
    if checkout is None or size <= 0:
        return None

    def fill() -> None:
        from dispatcher.dispatch.worktree_pool import fill

        fill(paths.root, checkout, size)

    return fill
