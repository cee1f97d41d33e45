"""Doctor's checks of what is stuck: attempts whose supervisor is gone, conversations waiting for a
person, and unread messages too old to be dispatched."""

from dispatcher.core import clock
from dispatcher.core.findings import Finding, finding
from dispatcher.ops.doctor.check import STORE, check
from dispatcher.ops.doctor.context import Context
from dispatcher.store import views
from dispatcher.store.attempts import unsettled_attempts


@check(STORE)
def stale_attempt(ctx: Context) -> list[Finding]:
    """Is an attempt unfinished while its supervisor is gone?"""
    from dispatcher.core.processes import is_same_process

    return [
        finding(
            "stale_attempt",
            f"the attempt at message #{row['message_id']} for {row['agent']} is "
            f"unfinished and its supervisor (pid {row['supervisor_pid']}) is gone",
            row["agent"],
        )
        for row in unsettled_attempts(ctx.store())
        if not is_same_process(row["supervisor_pid"], row["supervisor_start_time"])
    ]


def _conversations(code: str, state: str):  # one check per state that waits for a person
    def run(ctx: Context) -> list[Finding]:
        if not (ids := views.conversations_in_state(ctx.store(), state)):
            return []
        shown = ", ".join(f"#{i}" for i in ids[:10]) + (" …" if len(ids) > 10 else "")
        return [finding(code, f"{len(ids)} conversation(s) {state}: {shown}")]

    run.__name__ = run.__qualname__ = code
    run.__doc__ = f"Is a conversation {state}, waiting for a person?"
    return check(STORE)(run)


conversation_needs_human = _conversations("conversation_needs_human", "needs_human")
conversation_blocked = _conversations("conversation_blocked", "blocked")


def _unread(ctx: Context) -> list[tuple[str, int, float, int]]:
    """Each declared agent with unread messages: how many, the oldest's age, and dispatch_max_age_seconds."""
    max_age = ctx.config.dispatch_max_age_seconds if ctx.config is not None else 86400
    unread, now = views.unread_by_recipient(ctx.store()), clock.now()
    agents = sorted(ctx.config.agents) if ctx.config is not None else []
    return [(agent, unread[agent][0], now - unread[agent][1], max_age) for agent in agents if agent in unread]


@check(STORE, "unread")
def unread(ctx: Context) -> list[Finding]:
    """Who has unread messages young enough to be dispatched?"""
    said = "{agent} has {count} unread message(s), the oldest {age} old"
    return [
        finding("unread", said.format(agent=agent, count=count, age=_age(age)), agent)
        for agent, count, age, max_age in _unread(ctx)
        if age <= max_age
    ]


@check(STORE, "unread")
def unread_old(ctx: Context) -> list[Finding]:
    """Who has unread messages past dispatch_max_age_seconds (never dispatched)?"""
    return [
        finding(
            "unread_old",
            f"{agent} has {count} unread message(s), the oldest "
            f"{_age(age)} old (past dispatch_max_age_seconds={max_age}: never dispatched)",
            agent,
        )
        for agent, count, age, max_age in _unread(ctx)
        if age > max_age
    ]


@check(STORE)
def nothing_stuck(ctx: Context) -> list[Finding]:
    """No stale attempt and no conversation waiting for a person?"""
    if ctx.reported("stale_attempt", "conversation_needs_human", "conversation_blocked"):
        return []
    return [finding("nothing_stuck", "no stale attempt, no conversation waiting for a human")]


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"
