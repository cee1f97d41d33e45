"""Settle attempts whose supervisor is gone, from /proc process evidence and the store.

A recorded pid only counts as alive when /proc shows a process with that pid that
started when the attempt recorded it, so a recycled pid cannot pin an attempt. A worker
is alive while any process of its tree is: the leader, or anything carrying the
attempt's token in its environment (a daemonised grandchild too).
"""

import signal

from dispatcher.core import clock
from dispatcher.core.logs import get_logger
from dispatcher.core.processes import is_same_process
from dispatcher.dispatch import cgroups, faults
from dispatcher.dispatch.attempts import unsettled_attempts
from dispatcher.dispatch.leftovers import KILL_GRACE_SECONDS, attempt_diagnostics, recheck_contained, remove_request
from dispatcher.dispatch.outcome import settle
from dispatcher.dispatch.paths import AgentPaths
from dispatcher.dispatch.procs import WorkerTree, contain, signal_group, token_processes
from dispatcher.store import Connection

log = get_logger("agent_bridge.dispatch")
BUSY, KILL, CRASHED = "busy", "kill", "crashed"
# How long past its attempt's deadline a supervisor may take to end its worker and settle
# (the worker's TERM grace, the containment rounds, the verdict). Past it, a supervisor that
# still runs (say, SIGSTOPped by its worker) is killed with its group and the attempt settled.
SUPERVISOR_GRACE_SECONDS = 60.0


def supervisor_grace() -> float:
    return faults.supervisor_grace(SUPERVISOR_GRACE_SECONDS)


def decide(*, supervisor_alive: bool, worker_alive: bool, now: float, deadline: float, grace: float) -> str:
    """What to do with one unsettled attempt: leave it running, end it as timed out (its
    worker, and a supervisor overdue by more than ``grace``), or settle it as crashed."""
    if supervisor_alive:
        return BUSY if now < deadline + grace else KILL
    if worker_alive:
        return BUSY if now < deadline else KILL  # an orphaned worker may use its whole budget
    return CRASHED


def reconcile(conn: Connection, paths: AgentPaths) -> bool:
    """Settle what can be settled; return True while an attempt is still legitimately running."""
    busy = False
    for attempt in unsettled_attempts(conn, paths.agent):
        supervisor_alive = is_same_process(attempt["supervisor_pid"], attempt["supervisor_start_time"])
        # The cgroup its supervisor made (ours too: supervisors are forked from the listener), and
        # the whole-/proc sweep for the token: a supervisor is gone or overdue, its tree unknown.
        tree = WorkerTree(attempt["worker_token"], cgroups.find(attempt["worker_token"]))
        worker_alive = False
        if not supervisor_alive:
            worker_alive = (
                is_same_process(attempt["worker_pid"], attempt["worker_start_time"])
                or (tree.cgroup is not None and tree.cgroup.populated())
                or bool(token_processes(attempt["worker_token"]))
            )
        action = decide(
            supervisor_alive=supervisor_alive,
            worker_alive=worker_alive,
            now=clock.now(),
            deadline=attempt["deadline"],
            grace=supervisor_grace(),
        )
        if action == BUSY:
            busy = True
            continue
        if action == KILL:
            if supervisor_alive:  # overdue: stopped or stuck; its own session and group end with it
                log.warning("supervisor_overdue_killed", message_id=attempt["message_id"])
                signal_group(attempt["supervisor_pid"], signal.SIGKILL)
            # The leader carries the token too; a recorded pid alone could be recycled by now.
            contain(tree, KILL_GRACE_SECONDS)
            fallback, error_kind = "timeout", "timeout"
        else:
            fallback = "crashed"
            error_kind = "worker_gone" if attempt["worker_pid"] else "supervisor_gone"
        # The same diagnostics as a normal finish (the CLI's result file is still there): the
        # ledger keeps the attempt's cost, and a conversation's cost cap still fires.
        diagnostics = attempt_diagnostics(paths.attempt_dir(attempt["message_id"]), None)
        settle(conn, attempt["message_id"], fallback=fallback, error_kind=error_kind, diagnostics=diagnostics)
        recheck_contained(attempt["message_id"], tree)
        remove_request(paths, attempt["message_id"])  # a supervisor killed mid-way could not
    return busy
