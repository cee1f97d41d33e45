"""The listener's decision, as a pure function of what it observed (no clock, no I/O).

``step(observation, now)`` returns what to do next: stop, wait (until a change or a
timeout), dispatch one message, or back off after a transient failure. The listener
gathers the observation and carries the action out; every branch here has a unit test.
"""

from dataclasses import dataclass

RESCAN_SECONDS = 5.0  # look again without a signal: leases expire, orphans finish
BUSY_RECHECK_SECONDS = 1.0  # an orphaned worker from before is still running
# Looking again for a held message's release is never sooner than this: no busy loop on a
# release time that has just passed (or a clock that moved).
HELD_RECHECK_MIN_SECONDS = 0.05
BACKOFF_BASE_SECONDS = 0.5
BACKOFF_CAP_SECONDS = 30.0


@dataclass(frozen=True)
class Observation:
    stop_requested: bool = False
    disabled: bool = False
    config_error: str | None = None
    store_error: str | None = None  # why the store could not be read this round
    failures: int = 0  # consecutive transient failures, a fresh one included
    failure_reason: str | None = None  # a fresh failure not yet backed off from (e.g. a failed supervisor)
    busy: bool = False  # reconciliation says an attempt is still running
    candidate: int | None = None  # the oldest dispatchable message
    backoff_left: float = 0.0  # seconds of a backoff still to sit out (measured on the monotonic clock)
    held_until: float | None = None  # the first message held for an interactive session is released then


@dataclass(frozen=True)
class Stop:
    reason: str


@dataclass(frozen=True)
class Wait:
    timeout: float
    stage: str  # what the listener shows meanwhile: idle, supervising, error
    wake_on_commit: bool = True  # a backoff sits out its time whatever the store does


@dataclass(frozen=True)
class Dispatch:
    message_id: int


@dataclass(frozen=True)
class BackOff:
    seconds: float
    reason: str


Action = Stop | Wait | Dispatch | BackOff


def backoff_seconds(failures: int) -> float:
    """Capped exponential: 0.5, 1, 2, 4 ... 30 s."""
    doublings = min(max(0, failures - 1), 16)  # bounded: a long outage must not overflow
    return min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2**doublings)


def step(obs: Observation, now: float) -> Action:
    if obs.stop_requested:
        return Stop("signal")
    if obs.disabled:
        return Stop("disabled")
    if obs.backoff_left > 0:
        return Wait(obs.backoff_left, "error", wake_on_commit=False)
    if reason := obs.store_error or obs.failure_reason:
        return BackOff(backoff_seconds(obs.failures), reason)
    if obs.config_error is not None:
        return Wait(RESCAN_SECONDS, "error")  # wakes on a change to config.json
    if obs.busy:
        return Wait(BUSY_RECHECK_SECONDS, "supervising")
    if obs.candidate is not None:
        return Dispatch(obs.candidate)
    if obs.held_until is not None:  # wake when the interactive session's grace ends
        return Wait(min(RESCAN_SECONDS, max(HELD_RECHECK_MIN_SECONDS, obs.held_until - now)), "idle")
    return Wait(RESCAN_SECONDS, "idle")
