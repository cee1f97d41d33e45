"""What an attempt spent, and whether it passed a cap: pure rules over the ledger's numbers.

A CLI that reports its own cost (Claude) is believed; for the others, the agent's ``prices``
block turns the tokens they report into an estimate, marked as such (``cost_source``). An
agent with neither has an unknown cost: no price is ever guessed. Tokens count all four
kinds the ledger keeps (input, output, cache read, cache write).
"""

from collections.abc import Mapping
from typing import Any, NamedTuple, Protocol


class Rates(Protocol):
    """An agent's ``prices``: ``Prices``, or the supervisor's plain ``PricesView``."""

    @property
    def input(self) -> float: ...
    @property
    def output(self) -> float: ...
    @property
    def cache_read(self) -> float: ...
    @property
    def cache_write(self) -> float: ...


class TaskCaps(Protocol):
    """What the per-task rules read of an agent: ``AgentConfig``, or the supervisor's ``AgentView``."""

    @property
    def prices(self) -> Rates | None: ...
    @property
    def max_cost_usd_per_task(self) -> float | None: ...
    @property
    def max_tokens_per_task(self) -> int | None: ...


class DailyCaps(Protocol):
    """An agent's daily budgets (``AgentConfig`` has them; the status line reads them from raw JSON)."""

    @property
    def max_cost_usd_per_day(self) -> float | None: ...
    @property
    def max_tokens_per_day(self) -> int | None: ...


TOKEN_KEYS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def total_tokens(usage: Mapping[str, Any]) -> int | None:
    """The tokens of all kinds ``usage`` reports; None when it reports none."""
    known = [n for n in (_count(usage.get(k)) for k in TOKEN_KEYS) if n is not None]
    return sum(known) if known else None


def estimate_cost(usage: Mapping[str, Any], prices: Rates | None) -> float | None:
    """The cost of ``usage``'s tokens at ``prices`` (per million); None without prices or tokens."""
    if prices is None or total_tokens(usage) is None:
        return None
    rates = (prices.input, prices.output, prices.cache_read, prices.cache_write)  # in TOKEN_KEYS' order
    dollars = sum((_count(usage.get(k)) or 0) * rate for k, rate in zip(TOKEN_KEYS, rates, strict=True)) / 1_000_000
    return round(dollars, 6)


def priced(usage: Mapping[str, Any], prices: Rates | None) -> tuple[float | None, str | None]:
    """(cost, source): the CLI's own ``cost_usd`` (``reported``) wins; else the estimate from
    ``prices`` (``estimated``); else (None, None)."""
    reported = usage.get("cost_usd")
    if isinstance(reported, int | float) and not isinstance(reported, bool) and reported >= 0:
        return float(reported), "reported"
    estimate = estimate_cost(usage, prices)
    return (estimate, "estimated") if estimate is not None else (None, None)


def knows_cost(cli_reports_cost: bool, agent: TaskCaps) -> bool:
    """Whether an attempt of this agent can have a cost: its CLI reports one, or it has prices."""
    return cli_reports_cost or agent.prices is not None


def cap_passed(usage: Mapping[str, Any], agent: TaskCaps) -> str | None:
    """The per-task cap ``usage`` has passed (``max_tokens_per_task``, then
    ``max_cost_usd_per_task`` on the cost as ``priced`` sees it), or None."""
    tokens = total_tokens(usage)
    if agent.max_tokens_per_task is not None and tokens is not None and tokens > agent.max_tokens_per_task:
        return "max_tokens_per_task"
    cost, _ = priced(usage, agent.prices)
    if agent.max_cost_usd_per_task is not None and cost is not None and cost > agent.max_cost_usd_per_task:
        return "max_cost_usd_per_task"
    return None


def cap_to_stop_for(usage: Mapping[str, Any], agent: TaskCaps) -> str | None:
    """The cap a *running* worker is ended for: ``max_tokens_per_task`` always, the cost cap only
    on our own estimate. A CLI that reports its own cost (Claude) enforces the cost cap itself
    (``--max-budget-usd``, between turns), so its work is judged by the store's evidence."""
    cap = cap_passed(usage, agent)
    if cap == "max_cost_usd_per_task" and priced(usage, agent.prices)[1] != "estimated":
        return None
    return cap


def daily_cap_reached(cost_usd: float | None, tokens: int | None, agent: DailyCaps) -> str | None:
    """The daily cap today's totals reached (``max_cost_usd_per_day``, ``max_tokens_per_day``), or None."""
    if agent.max_cost_usd_per_day is not None and cost_usd is not None and cost_usd >= agent.max_cost_usd_per_day:
        return "max_cost_usd_per_day"
    if agent.max_tokens_per_day is not None and tokens is not None and tokens >= agent.max_tokens_per_day:
        return "max_tokens_per_day"
    return None


class DailyAndTaskCaps(DailyCaps, Protocol):
    """The daily budgets with the per-task caps that bound what one running worker can add."""

    @property
    def max_cost_usd_per_task(self) -> float | None: ...
    @property
    def max_tokens_per_task(self) -> int | None: ...


class BudgetHold(NamedTuple):
    cap: str  # max_cost_usd_per_day or max_tokens_per_day
    while_running: bool  # held until one of the agent's running workers ends, not until midnight


def daily_budget_hold(
    cost_usd: float | None, tokens: int | None, running: int, agent: DailyAndTaskCaps
) -> BudgetHold | None:
    """Why a new worker of ``agent`` may not start against its daily budgets, or None.

    ``cost_usd`` and ``tokens``: what today's attempts have recorded; ``running``: how many of its
    attempts run now (their spend is recorded only when they end). Each running worker reserves
    its per-task cap. Holds until midnight when today's spend reached a daily cap; holds
    ``while_running`` when the running workers' reservations could reach one, or when a running
    worker has no per-task cap of that kind to bound it. So a
    worker starts only while spend plus reservations stays below each daily cap: workers started
    together overrun a daily budget by at most one task's spend, as one worker alone can."""
    if (reached := daily_cap_reached(cost_usd, tokens, agent)) is not None:
        return BudgetHold(reached, while_running=False)
    if running == 0:
        return None
    for daily, spent, per_task, cap in (
        (agent.max_cost_usd_per_day, cost_usd, agent.max_cost_usd_per_task, "max_cost_usd_per_day"),
        (agent.max_tokens_per_day, tokens, agent.max_tokens_per_task, "max_tokens_per_day"),
    ):
        if daily is not None and (per_task is None or (spent or 0) + running * per_task >= daily):
            return BudgetHold(cap, while_running=True)
    return None


def has_daily_cap(agent: DailyCaps) -> bool:
    return agent.max_cost_usd_per_day is not None or agent.max_tokens_per_day is not None
