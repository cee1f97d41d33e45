"""What agents spent, read from the attempts' ledger columns: today's totals for the daily
budgets (``dispatch.queue``) and the rows ``agent-bridge costs`` groups."""

from typing import Any

from dispatcher.store.types import Connection

_TOKENS = (
    "coalesce(a.input_tokens, 0) + coalesce(a.output_tokens, 0)"
    " + coalesce(a.cache_read_tokens, 0) + coalesce(a.cache_write_tokens, 0)"
)
_KNOWN = (
    "a.input_tokens IS NOT NULL OR a.output_tokens IS NOT NULL"
    " OR a.cache_read_tokens IS NOT NULL OR a.cache_write_tokens IS NOT NULL"
)

_COSTS = f"""
SELECT a.message_id, a.agent, a.started_at, a.state, a.outcome, a.cost_usd, a.cost_source,
       CASE WHEN {_KNOWN} THEN {_TOKENS} END AS tokens, m.sender, m.conversation_id
FROM dispatch_attempts AS a LEFT JOIN messages AS m ON m.id = a.message_id
WHERE a.started_at >= :since AND (CAST(:agent AS TEXT) IS NULL OR a.agent = :agent)
ORDER BY a.started_at, a.message_id
"""  # noqa: S608 - constant SQL fragments; every value is a bound parameter
# (The CAST: PostgreSQL cannot tell the type of a parameter that only meets IS NULL, and refused
# the whole query with AmbiguousParameter.)


def spend_since(conn: Connection, agent: str, since: float) -> tuple[float | None, int | None]:
    """(cost, tokens) of ``agent``'s attempts started at or after ``since`` (None: none recorded)."""
    row = conn.execute(
        f"SELECT sum(a.cost_usd), sum(CASE WHEN {_KNOWN} THEN {_TOKENS} END)"  # noqa: S608 - constant SQL fragments
        " FROM dispatch_attempts AS a WHERE a.agent = ? AND a.started_at >= ?",
        (agent, since),
    ).fetchone()
    return row[0], row[1]


def attempt_costs(conn: Connection, since: float, agent: str | None = None) -> list[dict[str, Any]]:
    """One dict per attempt started at or after ``since`` (of ``agent``): who, when, for whom,
    its outcome, cost (and where it came from) and tokens, oldest first."""
    cursor = conn.execute(_COSTS, {"since": since, "agent": agent})
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor]
