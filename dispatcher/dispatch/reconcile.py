"""Settle attempts whose supervisor is gone, from /proc process evidence and the store; then sweep
the worker cgroups whose attempt no longer runs (``leftovers.sweep_worker_cgroups``).

A recorded pid only counts as alive when /proc shows a process with that pid that
started when the attempt recorded it, so a recycled pid cannot pin an attempt. A worker
is alive while any process of its tree is: the leader, or anything carrying the
attempt's token in its environment (a daemonised grandchild too).

An attempt of another host (several hosts on one PostgreSQL store) is judged by its lease
alone, which its supervisor renews while the worker runs: /proc here cannot see it. Once the
lease has run out, the host is taken as lost and the attempt settled as ``crashed``
(``host_lost``), once, by whichever listener sees it first; nothing launches it again (the
attempt's primary key is the barrier). Leases are written and judged by the store's clock
(``store_now``: the database server's on PostgreSQL), so a host's own clock does not matter.
"""

import signal

from dispatcher.core.logs import get_logger
from dispatcher.core.processes import is_same_process, this_host
from dispatcher.dispatch import cgroups, faults
from dispatcher.dispatch.attempts import unsettled_attempts
from dispatcher.dispatch.leftovers import KILL_GRACE_SECONDS, recheck_contained, remove_request, sweep_worker_cgroups
from dispatcher.dispatch.paths import AgentPaths
from dispatcher.dispatch.procs import WorkerTree, contain, signal_group, token_processes
from dispatcher.store import Connection
from dispatcher.store.store_clock import store_now

log = get_logger("agent_bridge.dispatch")
BUSY, KILL, CRASHED, HOST_LOST = "busy", "kill", "crashed", "host_lost"
# How long past its attempt's deadline a supervisor may take to end its worker and settle
# (the worker's TERM grace, the containment rounds, the verdict). Past it, a supervisor that
# still runs (say, SIGSTOPped by its worker) is killed with its group and the attempt settled.
SUPERVISOR_GRACE_SECONDS = 60.0


def supervisor_grace() -> float:
    return faults.supervisor_grace(SUPERVISOR_GRACE_SECONDS)


def decide(
    *,
    supervisor_alive: bool,
    worker_alive: bool,
    now: float,
    deadline: float,
    grace: float,
    here: bool = True,
    lease_expires_at: float | None = None,
) -> str:
    """What to do with one unsettled attempt: leave it running, end it as timed out (its
    worker, and a supervisor overdue by more than ``grace``), or settle it as crashed. One of
    another host (``here`` False) runs while its lease does, and is lost after."""
    if not here:
        return BUSY if lease_expires_at is not None and now < lease_expires_at else HOST_LOST
    if supervisor_alive:
        return BUSY if now < deadline + grace else KILL
    if worker_alive:
        return BUSY if now < deadline else KILL  # an orphaned worker may use its whole budget
    return CRASHED


def reconcile(conn: Connection, paths: AgentPaths) -> list[int]:
    """Settle what can be settled; return the message ids of the attempts still legitimately running."""
    busy: list[int] = []
    host = this_host()
    for attempt in unsettled_attempts(conn, paths.agent):
        here = attempt["host"] in (None, host)  # (no host: recorded before hosts, on this one)
        # Another host's: its lease is all there is to go by; /proc here cannot see it.
        supervisor_alive = here and is_same_process(attempt["supervisor_pid"], attempt["supervisor_start_time"])
        # The cgroup its supervisor made (ours too: supervisors are forked from the listener), and
        # the whole-/proc sweep for the token: a supervisor is gone or overdue, its tree unknown.
        tree = WorkerTree(attempt["worker_token"], cgroups.find(attempt["worker_token"]) if here else None)
        worker_alive = (
            here
            and not supervisor_alive
            and (
                is_same_process(attempt["worker_pid"], attempt["worker_start_time"])
                or (tree.cgroup is not None and tree.cgroup.populated())
                or bool(token_processes(attempt["worker_token"]))
            )
        )
        action = decide(
            supervisor_alive=supervisor_alive,
            worker_alive=worker_alive,
            now=store_now(conn),
            deadline=attempt["deadline"],
            grace=supervisor_grace(),
            here=here,
            lease_expires_at=attempt["lease_expires_at"],
        )
        if action == BUSY:
            busy.append(attempt["message_id"])
            continue
        # Loaded only to settle one: a listener whose supervisors all settled their own attempts never
        # holds the verdict's modules (README, "The listener's footprint").
        from dispatcher.dispatch.outcome import attempt_diagnostics, settle

        if action == HOST_LOST:  # nothing of it is here to end
            settle(conn, attempt["message_id"], fallback="crashed", error_kind=HOST_LOST)
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
        # The worker is gone: the commit its supervisor could not make is made now, once.
        from dispatcher.dispatch.isolation import close_worktree, settle_worktree

        close_worktree(conn, attempt["message_id"])
        outcome = settle(conn, attempt["message_id"], fallback=fallback, error_kind=error_kind, diagnostics=diagnostics)
        settle_worktree(conn, attempt["message_id"], outcome)
        recheck_contained(attempt["message_id"], tree)
        remove_request(paths, attempt["message_id"])  # a supervisor killed mid-way could not
    # Every agent's running attempts (that this connection may read): a listener started outside
    # systemd shares its cgroup with the other agents' listeners and their workers.
    sweep_worker_cgroups(lambda: {a["worker_token"] for a in unsettled_attempts(conn) if a["worker_token"]})
    return busy
