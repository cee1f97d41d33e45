"""Doctor's check of what is stuck: attempts whose supervisor is gone, conversations waiting for a
person, and unread messages too old to be dispatched."""

from dispatcher.core import clock
from dispatcher.core.findings import ERROR, Finding, finding
from dispatcher.ops.doctor.context import Context
from dispatcher.store import views
from dispatcher.store.attempts import unsettled_attempts


def check_stale(ctx: Context) -> list[Finding]:
    from dispatcher.core.processes import is_same_process

    conn, found, now = ctx.store(), [], clock.now()
    agents = sorted(ctx.config.agents) if ctx.config is not None else []
    for row in unsettled_attempts(conn):
        if not is_same_process(row["supervisor_pid"], row["supervisor_start_time"]):
            agent = row["agent"]
            found.append(
                finding(
                    "stale_attempt",
                    f"the attempt at message #{row['message_id']} for {agent} is "
                    f"unfinished and its supervisor (pid {row['supervisor_pid']}) is gone",
                    agent,
                )
            )
    for state, code in (("needs_human", "conversation_needs_human"), ("blocked", "conversation_blocked")):
        ids = views.conversations_in_state(conn, state)
        if ids:
            shown = ", ".join(f"#{i}" for i in ids[:10]) + (" …" if len(ids) > 10 else "")
            found.append(finding(code, f"{len(ids)} conversation(s) {state}: {shown}"))
    max_age = ctx.config.dispatch_max_age_seconds if ctx.config is not None else 86400
    unread = views.unread_by_recipient(conn)
    for agent in agents:
        if agent not in unread:
            continue
        count, oldest = unread[agent]
        age = now - oldest
        if age > max_age:
            found.append(
                finding(
                    "unread_old",
                    f"{agent} has {count} unread message(s), the oldest "
                    f"{_age(age)} old (past dispatch_max_age_seconds={max_age}: never dispatched)",
                    agent,
                )
            )
        else:
            found.append(finding("unread", f"{agent} has {count} unread message(s), the oldest {_age(age)} old", agent))
    if not any(f.level == ERROR for f in found):
        found.append(finding("nothing_stuck", "no stale attempt, no conversation waiting for a human"))
    return found


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"
