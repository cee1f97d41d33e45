"""Settle attempts whose supervisor is gone, from /proc process evidence and the store.

A recorded pid only counts as alive when /proc shows a process with that pid that
started when the attempt recorded it, so a recycled pid cannot pin an attempt.
"""

import sqlite3
import time

from .attempts import unsettled_attempts
from .outcome import settle
from .paths import AgentPaths
from .procs import is_same_process, kill_group
from .supervisor import KILL_GRACE_SECONDS, REQUEST_NAME


def reconcile(conn: sqlite3.Connection, paths: AgentPaths) -> bool:
    """Settle what can be settled; return True while an attempt is still legitimately running."""
    busy = False
    for attempt in unsettled_attempts(conn, paths.agent):
        if is_same_process(attempt["supervisor_pid"], attempt["supervisor_start_time"]):
            busy = True
            continue
        worker_alive = is_same_process(attempt["worker_pid"], attempt["worker_start_time"])
        if worker_alive and time.time() < attempt["deadline"]:
            busy = True  # an orphaned worker still inside its time budget: let it finish
            continue
        if worker_alive:
            kill_group(attempt["worker_pid"], KILL_GRACE_SECONDS)
            settle(conn, attempt["message_id"], fallback="timeout", error_kind="timeout")
        else:
            gone = "worker_gone" if attempt["worker_pid"] else "supervisor_gone"
            settle(conn, attempt["message_id"], fallback="crashed", error_kind=gone)
        # A supervisor killed mid-way could not remove the task text it wrote.
        (paths.attempt_dir(attempt["message_id"]) / REQUEST_NAME).unlink(missing_ok=True)
    return busy
