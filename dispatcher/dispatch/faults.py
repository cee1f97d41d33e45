"""Named crash points on the dispatch path, armed only by tests.

``AGENT_BRIDGE_FAULT_POINT=<name>`` makes the process SIGKILL itself exactly at that point
(nothing after it runs, no cleanup, no ``finally``); ``<name>:error`` raises an injected
store failure there instead (the backend's own error, from ``injected_store_failure``), as
a full disk or a held lock would. This module is the only reader of the variable. Unset
(always, outside tests), every point is a no-op costing one dictionary lookup.
"""

import os
import signal

from dispatcher.store.errors import injected_store_failure

ENV = "AGENT_BRIDGE_FAULT_POINT"
RENEW_ENV = "AGENT_BRIDGE_TEST_RENEW_SECONDS"
SUPERVISOR_GRACE_ENV = "AGENT_BRIDGE_TEST_SUPERVISOR_GRACE_SECONDS"
NO_CGROUP_ENV = "AGENT_BRIDGE_TEST_NO_CGROUP"
POINTS = (
    "after_barrier",  # the attempt row is committed, nothing else exists yet
    "after_spawn",  # the gated worker exists, its pid is not recorded
    "record_pid",  # just before recording the worker's pid (use with :error)
    "after_pid_recorded",  # recorded, the gate not yet opened
    "before_verdict_commit",  # inside the settling transaction, before COMMIT
    "after_verdict_commit",
    "after_request_removed",
)


def _armed() -> tuple[str, str] | None:
    value = os.environ.get(ENV)
    if not value:
        return None
    name, _, action = value.partition(":")
    return name, action or "kill"


def fault_point(name: str) -> None:
    armed = _armed()
    if armed is None or armed[0] != name:
        return
    if armed[1] == "error":
        raise injected_store_failure(f"injected fault at {name}")
    os.kill(os.getpid(), signal.SIGKILL)


def _seconds(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name) or default)
    except ValueError:
        return default


def renew_interval(default: float) -> float:
    """How often the supervisor renews the worker's claim; tests shorten it."""
    return _seconds(RENEW_ENV, default)


def supervisor_grace(default: float) -> float:
    """How long past an attempt's deadline its supervisor may take to settle it; tests shorten it."""
    return _seconds(SUPERVISOR_GRACE_ENV, default)


def cgroups_allowed() -> bool:
    """Whether workers may get a cgroup where the machine delegates one; tests switch it off to
    prove the fallback (the subreaper's descendants and the token sweep) on a machine that does."""
    return os.environ.get(NO_CGROUP_ENV) != "1"
