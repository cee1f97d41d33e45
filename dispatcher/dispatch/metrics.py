"""The Prometheus figures of a store (docs/metrics.md), computed from its rows at each scrape or
textfile write by one prometheus_client collector. Loaded only with metrics on: nothing that
runs with them off (send, receive, the listener's loop) imports this module or prometheus_client.

Who exports which figures is ``metric_rules.scope_of``; the rows are ``store.metrics``'s. Labels
are names (agent, host, outcome, error kind, kind, reason), never a message id or any text.
"""

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from dispatcher.core.config_view import ConfigView, DispatchConfig, budget_day_start
from dispatcher.core.metric_rules import HISTOGRAMS, Scope, counted, cumulative, label, scope_of
from dispatcher.core.private_files import write_atomically
from dispatcher.dispatch.queue import classify
from dispatcher.store import Connection
from dispatcher.store.metrics import (
    attempt_counts,
    budget_hold_days,
    counter_totals,
    messages_after,
    messages_folded,
    one_snapshot,
    span_buckets,
    spend_per_agent,
)
from dispatcher.store.store_clock import store_now

PREFIX = "agent_bridge_"
# Readable by the node exporter's user: the figures are names and numbers, nothing private.
TEXTFILE_MODE = 0o644


@dataclass(frozen=True)
class ListenerFact:
    """A listener as an exporter sees it: its agent, its host, whether it runs, and why a
    dispatchable task waits (``step.HELD_*``; None: nothing held, or not known to this exporter)."""

    agent: str
    host: str | None
    up: bool
    held: str | None = None


# name (without the prefix), type, help: the metric families every exporter writes.
METRICS: dict[str, tuple[str, str]] = {
    "attempts": ("counter", "Finished attempts, by outcome and error kind."),
    "messages_sent": ("counter", "Messages sent to the agent, by kind (a notice is kind notice)."),
    "budget_holds": ("counter", "Budget days on which the agent's daily budget held its new tasks."),
    "notices": ("counter", "Notices handed to the agent's notify_command, by event and whether the runner started."),
    "wakes": ("counter", "Times a wake path told the agent's session of new mail, by path."),
    "queue_wait_seconds": ("histogram", "From a task's send to its attempt's start (the barrier)."),
    "attempt_duration_seconds": ("histogram", "From an attempt's start to its end (finished attempts)."),
    "worker_start_seconds": ("histogram", "From a task's send to its worker's launcher running."),
    "pending_tasks": ("gauge", "Tasks no attempt has taken yet, by what dispatch would do with them now."),
    "running_attempts": ("gauge", "Attempts started and not finished."),
    "listener_up": ("gauge", "1 while the agent's listener runs (holds its lease), else 0."),
    "listener_held": ("gauge", "1 while a dispatchable task waits for a worker, by reason."),
    "spend_today_usd": ("gauge", "The cost of the agent's attempts started today (the budget's day)."),
}


# The counters written where the thing happens (``metric_rules.COUNTERS``) and their labels.
COUNTED = {"notices": ["agent", "event", "outcome"], "wakes": ["agent", "path"]}


# Each histogram's family (``metric_rules.HISTOGRAMS``'s span).
HISTOGRAM_NAMES = {
    "queue_wait": "queue_wait_seconds",
    "duration": "attempt_duration_seconds",
    "worker_start": "worker_start_seconds",
}


# The pending gauge's ``state`` label: what automatic dispatch would do with a task now
# (``queue.classify``, the dispatch rule's own backlog), and the Backlog field that lists them.
PENDING_STATES = {
    "dispatchable": "dispatchable",
    "held_budget": "held_budget",
    "held_interactive": "held_interactive",
    "auto_off": "held_auto_off",
    "stale": "stale",
}


def metric_names() -> frozenset[str]:
    """Every sample name an exporter may write (a counter's ``_total``, a histogram's series)."""
    names = set()
    for name, (kind, _) in METRICS.items():
        full = PREFIX + name
        if kind == "counter":
            names.add(full + "_total")
        elif kind == "histogram":
            names.update(full + suffix for suffix in ("_bucket", "_sum", "_count"))
        else:
            names.add(full)
    return frozenset(names)


def _histogram(name: str, rows: list[tuple], bounds: Sequence[float], this_host: str | None) -> Metric:
    """A histogram family from ``store.metrics.span_buckets``'s rows, one series per agent and host."""
    family = HistogramMetricFamily(PREFIX + name, METRICS[name][1], labels=["agent", "host"])
    series: dict[tuple[str, str], tuple[list[int], float]] = {}
    for agent, host, bucket, count, seconds in rows:
        counts, total = series.setdefault(_where(agent, host, this_host), ([0] * (len(bounds) + 1), 0.0))
        counts[bucket] += count
        series[_where(agent, host, this_host)] = (counts, total + (seconds or 0.0))
    les = [floatToGoString(bound) for bound in bounds] + ["+Inf"]
    for labels, (counts, total) in sorted(series.items()):
        family.add_metric(list(labels), list(zip(les, cumulative(counts), strict=True)), total)
    return family


def _counter(metric: str, labelnames: list[str], totals: dict[tuple[str, str, str], int]) -> Metric:
    """A counter written where the thing happens (``metric_rules.COUNTERS``), from its running
    totals: a row outside the fixed label sets (none is written) is left out."""
    family = CounterMetricFamily(PREFIX + metric, METRICS[metric][1], labels=labelnames)
    for (agent, value, detail), count in sorted(totals.items()):
        if counted(metric, value, detail):
            family.add_metric([label(agent), value, detail][: len(labelnames)], count)
    return family


def _where(agent: str, host: str | None, this_host: str | None) -> tuple[str, str]:
    """An attempt's agent and host labels; one from before hosts were recorded is the exporting
    host's (``store.metrics``)."""
    return label(agent), label(host if host is not None else this_host)


class SentCounter:
    """Messages sent, by recipient and kind: the totals prune folded in plus the rows the store
    holds. The rows are counted once and then only those sent since (``store.metrics
    .messages_after``); prune is the one thing that deletes messages and it folds each into the
    totals as it goes, so while the folded totals stay as they were the rows counted are all still
    there, and once they change the rows are counted again. Read inside one snapshot."""

    def __init__(self) -> None:
        self._folded: dict[tuple[str, str | None], int] | None = None
        self._rows: Counter[tuple[str, str | None]] = Counter()
        self._through = 0

    def read(self, conn: Connection, agent: str | None) -> Counter[tuple[str, str | None]]:
        folded = messages_folded(conn, agent)
        if folded != self._folded:  # a prune ran since (or the first read): count the rows again
            self._folded, self._rows, self._through = folded, Counter(), 0
        for recipient, kind, count, highest in messages_after(conn, self._through, agent):
            self._rows[(recipient, kind)] += count
            self._through = max(self._through, highest)
        return self._rows + Counter(folded)


class StoreCollector:
    """A prometheus_client collector: each ``collect`` reads the store once through ``connect``
    (a function that opens or lends a connection, and ``release`` it after), in one snapshot.
    Every counter is the store's rows plus the totals prune folded in (``SentCounter`` keeps the
    messages' rows counted so far, to read only the new ones)."""

    def __init__(
        self,
        connect: Callable[[], Connection],
        release: Callable[[Connection], None],
        scope: Scope,
        *,
        now: Callable[[Connection], float],
        config: DispatchConfig,
        agents: Sequence[str],
        listeners: Callable[[Connection, float], Iterable[ListenerFact]],
    ) -> None:
        self._connect, self._release, self._scope = connect, release, scope
        self._now, self._config, self._agents, self._listeners = now, config, agents, listeners
        self._sent = SentCounter()

    def describe(self) -> list[Metric]:
        return []  # (no fixed description: the registry does not call collect at registration)

    def collect(self) -> Iterator[Metric]:
        conn = self._connect()
        try:
            with one_snapshot(conn):  # a prune's batch moves figures from rows to totals: all or none
                now = self._now(conn)
                agent, host = self._scope.agent, self._scope.host
                attempts = attempt_counts(conn, agent, host)
                spans = {span: span_buckets(conn, span, bounds, agent, host) for span, bounds in HISTOGRAMS.items()}
                sent = self._sent.read(conn, agent)
                backlogs = {name: classify(conn, name, self._config, now) for name in self._agents}
                spend = spend_per_agent(conn, budget_day_start(self._config, now), agent)
                holds = budget_hold_days(conn, agent)
                counts = {metric: counter_totals(conn, metric, agent) for metric in COUNTED}
                listeners = list(self._listeners(conn, now))
        finally:
            self._release(conn)
        yield from self._attempt_families(attempts, host)
        for span, name in HISTOGRAM_NAMES.items():
            yield _histogram(name, spans[span], HISTOGRAMS[span], host)
        family = CounterMetricFamily(PREFIX + "messages_sent", METRICS["messages_sent"][1], labels=["agent", "kind"])
        for (recipient, kind), count in sorted(sent.items(), key=lambda item: (item[0][0], item[0][1] or "")):
            family.add_metric([label(recipient), label(kind)], count)
        yield family
        pending: dict[tuple[str, ...], float] = {
            (label(name), state): len(getattr(backlog, field))
            for name, backlog in backlogs.items()
            for state, field in PENDING_STATES.items()
        }
        yield self._gauge("pending_tasks", ["agent", "state"], pending)
        agents = sorted(set(self._agents) | set(spend))
        family = CounterMetricFamily(PREFIX + "budget_holds", METRICS["budget_holds"][1], labels=["agent"])
        for name in sorted(set(self._agents) | set(holds)):
            family.add_metric([label(name)], holds.get(name, 0))
        yield family
        for metric, labelnames in COUNTED.items():
            yield _counter(metric, labelnames, counts[metric])
        yield self._gauge("spend_today_usd", ["agent"], {(label(a),): spend.get(a, 0.0) for a in agents})
        yield self._gauge(
            "listener_up", ["agent", "host"], {(label(f.agent), label(f.host)): int(f.up) for f in listeners}
        )
        yield self._gauge(
            "listener_held",
            ["agent", "reason"],
            {(label(f.agent), label(f.held)): 1 for f in listeners if f.held is not None},
        )

    def _attempt_families(self, rows: list[tuple], this_host: str | None) -> Iterator[Metric]:
        finished: Counter[tuple[str, ...]] = Counter()
        running: Counter[tuple[str, ...]] = Counter()
        for agent, host, state, outcome, error_kind, count in rows:
            where = _where(agent, host, this_host)
            if state == "finished":
                finished[(*where, label(outcome), label(error_kind))] += count
            else:
                running[where] += count
        counter = CounterMetricFamily(
            PREFIX + "attempts", METRICS["attempts"][1], labels=["agent", "host", "outcome", "error_kind"]
        )
        for labels, count in sorted(finished.items()):
            counter.add_metric(list(labels), count)
        yield counter
        yield self._gauge("running_attempts", ["agent", "host"], dict(running))

    @staticmethod
    def _gauge(name: str, labelnames: list[str], values: dict[tuple[str, ...], float]) -> Metric:
        family = GaugeMetricFamily(PREFIX + name, METRICS[name][1], labels=labelnames)
        for labels, value in sorted(values.items()):
            family.add_metric(list(labels), value)
        return family


def registry_of(collector: StoreCollector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def exposition(registry: CollectorRegistry) -> str:
    """The registry's figures in Prometheus's text format."""
    return generate_latest(registry).decode("utf-8")


def write_textfile(path: Path, registry: CollectorRegistry) -> None:
    """The node exporter's textfile: replaced atomically (it never reads half a file)."""
    write_atomically(path, exposition(registry), mode=TEXTFILE_MODE)


def textfile_path(directory: Path, agent: str) -> Path:
    """One file per agent's listener: ``agent_bridge_<agent>.prom`` (the collector reads ``*.prom``)."""
    return directory / f"agent_bridge_{agent}.prom"


class ListenerTextfile:
    """A listener's textfile: its agent's figures and its own host's attempts (``scope_of``),
    itself as the agent's one listener; one collector for the listener's life."""

    def __init__(
        self, connection: Callable[[], Connection], directory: Path, agent: str, host: str, config: ConfigView
    ) -> None:
        self.path = textfile_path(directory, agent)
        self.up: bool = True
        self.held: str | None = None
        self._registry = registry_of(
            StoreCollector(
                connection,
                lambda _conn: None,  # the listener's own connection: it stays open
                scope_of("listener", agent, host),
                now=store_now,
                config=config,
                agents=[agent],
                listeners=lambda _conn, _now: [ListenerFact(agent, host, self.up, self.held if self.up else None)],
            )
        )

    def write(self, *, up: bool, held: str | None) -> None:
        self.up, self.held = up, held
        write_textfile(self.path, self._registry)
