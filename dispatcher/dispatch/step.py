"""The listener's decision, as a pure function of what it observed (no clock, no I/O).

``step(observation, now)`` returns what to do next: stop, wait (until a change or a
timeout), dispatch one message, or back off after a transient failure. Several attempts may
run at once: one more starts only while fewer than the agent's ``max_workers`` run, a slot of
the machine's ``max_workers_total`` is free, and no supervisor started before is still on its
way to the barrier (so each passes the barrier, and counts in the daily budget's reservation,
before the next is started). The listener gathers the observation and carries the action out;
every branch here has a unit test.
"""

from dataclasses import dataclass

RESCAN_SECONDS = 5.0  # look again without a signal: leases expire, orphans finish
BUSY_RECHECK_SECONDS = 1.0  # workers run: reap the ended, end the overdue, look for a free slot
# Why a dispatchable task waits while workers run (progress ``held``; docs/workers.md).
HELD_MAX_WORKERS, HELD_MAX_WORKERS_TOTAL = "max_workers", "max_workers_total"
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
    running: int = 0  # attempts running now: this listener's supervisors, and any from before
    starting: bool = False  # a supervisor forked here has not recorded its attempt yet
    max_workers: int = 1  # the agent's (config_view.max_workers)
    machine_full: bool = False  # max_workers_total workers already run on this machine
    candidate: int | None = None  # the oldest dispatchable message not running yet
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
    held: str | None = None  # a dispatchable task waits for a free worker: HELD_MAX_WORKERS...


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
    if obs.disabled and not (obs.running or obs.starting):  # disabled: the running ones finish first
        return Stop("disabled")
    if obs.backoff_left > 0:
        return Wait(obs.backoff_left, "error", wake_on_commit=False)
    if reason := obs.store_error or obs.failure_reason:
        return BackOff(backoff_seconds(obs.failures), reason)
    if obs.config_error is not None:
        return Wait(RESCAN_SECONDS, "error")  # wakes on a change to config.json
    stage = "supervising" if obs.running or obs.starting else "idle"
    if obs.candidate is not None and not obs.starting and not obs.disabled:
        if obs.running >= obs.max_workers:
            return Wait(BUSY_RECHECK_SECONDS, stage, held=HELD_MAX_WORKERS)
        if obs.machine_full:
            return Wait(BUSY_RECHECK_SECONDS, stage, held=HELD_MAX_WORKERS_TOTAL)
        return Dispatch(obs.candidate)
    if obs.running or obs.starting:  # (its attempt's record, or its end, commits: that wakes us sooner)
        return Wait(BUSY_RECHECK_SECONDS, stage)
    if obs.held_until is not None:  # wake when the interactive session's grace ends
        return Wait(min(RESCAN_SECONDS, max(HELD_RECHECK_MIN_SECONDS, obs.held_until - now)), "idle")
    return Wait(RESCAN_SECONDS, "idle")
