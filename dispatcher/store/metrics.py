"""The rows the Prometheus figures are computed from (docs/metrics.md): ids, names, counts and
times only, never a message's text. ``agent`` and ``host`` narrow the figures to one agent's
(all agents: None) and to one host's attempts (all hosts: None; an attempt from before hosts were
recorded counts as every host's, as ``dispatch.reconcile`` treats it).

``dispatch.metrics`` turns them into metric families; the rules (buckets, labels, who exports
what) are ``core.metric_rules``.
"""

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from dispatcher.core.metric_rules import HISTOGRAMS, counted
from dispatcher.store.busy import BUSY_TIMEOUT_MS, COUNT_WAIT_MS
from dispatcher.store.types import Connection

_WHERE = """
WHERE (CAST(:agent AS TEXT) IS NULL OR a.agent = :agent)
  AND (CAST(:host AS TEXT) IS NULL OR a.host = :host OR a.host IS NULL)
"""
# (The CASTs: PostgreSQL cannot tell the type of a parameter that only meets IS NULL.)

# The totals prune folded in (migration 23), narrowed as ``_WHERE`` narrows the rows: '' is no
# value there, and becomes NULL again here.
_TOTALS = """
SELECT t.agent, NULLIF(t.host, '') AS host, NULLIF(t.label, '') AS label, NULLIF(t.detail, '') AS detail,
       t.bucket, t.count, t.seconds
FROM metric_totals AS t
WHERE t.metric = :metric AND (CAST(:agent AS TEXT) IS NULL OR t.agent = :agent)
  AND (CAST(:host AS TEXT) IS NULL OR t.host = :host OR t.host = '')
"""

_ATTEMPT_COUNTS = (
    "SELECT a.agent, a.host, a.state, a.outcome, a.error_kind, count(*) FROM dispatch_attempts AS a"  # noqa: S608 - constant SQL
    + _WHERE
    + "GROUP BY a.agent, a.host, a.state, a.outcome, a.error_kind"
    + " UNION ALL SELECT f.agent, f.host, 'finished', f.label, f.detail, f.count FROM ("
    + _TOTALS
    + ") AS f"
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


def _span_rows(span: str, bounds: Sequence[float], where: str) -> str:
    """(agent, host, bucket, attempts, seconds) of the attempts ``where`` admits, per bucket of a span."""
    expression, applies = SPANS[span]
    return (
        f"SELECT a.agent, a.host, {_bucket_case(expression, bounds)} AS bucket, count(*) AS n,"  # noqa: S608 - constant SQL
        f" sum(CASE WHEN {expression} < 0 THEN 0 ELSE {expression} END) AS seconds"
        " FROM dispatch_attempts AS a JOIN messages AS m ON m.id = a.message_id"
        + where
        + f" AND {applies} AND {expression} IS NOT NULL GROUP BY a.agent, a.host, bucket"
    )


# One row per agent and budget day held (``label``: the day's start, epoch seconds).
BUDGET_HOLD_DAYS = "budget_hold_days"
_RECORD_BUDGET_HOLD = """
INSERT INTO metric_totals (metric, agent, host, label, detail, bucket, count, seconds)
VALUES (?, ?, '', ?, '', -1, 1, 0) ON CONFLICT DO NOTHING
"""

# Ids only grow and are never reused (migration 9; PostgreSQL: an identity), and every write takes
# the store's one write lock, so rows commit in id order: the rows above the highest id counted
# are the ones sent since.
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
    """(agent, host, state, outcome, error_kind, attempts) for each such group of attempts, the
    store's rows and then the totals of those prune deleted (a group may come twice: add them up)."""
    return [tuple(row) for row in conn.execute(_ATTEMPT_COUNTS, {"agent": agent, "host": host, "metric": "attempts"})]


def span_buckets(
    conn: Connection, span: str, bounds: Sequence[float], agent: str | None, host: str | None
) -> list[tuple[Any, ...]]:
    """(agent, host, bucket, attempts, seconds) per bucket of a span of ``SPANS`` over ``bounds``
    (ascending): ``bucket`` is the index of the first bound at or above the span (``len(bounds)``
    above them all), ``seconds`` the spans' sum (a negative one counts 0). Attempts without the
    span (a worker not started yet) are left out. The store's rows, then the totals of those prune
    deleted (a bucket may come twice: add them up)."""
    parameters = {"agent": agent, "host": host, "metric": span}
    rows = [tuple(row) for row in conn.execute(_span_rows(span, bounds, _WHERE), parameters)]
    return rows + [(r[0], r[1], r[4], r[5], r[6]) for r in conn.execute(_TOTALS, parameters)]


def messages_after(conn: Connection, after_id: int, agent: str | None) -> list[tuple[str, str | None, int, int]]:
    """(recipient, kind, messages, highest id) of the messages the store holds with an id above ``after_id``."""
    return [
        (row[0], row[1], row[2], row[3]) for row in conn.execute(_MESSAGES_AFTER, {"after": after_id, "agent": agent})
    ]


def messages_folded(conn: Connection, agent: str | None) -> dict[tuple[str, str | None], int]:
    """(recipient, kind): the messages prune deleted, folded into the totals."""
    parameters = {"agent": agent, "host": None, "metric": "messages_sent"}
    return {(row[0], row[2]): row[5] for row in conn.execute(_TOTALS, parameters)}


@contextmanager
def one_snapshot(conn: Connection) -> Iterator[None]:
    """Every read inside sees the store at one moment (SQLite's read transaction; PostgreSQL's
    REPEATABLE READ): a prune's batch, which moves figures from rows to totals, is all in it or not."""
    conn.execute("BEGIN")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def budget_hold_days(conn: Connection, agent: str | None) -> dict[str, int]:
    """How many budget days each agent's new tasks were held by its daily budget (``record_budget_hold``)."""
    counts: dict[str, int] = {}
    for row in conn.execute(_TOTALS, {"agent": agent, "host": None, "metric": BUDGET_HOLD_DAYS}):
        counts[row[0]] = counts.get(row[0], 0) + row[5]
    return counts


def record_budget_hold(conn: Connection, agent: str, day: float) -> None:
    """The agent's daily budget holds its new tasks on the budget day starting at ``day``: one row
    per agent and day, however often it is seen (a listener restarted the same day)."""
    conn.execute(_RECORD_BUDGET_HOLD, (BUDGET_HOLD_DAYS, agent, f"{day:.0f}"))


# The counters written where the thing happens (``metric_rules.COUNTERS``): one row per agent,
# metric, label and detail, its count one more at each event (not a row per event), host ''.
# Rows of ``metric_totals`` rather than a table of their own: the same shape (names and a count),
# read by the same ``_TOTALS``, and prune, which deletes messages and attempts only, never touches
# them. On PostgreSQL an agent's role has no right to write them: it calls ``bridge_count``
# (migration 24), which adds exactly one, to its own agent's row, of these metrics only.
_COUNT = """
INSERT INTO metric_totals (metric, agent, host, label, detail, bucket, count, seconds)
VALUES (?, ?, '', ?, ?, -1, 1, 0)
ON CONFLICT (metric, agent, host, label, detail, bucket) DO UPDATE SET count = metric_totals.count + 1
"""


def count_event(conn: Connection, metric: str, agent: str, label: str, detail: str = "") -> None:
    """One more ``metric`` (``label``, ``detail``) for ``agent``, in a statement of its own
    (autocommit: never inside another write's transaction), waiting at most ``COUNT_WAIT_MS`` for
    the lock; a store error is the caller's to drop (``bridge.counters``)."""
    if not counted(metric, label, detail):
        raise ValueError(f"not a counted {metric!r}: {label!r}, {detail!r}")
    if not isinstance(conn, sqlite3.Connection):
        conn.execute("SELECT bridge_count(?, ?, ?, ?)", (agent, metric, label, detail))  # its own lock timeout
        return
    conn.execute(f"PRAGMA busy_timeout = {COUNT_WAIT_MS}")
    try:
        conn.execute(_COUNT, (metric, agent, label, detail))
    finally:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")


def counter_totals(conn: Connection, metric: str, agent: str | None) -> dict[tuple[str, str, str], int]:
    """(agent, label, detail): the running count of a counter of ``count_event`` (no value: '')."""
    rows = conn.execute(_TOTALS, {"agent": agent, "host": None, "metric": metric})
    return {(row[0], row[2] or "", row[3] or ""): row[5] for row in rows}


def spend_per_agent(conn: Connection, since: float, agent: str | None) -> dict[str, float]:
    """The cost of each agent's attempts started at or after ``since`` (agents with a cost only)."""
    return {row[0]: row[1] for row in conn.execute(_SPEND, {"since": since, "agent": agent}) if row[1] is not None}


# -- prune's fold ----------------------------------------------------------------------------
_ADD = """
INSERT INTO metric_totals (metric, agent, host, label, detail, bucket, count, seconds) {rows}
ON CONFLICT (metric, agent, host, label, detail, bucket)
DO UPDATE SET count = metric_totals.count + excluded.count, seconds = metric_totals.seconds + excluded.seconds
"""
_GOING = " WHERE a.message_id IN (SELECT value FROM json_each(?))"
_FOLD_MESSAGES = _ADD.format(
    rows="SELECT 'messages_sent', m.recipient, '', COALESCE(m.kind, ''), '', -1, count(*), 0 FROM messages AS m"
    " WHERE m.id IN (SELECT value FROM json_each(?)) GROUP BY m.recipient, COALESCE(m.kind, '')"
)
_FOLD_ATTEMPTS = _ADD.format(
    rows="SELECT 'attempts', a.agent, COALESCE(a.host, ''), COALESCE(a.outcome, ''), COALESCE(a.error_kind, ''),"  # noqa: S608 - constant SQL
    " -1, count(*), 0 FROM dispatch_attempts AS a" + _GOING + " AND a.state = 'finished'"
    " GROUP BY a.agent, COALESCE(a.host, ''), COALESCE(a.outcome, ''), COALESCE(a.error_kind, '')"
)
_FOLD_SPANS = {
    span: _ADD.format(
        rows=f"SELECT '{span}', s.agent, COALESCE(s.host, ''), '', '', s.bucket, s.n, s.seconds"  # noqa: S608 - constant SQL
        f" FROM ({_span_rows(span, bounds, _GOING)}) AS s WHERE TRUE"
    )
    for span, bounds in HISTOGRAMS.items()
}


def fold_into_totals(conn: Connection, ids_json: str) -> None:
    """Add the figures of the messages ``ids_json`` names (a JSON list), and of their attempts, to
    ``metric_totals``: prune calls it in the transaction that deletes them, just before, so that
    every figure is the same after the deletion as before it (the histograms' buckets are
    ``metric_rules.HISTOGRAMS``'s)."""
    for statement in (_FOLD_MESSAGES, _FOLD_ATTEMPTS, *_FOLD_SPANS.values()):
        conn.execute(statement, (ids_json,))
