"""The rules of the Prometheus figures (docs/metrics.md), as pure functions: which figures an
exporter owns, the histograms' buckets, and what a label value may be. No prometheus_client here:
``dispatch.metrics`` builds the metric families from what these decide.
"""

import functools
import ipaddress
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from dispatcher.core.notices import EVENTS

# Seconds: a dispatch within a second, a worker's start-up, a task of minutes, the longest timeouts.
WAIT_BUCKETS: tuple[float, ...] = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 14400, 86400)
DURATION_BUCKETS: tuple[float, ...] = (1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 14400, 86400)
# Each histogram's span (``store.metrics.SPANS``) and its bounds. Prune folds the bucket counts of
# the attempts it deletes into the store's totals by these bounds' indexes: changing a bound needs a
# migration that moves those totals.
HISTOGRAMS: dict[str, tuple[float, ...]] = {
    "queue_wait": WAIT_BUCKETS,
    "duration": DURATION_BUCKETS,
    "worker_start": WAIT_BUCKETS,
}

# The counters written where the thing happens (a running total per agent and label in the
# store's ``metric_totals``, ``store.metrics.count_event``), each with its two labels' fixed sets:
# ``notices``: each notice handed to an agent's ``notify_command``, by event, and whether its runner
# started (``cannot_start``: ``posix_spawn`` failed; what the command then did is the runner's log
# line); ``wakes``: each time a wake path told a session of new mail, by path (the session wake
# ladder's rungs, ``bridge.presence.WAKE_PATHS``). PostgreSQL's ``bridge_count`` (migration 24)
# admits these same sets: a new event or path needs a migration too (``test_metric_rules``).
NOTICE_OUTCOMES = ("started", "cannot_start")
WAKE_PATHS = ("hook", "monitor", "channel", "resource")
COUNTERS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "notices": (EVENTS, NOTICE_OUTCOMES),
    "wakes": (WAKE_PATHS, ("",)),
}


def counted(metric: str, label: str, detail: str = "") -> bool:
    """Whether ``metric`` counts (``label``, ``detail``): both from its fixed sets (``COUNTERS``)."""
    labels, details = COUNTERS.get(metric, ((), ()))
    return label in labels and detail in details


_LABEL_CHARACTERS = re.compile(r"[^A-Za-z0-9_.:-]")
LABEL_MAX = 64
NONE_LABEL = "none"


@dataclass(frozen=True)
class Scope:
    """Whose figures an exporter writes: one agent's (None: every agent's) and one host's
    attempts (None: every host's)."""

    agent: str | None
    host: str | None


def scope_of(exporter: str, agent: str | None, host: str) -> Scope:
    """The ownership rule, so that no figure is exported twice for one store.

    ``listener``: an agent's listener writes its textfile with that agent's figures only, and of
    the attempts only those its own host ran; the agent's store-wide gauges (pending, spend today,
    messages sent to it) are its too, because one listener per agent per store holds the lease.
    ``serve``: ``metrics serve`` exports the whole store, every agent and every host, once:
    scrape one of the two kinds for a store, never both (docs/metrics.md)."""
    if exporter == "listener":
        if agent is None:
            raise ValueError("a listener's figures are its agent's: name the agent")
        return Scope(agent=agent, host=host)
    if exporter == "serve":
        return Scope(agent=None, host=None)
    raise ValueError(f"unknown exporter {exporter!r}: listener or serve")


@functools.lru_cache(maxsize=4096)  # a scrape labels every attempt row with a handful of names
def label(value: object) -> str:
    """A label value: a name as the store has it, cut to ``LABEL_MAX`` characters of
    ``[A-Za-z0-9_.:-]`` (anything else becomes ``_``); no value at all is ``none``. Labels are
    agents, hosts, outcomes, error kinds, kinds and reasons: short words, never text."""
    if value is None or value == "":
        return NONE_LABEL
    return _LABEL_CHARACTERS.sub("_", str(value))[:LABEL_MAX]


def cumulative(counts: Sequence[int]) -> list[int]:
    """Prometheus's cumulative buckets from the count in each bucket alone (``store.metrics
    .span_buckets`` puts a span in the first bucket whose bound is at or above it)."""
    return list(itertools.accumulate(counts))


def non_loopback(bind: str) -> str | None:
    """Why ``metrics serve`` must not listen on ``bind`` (None: a loopback address, or
    ``localhost``). The figures name agents and hosts: they are for this machine's Prometheus,
    and for another machine's through a tunnel or a proxy the owner sets up, never an open port."""
    if bind == "localhost":
        return None
    try:
        address = ipaddress.ip_address(bind)
    except ValueError:
        return f"{bind!r} is not an IP address; give a loopback address such as 127.0.0.1 or ::1"
    if not address.is_loopback:
        return (
            f"{bind} is not a loopback address: `metrics serve` listens on this machine only (127.0.0.1 or ::1); "
            "let another machine's Prometheus reach it through an SSH tunnel or a reverse proxy of your own"
        )
    return None
