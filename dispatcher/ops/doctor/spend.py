"""Doctor's check of spend: what each agent's cost is known from, and the daily budgets reached."""

from typing import TYPE_CHECKING

from dispatcher.clis import registry
from dispatcher.core import clock
from dispatcher.core.findings import CODES, OK, WARN, Finding, finding
from dispatcher.ops.doctor.context import Context, agent_clis
from dispatcher.store import Connection

if TYPE_CHECKING:
    from dispatcher.core.config import BridgeConfig


def check_spend(ctx: Context) -> list[Finding]:
    from dispatcher.core.spend import knows_cost

    config, found = ctx.valid_config(), []
    for agent, cli in agent_clis(ctx):
        entry = config.agents[agent]
        reports = cli is not None and registry.BY_NAME[cli].reports_cost
        if knows_cost(reports, entry):
            source = "its CLI reports it" if reports else "estimated from its prices"
            found.append(finding("cost_known", f"cost: {source}", agent))
            continue
        capped = entry.max_cost_usd_per_task is not None or entry.max_cost_usd_per_day is not None
        found.append(
            finding(
                "cost_unknown",
                f"cost: unknown ({cli or 'its CLI'} reports tokens, no price, and the agent has no prices)"
                + ("; its cost caps cannot apply, only token caps do" if capped else ""),
                agent,
                level=WARN if capped else OK,
            )
        )
    if ctx.conn is not None and ctx.schema_current:
        found += _budgets_reached(ctx.conn, config)
    return found


def _budgets_reached(conn: Connection, config: "BridgeConfig") -> list[Finding]:
    from dispatcher.dispatch.control import daily_budget

    found = []
    for agent in sorted(config.agents):
        budget = daily_budget(conn, agent, config, clock.now())
        if budget is not None and budget["reached"] is not None:
            found.append(
                finding(
                    "budget_reached",
                    f"{budget['reached']} reached today: {CODES['budget_reached'].said(zone=config.budget_time_zone)}; "
                    "its listener holds new tasks (held_budget) until then",
                    agent,
                    cap=budget["reached"],
                )
            )
    return found
