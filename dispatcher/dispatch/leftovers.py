"""What is left of an attempt once its worker is gone: the files in its directory (the request,
the diagnostics) and any process of its tree. Read and cleared alike by the supervisor's verdict
and by reconciliation, which the listener runs: so nothing here loads the supervisor's modules.
"""

import contextlib
import json
from pathlib import Path

from dispatcher.core.logs import get_logger
from dispatcher.core.private_files import read_untrusted
from dispatcher.dispatch.attempts import clean_diagnostics
from dispatcher.dispatch.cli_results import cli_diagnostics
from dispatcher.dispatch.paths import AgentPaths
from dispatcher.dispatch.procs import WorkerTree, contain

KILL_GRACE_SECONDS = 5.0  # a worker's tree gets this long between TERM and KILL
REQUEST_NAME = "request.md"
DIAGNOSTICS_NAME = "diagnostics.json"
MAX_DIAGNOSTICS_BYTES = 64 * 1024
log = get_logger("agent_bridge.dispatch")


def attempt_diagnostics(attempt_dir: Path, exit_code: int | None) -> dict | None:
    """What the attempt's files say about its run, once its worker is gone: the launcher's
    ``diagnostics.json``, else the CLI's own result file. The one reading of them, for a normal
    finish and for reconciliation alike; every file is read with ``read_untrusted``."""
    try:
        written = json.loads(read_untrusted(attempt_dir, DIAGNOSTICS_NAME, MAX_DIAGNOSTICS_BYTES) or "null")
    except ValueError:
        written = None
    return clean_diagnostics(written) or clean_diagnostics(cli_diagnostics(attempt_dir, exit_code))


def remove_request(paths: AgentPaths, message_id: int) -> None:
    """The request file is the only copy of the task text outside the store. Whatever a worker
    put in its place (a directory) is its own, left alone: removing it must not fail a verdict."""
    with contextlib.suppress(OSError):
        (paths.attempt_dir(message_id) / REQUEST_NAME).unlink(missing_ok=True)


def recheck_contained(message_id: int, tree: WorkerTree) -> None:
    """Look again once the attempt is settled: nothing of its worker may outlive its verdict."""
    ended, left = contain(tree, 0)
    if ended:
        log.warning("worker_outlived_its_verdict", message_id=message_id, count=ended, outlived_kill=left)
