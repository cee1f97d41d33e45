"""The part of an attempt after its barrier: the request file, a gated worker in its own process
group, claim renewal, timeout, containment, and a verdict from the store's evidence.

The worker's identity is durable before it can act: it starts behind a gate (a shell
waiting for one line on its stdin), its pid and start time are committed, and only then
is the gate opened. If recording fails or the supervisor dies first, the pipe closes and
the gate exits without ever running the launcher.

``supervisor`` imports this module once the attempt is recorded: the verdict's modules and
subprocess load after the barrier, not between the listener's fork and it.
"""

import contextlib
import errno
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Union

from dispatcher.bridge.worker_scope import attempt_claim_owner
from dispatcher.core import clock, traces
from dispatcher.core.config_view import ConfigView
from dispatcher.core.errors import BridgeError
from dispatcher.core.grants import widened
from dispatcher.core.launchers import CLI_VARIABLE, cli_word
from dispatcher.core.locations import PROJECT_DIR
from dispatcher.core.logs import get_logger
from dispatcher.core.private_files import (
    create_private_file,
    ensure_private_dir,
    open_private_append,
    writable_by_others,
)
from dispatcher.core.processes import start_time
from dispatcher.core.profile_rules import PERMISSIONS_ENV, ProfileRules
from dispatcher.core.protected import CODE as UNSAFE
from dispatcher.core.protected import PROTECTED_ENV, git_environment, protected_paths
from dispatcher.core.settings_view import ListenerSettings
from dispatcher.core.spend import TaskCaps, cap_passed, cap_to_stop_for, priced
from dispatcher.core.trace_rules import worker_environment
from dispatcher.dispatch import cgroups, faults
from dispatcher.dispatch.attempts import mark_spawned
from dispatcher.dispatch.cli_results import cli_diagnostics
from dispatcher.dispatch.faults import fault_point
from dispatcher.dispatch.leftovers import (
    DIAGNOSTICS_NAME,
    KILL_GRACE_SECONDS,
    REQUEST_NAME,
    recheck_contained,
    remove_request,
)
from dispatcher.dispatch.outcome import attempt_diagnostics, settle
from dispatcher.dispatch.paths import AgentPaths
from dispatcher.dispatch.procs import TOKEN_ENV, WorkerTree, contain, signal_group
from dispatcher.dispatch.prompts import worker_prompt
from dispatcher.dispatch.renewal import (
    LEASE_AHEAD_SECONDS,
    RENEW_EVERY_SECONDS,
    renew_attempt_lease,
    renew_worker_claim,
)
from dispatcher.store import STORE_ERRORS
from dispatcher.store.grants import grants_of
from dispatcher.store.store_clock import store_now

if TYPE_CHECKING:  # only ``agent-bridge dispatch`` passes one: a supervisor never loads pydantic
    import threading

    from dispatcher.core.config import BridgeConfig

# What a supervisor launches its worker from: the listener's view, or the whole config.
WorkerConfig = Union["BridgeConfig", ConfigView]

# $0 is the launcher, $1 the request file. EOF instead of a line: exit, launching nothing.
GATE_SCRIPT = 'IFS= read -r go || exit 111; exec "$0" "$@" </dev/null'
log = get_logger("agent_bridge.dispatch")


@dataclass
class Launch:
    proc: subprocess.Popen
    diagnostics: Path
    gate: int  # write end of the pipe the gate waits on
    cgroup: cgroups.WorkerCgroup | None  # the worker's own cgroup, where the machine delegates one

    def open_gate(self) -> None:
        with contextlib.suppress(BrokenPipeError):  # the gate is gone already; the wait will show it
            os.write(self.gate, b"go\n")
        self.close_gate()

    def close_gate(self) -> None:
        if self.gate >= 0:
            os.close(self.gate)
            self.gate = -1


class UnsafeWorkspace(Exception):
    """The supervisor's pre-launch check: the workspace holds or lies in the bridge's own files."""


def end_worker(proc: subprocess.Popen, grace_seconds: float) -> None:
    """TERM the worker's group, KILL it after ``grace_seconds``; Popen reaps the leader, so its
    ``returncode`` is the real status (-15, -9)."""
    signal_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace_seconds)
    except subprocess.TimeoutExpired:
        signal_group(proc.pid, signal.SIGKILL)
        proc.wait()


def _check_launcher(path: Path) -> None:
    # The gate would only report these as exit 126/127; say what is wrong instead.
    if not path.is_file():
        raise FileNotFoundError(errno.ENOENT, "launcher not found", str(path))
    if not os.access(path, os.X_OK):
        raise PermissionError(errno.EACCES, "launcher is not executable", str(path))
    if (why := writable_by_others(path)) is not None:
        raise PermissionError(
            errno.EACCES, f"launcher could be changed by someone else ({why}); chown it and chmod go-w", str(path)
        )


MAX_COST_ENV = "AGENT_BRIDGE_MAX_COST_USD"


def usd_text(value: float) -> str:
    """A plain decimal (never an exponent) that a CLI flag parses: 0.5, 2, 0.0001."""
    return f"{value:.6f}".rstrip("0").rstrip(".") or "0"


def worker_env(
    settings: ListenerSettings,
    agent: str,
    message_id: int,
    attempt_dir: Path,
    diagnostics: Path,
    token: str,
    max_cost_usd: float | None = None,
    workspace: Path | None = None,
    *,
    permissions: ProfileRules,
    protected: tuple[str, ...] = (),
    git_common_dir: Path | None = None,
    cli: str | None = None,
) -> dict[str, str]:
    """The launcher's environment: resolved values, so the worker's own server agrees with ours.

    ``AGENT_BRIDGE_MAX_COST_USD`` is the agent's ``max_cost_usd_per_task``, and absent when it
    has none (an inherited value is dropped, never passed on). ``AGENT_BRIDGE_PERMISSIONS`` is
    always the agent's profile from config.json, never an inherited value, and so is
    ``AGENT_BRIDGE_PROTECTED`` (what its hooks refuse to write: ``core.protected``), and
    ``AGENT_BRIDGE_CLI`` (the CLI the generic launcher runs: ``cli``, the agent's ``cli_word``;
    absent when its config names none). Every git the worker runs gets the bridge's git
    configuration (``git_environment``). ``TRACEPARENT`` is the attempt's span when the supervisor
    traces, never an inherited value, and no OTLP headers variable is passed on
    (``trace_rules.worker_environment``)."""
    own = (MAX_COST_ENV, PERMISSIONS_ENV, PROTECTED_ENV, CLI_VARIABLE)
    inherited = worker_environment(
        {k: v for k, v in os.environ.items() if k not in own},
        traces.current_context_variables(),
    )
    return {
        **({CLI_VARIABLE: cli} if cli is not None else {}),
        **inherited,
        **git_environment(),
        PROTECTED_ENV: json.dumps(list(protected)),
        **({MAX_COST_ENV: usd_text(max_cost_usd)} if max_cost_usd is not None else {}),
        PERMISSIONS_ENV: permissions.to_env(),
        "AGENT_ID": agent,
        "AGENT_BRIDGE_ROLE": "worker",
        "AGENT_BRIDGE_MESSAGE_ID": str(message_id),
        "AGENT_BRIDGE_DB": str(settings.db),  # already the real path (or a URL)
        "AGENT_BRIDGE_CONFIG": str(settings.config_path().resolve()),
        "AGENT_BRIDGE_RUNTIME_DIR": str(settings.private_dir().resolve()),
        "AGENT_BRIDGE_MAX_BODY_BYTES": str(settings.max_body_bytes),
        "AGENT_BRIDGE_LOG_LEVEL": settings.log_level,
        "AGENT_BRIDGE_PROJECT": str(PROJECT_DIR),
        "AGENT_BRIDGE_PYTHON": sys.executable,
        "AGENT_BRIDGE_ATTEMPT_DIR": str(attempt_dir),
        "AGENT_BRIDGE_DIAGNOSTICS_FILE": str(diagnostics),
        "AGENT_BRIDGE_WORKSPACE": str(workspace or settings.workspace),
        # In a worktree: the user's repository's git directory, which the permission plan keeps read-only.
        **({"AGENT_BRIDGE_GIT_COMMON_DIR": str(git_common_dir)} if git_common_dir is not None else {}),
        TOKEN_ENV: token,  # marks every process of this worker's tree
    }


def _launch(
    settings: ListenerSettings,
    config: WorkerConfig,
    paths: AgentPaths,
    message,
    prompt: str,
    token: str,
    workspace: Path,
    git_common_dir: Path | None,
    profile: ProfileRules,
) -> Launch:
    agent, message_id = message["recipient"], message["id"]
    attempt_dir = ensure_private_dir(paths.attempt_dir(message_id))
    request = attempt_dir / REQUEST_NAME
    diagnostics = attempt_dir / DIAGNOSTICS_NAME
    create_private_file(request, prompt)
    create_private_file(diagnostics, "")  # exists as 0600 before the launcher writes into it
    if not workspace.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "workspace is not a directory", str(workspace))
    if (why := config.unsafe_workspace(agent, settings.workspace, settings)) is not None:
        raise UnsafeWorkspace(why)
    launcher = config.launcher_path(agent, PROJECT_DIR)
    _check_launcher(launcher)
    writable: list[str | Path] = [workspace, *profile.resolved_extra_dirs()]
    env = worker_env(
        settings,
        agent,
        message_id,
        attempt_dir,
        diagnostics,
        token,
        config.agents[agent].max_cost_usd_per_task,
        workspace,
        permissions=profile,
        protected=protected_paths(config.bridge_places(settings), writable),
        git_common_dir=git_common_dir,
        cli=cli_word(config.agents[agent].cli),
    )
    log_fd = open_private_append(attempt_dir / "worker.log")
    gate_in, gate_out = os.pipe()
    try:
        proc = subprocess.Popen(  # noqa: S603 - the launcher config.json names, via a fixed gate script; paths are argv, never shell text
            ["/bin/sh", "-c", GATE_SCRIPT, str(launcher), str(request)],
            cwd=workspace,
            env=env,
            stdin=gate_in,
            stdout=log_fd,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # own session and process group: a timeout kills exactly this
        )
    except BaseException:
        os.close(gate_out)
        raise
    finally:
        os.close(log_fd)
        os.close(gate_in)
    return Launch(proc, diagnostics, gate_out, _own_cgroup(proc.pid, token, message_id))


def _own_cgroup(pid: int, token: str, message_id: int) -> cgroups.WorkerCgroup | None:
    """The gated worker moved into a cgroup of its own, before the gate opens: it has started
    nothing yet, so everything it ever starts is born inside. None where there is none."""
    cgroup, why = cgroups.make(token)
    if cgroup is not None and not cgroup.adopt(pid):
        cgroup, why = None, "cannot move the worker into its cgroup"
    if cgroup is None:
        log.debug("worker_without_cgroup", message_id=message_id, reason=why)
    return cgroup


USAGE_POLL_SECONDS = 1.0  # how often a capped worker's usage reports are read while it runs


def usage_watch(attempt_dir: Path, agent: TaskCaps) -> Callable[[], str | None] | None:
    """For an agent with a per-task cap: a check of the usage its CLI reported so far (its output
    file, or Kimi's wire, read as they grow), naming the cap it passed. None for no cap."""
    if agent.max_tokens_per_task is None and agent.max_cost_usd_per_task is None:
        return None
    return lambda: cap_to_stop_for(cli_diagnostics(attempt_dir, None) or {}, agent)


def ended_over_cap(diagnostics: dict | None, agent: TaskCaps, stopped_for: str | None) -> str | None:
    """The per-task cap a finished worker went past: the one it was ended for, else one its final
    report shows (a runaway can end by itself between two looks at its usage)."""
    return stopped_for or (cap_passed(diagnostics, agent) if diagnostics else None)


def with_spend(diagnostics: dict | None, agent: TaskCaps, stopped_for: str | None) -> dict | None:
    """The diagnostics with the cost the agent's prices estimate where the CLI reported none
    (``cost_source: estimated``), and ``cli_status: budget_exceeded`` when the worker passed a
    per-task cap: ended for it (``stopped_for``), or seen only in its final report."""
    if diagnostics is None:
        return None
    cost, source = priced(diagnostics, agent.prices)
    spent = {**diagnostics, **({"cost_usd": cost, "cost_source": source} if source == "estimated" else {})}
    if stopped_for is not None or cap_passed(spent, agent) is not None:
        spent["cli_status"] = "budget_exceeded"
    return spent


def _settle(conn, message_id: int, began: float, **verdict) -> str:
    """``began``: the attempt's start on the monotonic clock, for a duration no clock step bends."""
    outcome = settle(
        conn,
        message_id,
        duration_seconds=clock.monotonic() - began,
        before_commit=lambda: fault_point("before_verdict_commit"),
        **verdict,
    )
    fault_point("after_verdict_commit")
    return outcome


def _start_beside(work: Callable[[], None] | None) -> "threading.Thread | None":
    """Run ``work`` in a thread of its own (it must never raise: it logs what goes wrong)."""
    if work is None:
        return None
    import threading

    thread = threading.Thread(target=work, name="beside-worker", daemon=True)
    thread.start()
    return thread


def run_worker(
    conn,
    settings,
    config: WorkerConfig,
    paths,
    message,
    token: str,
    timeout: int,
    deadline: float,
    subreaper: bool,
    *,
    workspace: Path,
    git_common_dir: Path | None = None,
    after_worker: Callable[[], None] = lambda: None,
    beside_worker: Callable[[], None] | None = None,
) -> str:
    """``deadline``: on the monotonic clock. ``workspace``: where the worker runs (the agent's, or
    its attempt's worktree); ``after_worker`` runs once the worker's tree is gone, before the verdict;
    ``beside_worker`` runs in a thread once the worker has started (the worktree pool's refill),
    and is waited for before the worker's tree is ended (which ends every process below us)."""

    message_id, began = message["id"], deadline - timeout
    try:
        # The agent's profile, widened for this task alone by a person's grant (``retry --allow``).
        profile = widened(config.permissions(message["recipient"]), grants_of(conn, message_id))
        prompt = worker_prompt(conn, message, profile, workspace)
        launch = _launch(settings, config, paths, message, prompt, token, workspace, git_common_dir, profile)
    except OSError as exc:
        # The path (launcher or workspace) is configuration, not payload: the log names it.
        log.warning(
            "spawn_failed", message_id=message_id, error=type(exc).__name__, path=exc.filename, reason=exc.strerror
        )
        return _settle(conn, message_id, began, fallback="failed", error_kind=f"spawn:{type(exc).__name__}")
    except UnsafeWorkspace as exc:
        log.warning("workspace_unsafe", message_id=message_id, reason=str(exc))
        return _settle(conn, message_id, began, fallback="failed", error_kind=UNSAFE)
    fault_point("after_spawn")
    pid = launch.proc.pid
    tree = WorkerTree(token, launch.cgroup, below_us=subreaper)
    try:
        fault_point("record_pid")
        if not mark_spawned(conn, message_id, pid, start_time(pid)):
            raise BridgeError("attempt_settled", f"the attempt at message #{message_id} was settled meanwhile.")
    except STORE_ERRORS + (BridgeError,) as exc:
        # Nothing may run that the store does not know of: the gate exits, launching nothing.
        log.warning("spawn_unrecorded", message_id=message_id, error=type(exc).__name__)
        launch.close_gate()
        end_worker(launch.proc, KILL_GRACE_SECONDS)
        contain(tree, 0)  # the gate's cgroup goes too
        return _settle(
            conn, message_id, began, fallback="failed", error_kind="spawn_unrecorded", exit_code=launch.proc.returncode
        )
    fault_point("after_pid_recorded")
    launch.open_gate()
    log.info("worker_started", message_id=message_id, worker_pid=pid, cgroup=launch.cgroup is not None)
    beside = _start_beside(beside_worker)

    owner = attempt_claim_owner(message["recipient"], message_id)
    agent = config.agents[message["recipient"]]
    watch = usage_watch(launch.diagnostics.parent, agent)
    stopped = _wait_renewing_claim(conn, launch.proc, message_id, owner, deadline, watch)
    timed_out = stopped == "timeout"
    if timed_out:
        log.warning("worker_timeout", message_id=message_id, worker_pid=pid, timeout_seconds=timeout)
        end_worker(launch.proc, KILL_GRACE_SECONDS)
    elif stopped is not None:
        log.warning("worker_over_budget", message_id=message_id, worker_pid=pid, cap=stopped)
        end_worker(launch.proc, KILL_GRACE_SECONDS)
    if beside is not None:
        beside.join()  # (its git must not be taken for something the worker left behind)
    # Whatever the worker left behind (in its group or daemonised, adopted by us) ends with it.
    ended, left = contain(tree, KILL_GRACE_SECONDS)
    if ended:
        log.warning("worker_leftovers_killed", message_id=message_id, count=ended, outlived_kill=left)
    # Before the verdict: whoever sees the outcome sees the task text gone from outside the store.
    remove_request(paths, message_id)
    after_worker()
    exit_code = launch.proc.returncode
    diagnostics = attempt_diagnostics(launch.diagnostics.parent, exit_code)
    over_cap = None if timed_out else ended_over_cap(diagnostics, agent, stopped)
    diagnostics = with_spend(diagnostics, agent, over_cap)
    outcome = _settle(
        conn,
        message_id,
        began,
        fallback="timeout" if timed_out else "failed",
        error_kind="timeout" if timed_out else over_cap,
        exit_code=exit_code,
        diagnostics=diagnostics,
    )
    recheck_contained(message_id, tree)
    return outcome


def _wait_renewing_claim(
    conn,
    proc: subprocess.Popen,
    message_id: int,
    owner: str,
    deadline: float,
    watch: Callable[[], str | None] | None = None,
) -> str | None:
    """Wait for the worker until ``deadline`` (monotonic), renewing its claim, and checking ``watch`` (the
    usage caps) every ``USAGE_POLL_SECONDS``. Returns ``timeout``, the cap ``watch`` named, or
    None when the worker exited by itself."""
    interval = faults.renew_interval(RENEW_EVERY_SECONDS)
    step = min(interval, USAGE_POLL_SECONDS) if watch is not None else interval
    renewed = clock.monotonic()
    while proc.poll() is None:
        remaining = deadline - clock.monotonic()
        if remaining <= 0:
            return "timeout"
        try:
            proc.wait(timeout=min(step, remaining))
        except subprocess.TimeoutExpired:
            if watch is not None and (cap := watch()) is not None:
                return cap
            if clock.monotonic() - renewed >= interval:
                _renew(conn, message_id, owner, deadline)
                renewed = clock.monotonic()
    return None


def _renew(conn, message_id: int, owner: str, deadline: float) -> None:
    """``deadline`` is monotonic; the leases are stored in wall time, so the claim's is set from
    what is left. The attempt's lease is renewed for as long as the supervisor runs."""
    left = deadline - clock.monotonic()
    try:
        now = store_now(conn)
        renew_attempt_lease(conn, message_id, now)
        if left > 0:
            renew_worker_claim(
                conn,
                message_id,
                owner=owner,
                until=now + min(LEASE_AHEAD_SECONDS, left + KILL_GRACE_SECONDS),
                now=now,
            )
    except STORE_ERRORS as exc:  # a busy or full store: the next round tries again
        log.warning("claim_renewal_failed", message_id=message_id, error=type(exc).__name__)
