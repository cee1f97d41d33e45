"""Settle attempts whose supervisor is gone, from /proc process evidence and the store.

A recorded pid only counts as alive when /proc shows a process with that pid that
started when the attempt recorded it, so a recycled pid cannot pin an attempt. A worker
is alive while any process of its tree is: the leader, or anything carrying the
attempt's token in its environment (a daemonised grandchild too).
"""

from dispatcher.core import clock
from dispatcher.core.processes import is_same_process
from dispatcher.dispatch.attempts import unsettled_attempts
from dispatcher.dispatch.outcome import settle
from dispatcher.dispatch.paths import AgentPaths
from dispatcher.dispatch.procs import contain, token_processes
from dispatcher.dispatch.supervisor import KILL_GRACE_SECONDS, attempt_diagnostics, recheck_contained, remove_request
from dispatcher.store import Connection

BUSY, KILL, CRASHED = "busy", "kill", "crashed"


def decide(*, supervisor_alive: bool, worker_alive: bool, now: float, deadline: float) -> str:
    """What to do with one unsettled attempt: leave it running, end its worker as timed
    out, or settle it as crashed."""
    if supervisor_alive:
        return BUSY
    if worker_alive:
        return BUSY if now < deadline else KILL  # an orphaned worker may use its whole budget
    return CRASHED


def reconcile(conn: Connection, paths: AgentPaths) -> bool:
    """Settle what can be settled; return True while an attempt is still legitimately running."""
    busy = False
    for attempt in unsettled_attempts(conn, paths.agent):
        supervisor_alive = is_same_process(attempt["supervisor_pid"], attempt["supervisor_start_time"])
        tree: list[int] = []
        leader_alive = False
        if not supervisor_alive:
            tree = token_processes(attempt["worker_token"])
            leader_alive = is_same_process(attempt["worker_pid"], attempt["worker_start_time"])
        action = decide(
            supervisor_alive=supervisor_alive,
            worker_alive=leader_alive or bool(tree),
            now=clock.now(),
            deadline=attempt["deadline"],
        )
        if action == BUSY:
            busy = True
            continue
        if action == KILL:
            # The leader carries the token too; a recorded pid alone could be recycled by now.
            contain(attempt["worker_token"], KILL_GRACE_SECONDS, below_us=False)
            fallback, error_kind = "timeout", "timeout"
        else:
            fallback = "crashed"
            error_kind = "worker_gone" if attempt["worker_pid"] else "supervisor_gone"
        # The same diagnostics as a normal finish (the CLI's result file is still there): the
        # ledger keeps the attempt's cost, and a conversation's cost cap still fires.
        diagnostics = attempt_diagnostics(paths.attempt_dir(attempt["message_id"]), None)
        settle(conn, attempt["message_id"], fallback=fallback, error_kind=error_kind, diagnostics=diagnostics)
        recheck_contained(attempt["message_id"], attempt["worker_token"], below_us=False)
        remove_request(paths, attempt["message_id"])  # a supervisor killed mid-way could not
    return busy
