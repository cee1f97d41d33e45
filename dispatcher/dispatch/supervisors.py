"""The supervisors a listener has forked and not yet reaped: several run at once.

Each is watched through a pidfd, so an ended one is noticed without blocking and reaped once;
one past its limit (its worker's budget plus the supervisor's grace: SIGSTOPped by its worker,
or stuck) is killed with its group and its attempt left to reconciliation. A listener that
stops leaves them running (each is in a session of its own) and closes only its pidfds.
"""

import os
import select
import signal
from dataclasses import dataclass

from dispatcher.core import clock
from dispatcher.core.logs import get_logger
from dispatcher.dispatch.procs import signal_group

log = get_logger("agent_bridge.listener")


@dataclass
class Supervisor:
    pid: int
    pidfd: int
    message_id: int
    sender: str
    started_at: float  # wall clock, for the views
    limit: float  # monotonic: past it the supervisor's group is killed

    def shown(self) -> dict:
        """Its entry in the progress document: ids, names and times only."""
        return {
            "message_id": self.message_id,
            "sender": self.sender,
            "supervisor_pid": self.pid,
            "started_at": self.started_at,
        }


class Supervisors:
    def __init__(self) -> None:
        self._running: list[Supervisor] = []  # oldest first

    def __len__(self) -> int:
        return len(self._running)

    def add(self, pid: int, message_id: int, sender: str, started_at: float, limit: float) -> None:
        self._running.append(Supervisor(pid, os.pidfd_open(pid), message_id, sender, started_at, limit))

    def message_ids(self) -> frozenset[int]:
        return frozenset(s.message_id for s in self._running)

    def shown(self) -> list[dict]:
        return [s.shown() for s in self._running]

    def reap(self) -> list[tuple[Supervisor, int]]:
        """The supervisors that ended since the last look, with their exit codes (each once)."""
        if not self._running:
            return []
        readable = set(select.select([s.pidfd for s in self._running], [], [], 0)[0])
        ended = [s for s in self._running if s.pidfd in readable]
        self._running = [s for s in self._running if s.pidfd not in readable]
        done = []
        for supervisor in ended:
            os.close(supervisor.pidfd)
            done.append((supervisor, os.waitstatus_to_exitcode(os.waitpid(supervisor.pid, 0)[1])))
        return done

    def kill_overdue(self) -> None:
        """Kill each supervisor past its limit, once; its end shows on its pidfd."""
        now = clock.monotonic()
        for supervisor in self._running:
            if now >= supervisor.limit:
                log.warning("supervisor_overdue_killed", message_id=supervisor.message_id, pid=supervisor.pid)
                signal_group(supervisor.pid, signal.SIGKILL)  # its own session and group (os.setsid)
                supervisor.limit = float("inf")

    def let_go(self) -> None:
        """Stop watching (the listener stops; they carry on alone, in their own sessions)."""
        for supervisor in self._running:
            os.close(supervisor.pidfd)
        self._running = []
