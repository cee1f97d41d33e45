"""``agent-bridge costs``: what the dispatched attempts cost, from the attempts table.

Each attempt counts once, in the group of its agent, its start's local day, its task's sender
or its conversation. Costs are split by where they came from: ``reported`` by the CLI itself
(Claude), ``estimated`` from the agent's ``prices``, and the attempts whose cost is unknown
(no price and none reported) are counted, never priced. The failure rate is the failed share of
the finished attempts (``FAILURE_OUTCOMES``; ``blocked`` is an answer, not a failure).
"""

from datetime import datetime
from typing import Any

from dispatcher.core import clock
from dispatcher.core.lifecycle import FAILURE_OUTCOMES
from dispatcher.ops.prune import parse_duration

GROUPINGS = ("agent", "day", "sender", "conversation")


def _key(row: dict[str, Any], by: str) -> str:
    if by == "day":
        return datetime.fromtimestamp(row["started_at"]).date().isoformat()
    if by == "conversation":
        return "-" if row["conversation_id"] is None else f"#{row['conversation_id']}"
    return str(row[by] if row[by] is not None else "-")


def _empty(key: str) -> dict[str, Any]:
    return {
        "key": key,
        "attempts": 0,
        "finished": 0,
        "failed": 0,
        "outcomes": {},
        "tokens": 0,
        "cost_reported_usd": 0.0,
        "cost_estimated_usd": 0.0,
        "cost_unknown_attempts": 0,
    }


def _add(group: dict[str, Any], row: dict[str, Any]) -> None:
    group["attempts"] += 1
    if row["state"] == "finished":
        group["finished"] += 1
        group["failed"] += row["outcome"] in FAILURE_OUTCOMES
        group["outcomes"][row["outcome"]] = group["outcomes"].get(row["outcome"], 0) + 1
    group["tokens"] += row["tokens"] or 0
    if row["cost_usd"] is None:
        group["cost_unknown_attempts"] += 1
    elif row["cost_source"] == "estimated":
        group["cost_estimated_usd"] += row["cost_usd"]
    else:
        group["cost_reported_usd"] += row["cost_usd"]


def _finish(group: dict[str, Any]) -> dict[str, Any]:
    reported, estimated = round(group["cost_reported_usd"], 6), round(group["cost_estimated_usd"], 6)
    return {
        **group,
        "cost_reported_usd": reported,
        "cost_estimated_usd": estimated,
        "cost_usd": round(reported + estimated, 6),
        "failure_rate": round(group["failed"] / group["finished"], 4) if group["finished"] else None,
    }


def summarise(rows: list[dict[str, Any]], by: str) -> dict[str, Any]:
    """The groups of ``rows`` (``store.spend.attempt_costs``) by ``by``, sorted by key, and their total (pure)."""
    groups: dict[str, dict[str, Any]] = {}
    total = _empty("total")
    for row in rows:
        key = _key(row, by)
        _add(groups.setdefault(key, _empty(key)), row)
        _add(total, row)
    return {"by": by, "groups": [_finish(groups[k]) for k in sorted(groups)], "total": _finish(total)}


def costs_report(conn, since: str, by: str, agent: str | None, now: float | None = None) -> dict[str, Any]:
    """The report for ``agent-bridge costs`` (``since``: a duration such as 7d, checked first)."""
    from dispatcher.store.spend import attempt_costs

    seconds = parse_duration(since, "--since", "nothing was read")
    now = clock.now() if now is None else now
    report = summarise(attempt_costs(conn, now - seconds, agent), by)
    return {**report, "since": since, "since_at": clock.iso(now - seconds), "agent": agent}


def _usd(group: dict[str, Any]) -> str:
    text = f"${group['cost_usd']:.4f}"
    if group["cost_estimated_usd"]:
        text += " (~est.)" if not group["cost_reported_usd"] else f" (~${group['cost_estimated_usd']:.4f} est.)"
    if group["cost_unknown_attempts"]:
        text += f" +{group['cost_unknown_attempts']} unknown"
    return text


def render(report: dict[str, Any]) -> str:
    """The report as text: one line per group, then the total; estimates marked ``est.``."""
    lines = [f"costs since {report['since']} ({report['since_at']}), by {report['by']}"]
    lines.append(f"{report['by']:<24} {'attempts':>8} {'failed':>8} {'tokens':>12}  cost")
    for group in [*report["groups"], report["total"]]:
        rate = "-" if group["failure_rate"] is None else f"{group['failure_rate']:.0%}"
        lines.append(f"{group['key'][:24]:<24} {group['attempts']:>8} {rate:>8} {group['tokens']:>12}  {_usd(group)}")
    return "\n".join(lines)
