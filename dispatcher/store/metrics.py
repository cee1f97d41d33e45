"""The rows the Prometheus figures are computed from (docs/metrics.md): ids, names, counts and
times only, never a message's text. ``agent`` and ``host`` narrow the figures to one agent's
(all agents: None) and to one host's attempts (all hosts: None; an attempt from before hosts were
recorded counts as every host's, as ``dispatch.reconcile`` treats it).

``dispatch.metrics`` turns them into metric families; the rules (buckets, labels, who exports
what) are ``core.metric_rules``.
"""

from collections.abc import Sequence
from typing import Any

from dispatcher.store.types import Connection

_WHERE = """
WHERE (CAST(:agent AS TEXT) IS NULL OR a.agent = :agent)
  AND (CAST(:host AS TEXT) IS NULL OR a.host = :host OR a.host IS NULL)
"""
# (The CASTs: PostgreSQL cannot tell the type of a parameter that only meets IS NULL.)

_ATTEMPT_COUNTS = (
    "SELECT a.agent, a.host, a.state, a.outcome, a.error_kind, count(*) FROM dispatch_attempts AS a"  # noqa: S608 - constant SQL
    + _WHERE
    + "GROUP BY a.agent, a.host, a.state, a.outcome, a.error_kind"
)

# The spans the histograms count, in seconds, each with the attempts it is defined for.
SPANS = {
    "queue_wait": ("a.started_at - m.created_at", "TRUE"),
    "duration": ("a.finished_at - a.started_at", "a.state = 'finished'"),
    "worker_start": ("a.worker_started_at - m.created_at", "TRUE"),
}


def _bucket_case(span: str, bounds: Sequence[float]) -> str:
    """The index of the first bound at or above the span (len(bounds): above them all). A negative
    span (a clock stepped back between two hosts) lands in the first bucket."""
    whens = " ".join(f"WHEN {span} <= {float(bound)!r} THEN {index}" for index, bound in enumerate(bounds))
    return f"CASE {whens} ELSE {len(bounds)} END"


# Ids only grow and are never reused (migration 9; PostgreSQL: an identity), and every write takes
# the store's one write lock, so rows commit in id order: counting past the highest id seen counts
# each message once, and a message pruned after it was counted stays counted.
_MESSAGES_AFTER = """
SELECT m.recipient, m.kind, count(*), max(m.id) FROM messages AS m
WHERE m.id > :after AND (CAST(:agent AS TEXT) IS NULL OR m.recipient = :agent)
GROUP BY m.recipient, m.kind
"""

_SPEND = """
SELECT a.agent, sum(a.cost_usd) FROM dispatch_attempts AS a
WHERE a.started_at >= :since AND (CAST(:agent AS TEXT) IS NULL OR a.agent = :agent)
GROUP BY a.agent
"""


def attempt_counts(conn: Connection, agent: str | None, host: str | None) -> list[tuple[Any, ...]]:
    """(agent, host, state, outcome, error_kind, attempts) for each such group of attempts."""
    return [tuple(row) for row in conn.execute(_ATTEMPT_COUNTS, {"agent": agent, "host": host})]


def span_buckets(
    conn: Connection, span: str, bounds: Sequence[float], agent: str | None, host: str | None
) -> list[tuple[Any, ...]]:
    """(agent, host, bucket, attempts, seconds) per bucket of a span of ``SPANS`` over ``bounds``
    (ascending): ``bucket`` is the index of the first bound at or above the span (``len(bounds)``
    above them all), ``seconds`` the spans' sum (a negative one counts 0). Attempts without the
    span (a worker not started yet) are left out."""
    expression, applies = SPANS[span]
    statement = (
        f"SELECT a.agent, a.host, {_bucket_case(expression, bounds)} AS bucket, count(*),"  # noqa: S608 - constant SQL
        f" sum(CASE WHEN {expression} < 0 THEN 0 ELSE {expression} END)"
        " FROM dispatch_attempts AS a JOIN messages AS m ON m.id = a.message_id"
        + _WHERE
        + f" AND {applies} AND {expression} IS NOT NULL GROUP BY a.agent, a.host, bucket"
    )
    return [tuple(row) for row in conn.execute(statement, {"agent": agent, "host": host})]


def messages_after(conn: Connection, after_id: int, agent: str | None) -> list[tuple[str, str | None, int, int]]:
    """(recipient, kind, messages, highest id) of the messages with an id above ``after_id``."""
    return [
        (row[0], row[1], row[2], row[3]) for row in conn.execute(_MESSAGES_AFTER, {"after": after_id, "agent": agent})
    ]


def spend_per_agent(conn: Connection, since: float, agent: str | None) -> dict[str, float]:
    """The cost of each agent's attempts started at or after ``since`` (agents with a cost only)."""
    return {row[0]: row[1] for row in conn.execute(_SPEND, {"since": since, "agent": agent}) if row[1] is not None}
