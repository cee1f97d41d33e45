"""What is left of an attempt once its worker is gone: the request file in its directory, any
process of its tree, and a worker cgroup whose attempt no longer runs. Cleared alike by the supervisor's verdict and by reconciliation, which the
listener runs: so nothing here loads the supervisor's modules, nor the verdict's (``outcome``
reads the diagnostics).
"""

import contextlib
from collections.abc import Callable

from dispatcher.core import clock
from dispatcher.core.logs import get_logger
from dispatcher.dispatch import cgroups
from dispatcher.dispatch.paths import AgentPaths
from dispatcher.dispatch.procs import WorkerTree, contain

KILL_GRACE_SECONDS = 5.0  # a worker's tree gets this long between TERM and KILL
REQUEST_NAME = "request.md"
DIAGNOSTICS_NAME = "diagnostics.json"
log = get_logger("agent_bridge.dispatch")


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


def sweep_worker_cgroups(running_tokens: Callable[[], set[str]]) -> None:
    """Remove the empty worker cgroups below ours whose attempt is not running (``cgroups.sweep``):
    a supervisor that died unreconciled, whose attempt was then pruned or whose store was replaced,
    left its cgroup behind for good."""
    parent, _ = cgroups.delegated_directory()
    if parent is None:
        return
    verdicts = cgroups.sweep(parent, running_tokens, clock.now())
    if removed := verdicts.get(cgroups.REMOVE):
        log.info("worker_cgroups_swept", count=len(removed), cgroups=removed)
    if populated := verdicts.get(cgroups.POPULATED):  # (another store's running worker, or ours escaped)
        log.debug("worker_cgroups_kept_populated", count=len(populated), cgroups=populated)
