"""The dispatch set, defined once: ``dispatch_refusal`` over the facts of one message.

A message wakes a worker of its recipient when it is a ``task`` (standalone, or the
in-flight task of an active conversation) or a ``result`` that is the in-flight message
of an active conversation going back to its initiator (the review turn). Notices and
plain messages never do. It must also be never attempted, unacknowledged and not
actively claimed, not answered already by a result from its recipient (a session that
answered without acknowledging: a worker would be credited with that answer), and its
recipient declared. Automatic dispatch (the listener,
``recover --dispatch``) also needs the recipient's ``auto`` on, the message younger
than ``dispatch_max_age_seconds``, and, while the recipient has a live, wakeable
interactive session (``presence``), the message older than the agent's
``interactive_grace_seconds``: the session gets the first chance to claim it; and the
recipient below its daily budgets (``max_cost_usd_per_day``, ``max_tokens_per_day``, over
the attempts started since local midnight), else ``held_budget`` until the next midnight, and,
while some of its workers run, below them with each running worker's per-task cap reserved
(``spend.daily_budget_hold``), else ``held_budget_running`` until one ends. A
manual ``agent-bridge dispatch ID`` skips those four tests and nothing else.

Everything that decides goes through ``dispatch_refusal``: the listener's scan
(``next_dispatchable``), the barrier (``attempts.begin_attempt``), the backlog report
(``classify``, for ``pending`` and ``recover``). SQL only pre-narrows by conditions
every dispatchable message meets (recipient, unacknowledged, kind, never attempted,
and for a scan, optionally, the age bound): ``store.dispatchable``, which a test checks
against this rule. Change both together.
"""

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from dispatcher.bridge.conversations import accepts_messages, effective_state
from dispatcher.bridge.presence import has_wakeable_session
from dispatcher.core.config_view import DispatchConfig, budget_day_end, budget_day_start
from dispatcher.core.spend import BudgetHold, daily_budget_hold, has_daily_cap
from dispatcher.store import Connection, dispatchable
from dispatcher.store.attempts import running_count
from dispatcher.store.claims import claim_is_active
from dispatcher.store.spend import spend_since


@dataclass(frozen=True)
class Candidate:
    """The facts of one message that decide whether it wakes a worker."""

    message_id: int
    sender: str
    recipient: str
    kind: str | None
    created_at: float
    acknowledged: bool
    claim_active: bool
    attempted: bool
    conversation_id: int | None
    conversation_state: str | None  # as the next touch sees it (expiry applied)
    conversation_initiator: str | None
    in_flight: bool  # the conversation's in-flight message; True when standalone
    # The recipient has a live interactive session with a wake path (presence.has_wakeable_session).
    interactive_session: bool = False
    # A result from its recipient answers it already (a session answered without acknowledging).
    answered: bool = False
    # The daily cap its recipient's attempts since local midnight reached, or that its running
    # workers' reservations could reach (spend.daily_budget_hold), or None.
    daily_cap: str | None = None
    # daily_cap holds it only while its recipient's workers run (their reservations), not until midnight.
    budget_running: bool = False


def dispatch_refusal(facts: Candidate, now: float, config: DispatchConfig, manual: bool) -> str | None:
    """None when the message may be dispatched now; else the refusal code (first reason only)."""
    agent = config.agents.get(facts.recipient)
    if agent is None:
        return "unknown_agent"
    if facts.attempted:
        return "already_attempted"
    in_conversation = facts.conversation_id is not None
    review = facts.kind == "result" and in_conversation and facts.conversation_initiator == facts.recipient
    if facts.kind != "task" and not review:
        return "not_dispatchable"
    if facts.acknowledged:
        return "already_acknowledged"
    if facts.claim_active:
        return "claimed_by_other"
    if in_conversation and not accepts_messages(facts.conversation_state):
        return "conversation_not_active"
    if not facts.in_flight:
        return "not_in_turn"
    if facts.answered:
        return "already_answered"
    if manual:
        return None
    if not agent.auto:
        return "auto_off"
    if facts.created_at < now - config.dispatch_max_age_seconds:
        return "stale"
    if facts.interactive_session and now < held_until(facts, config):
        return "held_interactive"
    if facts.daily_cap is not None:
        return "held_budget_running" if facts.budget_running else "held_budget"
    return None


def held_until(facts: Candidate, config: DispatchConfig) -> float:
    """When the recipient's interactive session's first chance at the message ends."""
    agent = config.agents.get(facts.recipient)
    return facts.created_at + (agent.interactive_grace_seconds if agent is not None else 0)


def refusal_text(code: str, facts: Candidate, config: DispatchConfig) -> str:
    """What was wrong and what to do, for a refusal code of ``dispatch_refusal``."""
    mid, agent = facts.message_id, facts.recipient
    by_hand = f"`agent-bridge dispatch {mid}` dispatches it anyway (an explicit human decision)."
    return {
        "unknown_agent": f"message #{mid} is for {agent}, which config.json does not declare; declare it first.",
        "already_attempted": f"message #{mid} was already attempted; attempts are never repeated.",
        "not_dispatchable": f"message #{mid} ({facts.kind or 'plain'}) wakes no worker: only a task, or a result "
        "going back to its conversation's initiator (the review turn), does.",
        "already_acknowledged": f"message #{mid} is already acknowledged: its recipient has handled it.",
        "already_answered": f"message #{mid} already has a result from {agent} (answered but not acknowledged): "
        f"a worker would be credited with that answer. {agent} acknowledges it with mark_read once handled.",
        "claimed_by_other": f"message #{mid} is claimed by a running session of {agent}; wait until it is "
        "released or its lease expires.",
        "conversation_not_active": f"message #{mid} belongs to conversation #{facts.conversation_id}, which is "
        f"{facts.conversation_state}; check conversation(action='status').",
        "not_in_turn": f"message #{mid} is no longer the in-flight message of conversation "
        f"#{facts.conversation_id}: it has been answered.",
        "auto_off": f'{agent} has "auto": false in config.json, so its tasks are left for a human; {by_hand}',
        "stale": f"message #{mid} is older than dispatch_max_age_seconds ({config.dispatch_max_age_seconds} s), "
        f"so it is left for a human; {by_hand}",
        "held_interactive": f"message #{mid} waits for {agent}'s live interactive session to claim it, for up to "
        f"interactive_grace_seconds ({_grace(config, agent)} s) after it was sent; then the listener dispatches "
        f"it. {by_hand}",
        "held_budget": f"{agent} reached its {facts.daily_cap} ({_daily_cap(config, agent, facts.daily_cap)}) with "
        f"today's attempts: budget reached, resets at 00:00 {config.budget_time_zone}, when the listener dispatches "
        "it by itself. "
        f"Raise the cap in config.json to go on today; {by_hand}",
        "held_budget_running": f"{agent}'s running workers, each counted at its per-task cap, could reach its "
        f"{facts.daily_cap} ({_daily_cap(config, agent, facts.daily_cap)}): message #{mid} waits until one of them "
        "ends, when the listener looks again by itself (docs/workers.md). Set the per-task cap of that kind, or "
        f"raise the daily one, to run more at once; {by_hand}",
    }[code]


def _daily_cap(config: DispatchConfig, agent: str, cap: str | None) -> object:
    return getattr(config.agents[agent], cap) if agent in config.agents and cap else None


def _grace(config: DispatchConfig, agent: str) -> int:
    return config.agents[agent].interactive_grace_seconds if agent in config.agents else 0


def _facts(conn: Connection, rows: Iterable[dict[str, Any]], now: float, config: DispatchConfig) -> Iterator[Candidate]:
    # Sessions matter only to an agent with a grace: no /proc probe on a scan otherwise.
    wakeable: dict[str, bool] = {a: False for a, c in config.agents.items() if c.interactive_grace_seconds == 0}
    # Today's spend matters only to an agent with a daily cap: read once per scan.
    capped: dict[str, BudgetHold | None] = {a: None for a, c in config.agents.items() if not has_daily_cap(c)}
    for row in rows:
        standalone = row["conversation_id"] is None
        if row["recipient"] not in wakeable:  # looked up once per scan
            wakeable[row["recipient"]] = has_wakeable_session(conn, row["recipient"])
        if row["recipient"] not in capped:
            capped[row["recipient"]] = _daily_cap_reached(conn, row["recipient"], config, now)
        yield Candidate(
            message_id=row["id"],
            sender=row["sender"],
            recipient=row["recipient"],
            kind=row["kind"],
            created_at=row["created_at"],
            acknowledged=row["acknowledged_at"] is not None,
            claim_active=claim_is_active(row, now),
            attempted=bool(row["attempted"]),
            conversation_id=row["conversation_id"],
            conversation_state=None
            if standalone or row["state"] is None
            else effective_state(row["state"], row["expires_at"], now),
            conversation_initiator=row["initiator"],
            in_flight=standalone or row["in_flight_message_id"] == row["id"],
            interactive_session=wakeable[row["recipient"]],
            answered=bool(row["answered"]),
            daily_cap=None if (hold := capped[row["recipient"]]) is None else hold.cap,
            budget_running=hold is not None and hold.while_running,
        )


def _daily_cap_reached(conn: Connection, agent: str, config: DispatchConfig, now: float) -> BudgetHold | None:
    """``spend.daily_budget_hold`` over today's spend and the agent's running attempts. Inside
    the barrier's transaction, which serialises all of them, the attempts that started before
    count: two supervisors started together cannot both pass on the same reading."""
    if agent not in config.agents:
        return None
    cost, tokens = spend_since(conn, agent, budget_day_start(config, now))
    return daily_budget_hold(cost, tokens, running_count(conn, agent), config.agents[agent])


def budget_hold_day(conn: Connection, agent: str, config: DispatchConfig, now: float) -> float | None:
    """The start of the budget day whose reached daily cap holds ``agent``'s new tasks until the
    next midnight (``held_budget``), or None (not reached, or held only while workers run)."""
    hold = _daily_cap_reached(conn, agent, config, now)
    return None if hold is None or hold.while_running else budget_day_start(config, now)


def message_facts(conn: Connection, message_id: int, now: float, config: DispatchConfig) -> Candidate | None:
    row = dispatchable.message_facts(conn, message_id)
    return None if row is None else next(_facts(conn, [row], now, config))


def _scan(conn: Connection, agent: str, now: float, oldest: float, config: DispatchConfig) -> Iterator[Candidate]:
    return _facts(conn, dispatchable.scan_facts(conn, agent, oldest), now, config)


def next_dispatchable(conn: Connection, agent: str, config: DispatchConfig, now: float) -> Candidate | None:
    """The oldest message the listener should dispatch now, or None."""
    return next_action(conn, agent, config, now)[0]


def next_action(
    conn: Connection, agent: str, config: DispatchConfig, now: float, skip: frozenset[int] = frozenset()
) -> tuple[Candidate | None, float | None]:
    """The oldest message to dispatch now (or None), and when the first message held for an
    interactive session is released, or the next local midnight for a message held by a daily
    budget (None when none is held): the listener looks again then. ``skip``: messages whose
    supervisor runs already (its attempt may not be recorded yet)."""
    oldest = now - config.dispatch_max_age_seconds  # a scan never needs older rows: they are stale
    release: float | None = None
    for facts in _scan(conn, agent, now, oldest, config):
        if facts.message_id in skip:
            continue
        code = dispatch_refusal(facts, now, config, manual=False)
        if code is None:
            return facts, release
        if code == "held_interactive":
            release = min(release or float("inf"), held_until(facts, config))
        elif code == "held_budget":
            release = min(release or float("inf"), budget_day_end(config, now))
        # held_budget_running: a worker's end commits its attempt, which wakes the listener.
    return None, release


@dataclass(frozen=True)
class Backlog:
    """Never-attempted messages for one agent, by what automatic dispatch would do with them."""

    dispatchable: list[Candidate]
    held_auto_off: list[Candidate]  # would be dispatched, but the agent's auto is off
    stale: list[Candidate]  # older than dispatch_max_age_seconds: left for a human
    # waiting for a live interactive session to claim it, until interactive_grace_seconds pass
    held_interactive: list[Candidate] = field(default_factory=list)
    # answered by its recipient but not acknowledged: never dispatched (already_answered)
    answered: list[Candidate] = field(default_factory=list)
    # its agent reached a daily budget: held until the next local midnight (budget_running: until
    # one of its running workers ends)
    held_budget: list[Candidate] = field(default_factory=list)


def classify(conn: Connection, agent: str, config: DispatchConfig, now: float) -> Backlog:
    groups: dict[str | None, list[Candidate]] = {
        None: [],
        "auto_off": [],
        "stale": [],
        "held_interactive": [],
        "already_answered": [],
        "held_budget": [],
    }
    for facts in _scan(conn, agent, now, float("-inf"), config):
        code = dispatch_refusal(facts, now, config, manual=False)
        code = "held_budget" if code == "held_budget_running" else code  # (budget_running tells which)
        if code in groups:
            groups[code].append(facts)
    return Backlog(
        dispatchable=groups[None],
        held_auto_off=groups["auto_off"],
        stale=groups["stale"],
        held_interactive=groups["held_interactive"],
        answered=groups["already_answered"],
        held_budget=groups["held_budget"],
    )
