"""Stopping a runtime directory's listeners and running workers for good (``uninstall``).

A disabled listener exits and lets its supervisor, in its own session, finish the running worker.
For uninstall nothing may stay. Every process whose environment names the runtime directory is
one of its workers (the supervisor gives each worker ``AGENT_BRIDGE_RUNTIME_DIR``; a daemonised
grandchild inherits it): after a grace they get SIGTERM, their supervisors judge and settle their
attempts and end what is left of each tree; a supervisor still running after a second grace is
ended with its workers, and ``reconcile`` settles its attempt when the store is the one in use.
"""

import contextlib
import os
import signal
import time
from pathlib import Path

from dispatcher.core import clock
from dispatcher.core.processes import ancestors, end_processes, flock_holder, is_same_process, start_time
from dispatcher.core.processes import with_environment as _with_environment
from dispatcher.dispatch.leftovers import KILL_GRACE_SECONDS

RUNTIME_ENV = "AGENT_BRIDGE_RUNTIME_DIR"


def listener_locks(runtime: Path) -> list[Path]:
    """The listener locks of ``runtime`` whose listener runs (someone holds the lock)."""
    from dispatcher.dispatch.systemd_unit import AGENT_ID_RE

    if not runtime.is_dir():
        return []
    return sorted(
        lock
        for lock in runtime.glob("*.lock")
        if AGENT_ID_RE.fullmatch(lock.name.removesuffix(".lock")) and flock_holder(lock) is not None
    )


def workers_of(runtime: Path) -> list[int]:
    """The live processes of the workers started from ``runtime`` (any agent). Never this process
    or one above it: a shell that exports ``AGENT_BRIDGE_RUNTIME_DIR`` passes it to uninstall too."""
    mine = {os.getpid(), *ancestors()}
    return [pid for pid in _with_environment(RUNTIME_ENV, str(runtime.resolve())) if pid not in mine]


def _wait(done, seconds: float) -> bool:
    deadline = clock.monotonic() + seconds
    while not done():
        if clock.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def end_workers(runtime: Path, wait_seconds: float, term_seconds: float) -> list[str]:
    """Wait ``wait_seconds`` for the running workers of ``runtime`` to end on their own, then SIGTERM
    them; give their supervisors ``term_seconds`` to settle their attempts and exit, and end every
    process of theirs still left. Lines saying what it did (none when nothing ran)."""
    if not workers_of(runtime):
        return []
    if _wait(lambda: not workers_of(runtime), wait_seconds):
        return [f"workers of {runtime}: finished on their own."]
    workers = workers_of(runtime)
    mine = {os.getpid(), *ancestors()}
    supervisors = {
        parent: start_time(parent)
        for pid in workers
        if (up := ancestors(pid)) and (parent := up[0]) not in workers and parent not in mine and parent != 1
    }
    for pid in workers:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)

    def gone() -> bool:
        return not workers_of(runtime) and not any(is_same_process(p, s) for p, s in supervisors.items())

    if _wait(gone, term_seconds):
        return [
            f"workers of {runtime}: stopped with SIGTERM after {wait_seconds:g} s ({len(workers)} process(es)); "
            "their supervisors settled the attempts."
        ]
    stuck = [p for p, s in supervisors.items() if is_same_process(p, s)]
    end_processes(
        lambda: [*workers_of(runtime), *(p for p in stuck if is_same_process(p, supervisors[p]))], KILL_GRACE_SECONDS
    )
    return [
        f"workers of {runtime}: killed after SIGTERM and {term_seconds:g} s more (supervisor(s) "
        f"{', '.join(map(str, stuck)) or 'none'}); an attempt they left is settled as crashed."
    ]
