"""The rows the Prometheus figures are computed from (docs/metrics.md): ids, names, counts and
times only, never a message's text. ``agent`` and ``host`` narrow the figures to one agent's
(all agents: None) and to one host's attempts (all hosts: None; an attempt from before hosts were
recorded counts as every host's, as ``dispatch.reconcile`` treats it).

``dispatch.metrics`` turns them into metric families; the rules (buckets, labels, who exports
what) are ``core.metric_rules``.
"""

from typing import Any

from dispatcher.store.types import Connection

_ATTEMPTS = """
SELECT a.agent, a.host, a.state, a.outcome, a.error_kind,
       a.started_at - m.created_at AS queue_wait,
       a.finished_at - a.started_at AS duration,
       a.worker_started_at - m.created_at AS to_worker
FROM dispatch_attempts AS a JOIN messages AS m ON m.id = a.message_id
WHERE (CAST(:agent AS TEXT) IS NULL OR a.agent = :agent)
  AND (CAST(:host AS TEXT) IS NULL OR a.host = :host OR a.host IS NULL)
"""
# (The CASTs: PostgreSQL cannot tell the type of a parameter that only meets IS NULL.)

_MESSAGES = """
SELECT m.recipient, m.kind, count(*) FROM messages AS m
WHERE (CAST(:agent AS TEXT) IS NULL OR m.recipient = :agent)
GROUP BY m.recipient, m.kind
"""

# Unread tasks (and review turns' results) no attempt has taken yet: the dispatch scan's
# pre-filter (``store.dispatchable``) without its age bound, counted per recipient.
_PENDING = """
SELECT m.recipient, count(*) FROM messages AS m
WHERE (CAST(:agent AS TEXT) IS NULL OR m.recipient = :agent)
  AND m.acknowledged_at IS NULL AND m.kind IN ('task', 'result') AND m.origin = 'agent'
  AND NOT EXISTS (SELECT 1 FROM dispatch_attempts AS a WHERE a.message_id = m.id)
GROUP BY m.recipient
"""

_SPEND = """
SELECT a.agent, sum(a.cost_usd) FROM dispatch_attempts AS a
WHERE a.started_at >= :since AND (CAST(:agent AS TEXT) IS NULL OR a.agent = :agent)
GROUP BY a.agent
"""

_LISTENERS = """
SELECT l.agent, l.host, l.renewed_at FROM listeners AS l
WHERE (CAST(:agent AS TEXT) IS NULL OR l.agent = :agent)
"""


def attempt_rows(conn: Connection, agent: str | None, host: str | None) -> list[tuple[Any, ...]]:
    """(agent, host, state, outcome, error_kind, queue_wait, duration, to_worker) per attempt:
    the waits and the duration in seconds, None where a time is not recorded yet."""
    return [tuple(row) for row in conn.execute(_ATTEMPTS, {"agent": agent, "host": host})]


def message_counts(conn: Connection, agent: str | None) -> list[tuple[str, str | None, int]]:
    """(recipient, kind, messages) for every message in the store."""
    return [(row[0], row[1], row[2]) for row in conn.execute(_MESSAGES, {"agent": agent})]


def pending_counts(conn: Connection, agent: str | None) -> dict[str, int]:
    """Unread tasks without an attempt, per recipient."""
    return {row[0]: row[1] for row in conn.execute(_PENDING, {"agent": agent})}


def spend_per_agent(conn: Connection, since: float, agent: str | None) -> dict[str, float]:
    """The cost of each agent's attempts started at or after ``since`` (agents with a cost only)."""
    return {row[0]: row[1] for row in conn.execute(_SPEND, {"since": since, "agent": agent}) if row[1] is not None}


def listener_rows(conn: Connection, agent: str | None) -> list[tuple[str, str | None, float | None]]:
    """(agent, host, renewed_at) of each listener row (the agent's lease)."""
    return [(row[0], row[1], row[2]) for row in conn.execute(_LISTENERS, {"agent": agent})]
