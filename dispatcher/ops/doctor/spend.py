"""Doctor's checks of spend: what each agent's cost is known from, and the daily budgets reached."""

from dispatcher.clis import registry
from dispatcher.core import clock
from dispatcher.core.findings import CODES, OK, WARN, Finding, finding
from dispatcher.ops.doctor.check import CONFIG, check
from dispatcher.ops.doctor.context import Context, agent_clis


def _costs(ctx: Context) -> list[tuple[str, str | None, bool]]:
    """Each agent, its CLI, and whether its cost is known (its CLI reports it, or its prices estimate it)."""
    from dispatcher.core.spend import knows_cost

    config = ctx.valid_config()
    return [(agent, cli, knows_cost(_reports(cli), config.agents[agent])) for agent, cli in agent_clis(ctx)]


def _reports(cli: str | None) -> bool:
    """Whether the CLI's own result says what a run cost (its module's ``reports_cost``)."""
    return cli is not None and registry.BY_NAME[cli].reports_cost


@check(CONFIG, "cost")
def cost_known(ctx: Context) -> list[Finding]:
    """Whose cost is known, and from what?"""
    return [
        finding("cost_known", f"cost: {'its CLI reports it' if _reports(cli) else 'estimated from its prices'}", agent)
        for agent, cli, known in _costs(ctx)
        if known
    ]


@check(CONFIG, "cost")
def cost_unknown(ctx: Context) -> list[Finding]:
    """Whose cost is unknown (a warning when one of its cost caps cannot apply then)?"""
    config, found = ctx.valid_config(), []
    for agent, cli, known in _costs(ctx):
        if known:
            continue
        entry = config.agents[agent]
        capped = entry.max_cost_usd_per_task is not None or entry.max_cost_usd_per_day is not None
        said = f"cost: unknown ({cli or 'its CLI'} reports tokens, no price, and the agent has no prices)"
        said += "; its cost caps cannot apply, only token caps do" if capped else ""
        found.append(finding("cost_unknown", said, agent, level=WARN if capped else OK))
    return found


@check(CONFIG)
def budget_reached(ctx: Context) -> list[Finding]:
    """Has an agent reached a daily budget today (its listener holds new tasks)?"""
    from dispatcher.dispatch.control import daily_budget

    if ctx.conn is None or not ctx.schema_current:
        return []
    config, found = ctx.valid_config(), []
    for agent in sorted(config.agents):
        budget = daily_budget(ctx.conn, agent, config, clock.now())
        if budget is not None and budget["reached"] is not None:
            said = CODES["budget_reached"].said(zone=config.budget_time_zone)
            found.append(
                finding(
                    "budget_reached",
                    f"{budget['reached']} reached today: {said}; its listener holds new tasks (held_budget) until then",
                    agent,
                    cap=budget["reached"],
                )
            )
    return found
