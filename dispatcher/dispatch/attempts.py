"""The attempt barrier and the attempt record.

``dispatch_attempts.message_id`` is the primary key, so inserting the row *is* the
decision to launch: a rescan, a restart, a duplicate listener or a second supervisor
loses the insert and launches nothing. Attempts are never retried automatically.
An attempt's state only moves along ``TRANSITIONS``: recorded -> spawned -> finished,
or recorded -> finished (nothing was started, or it was settled before its spawn was
recorded); a finished attempt never moves again.
"""

import re
from typing import Any

from dispatcher.bridge.worker_scope import attempt_claim_owner
from dispatcher.core import clock
from dispatcher.core.config_view import AttemptConfig
from dispatcher.core.errors import AlreadyAttempted, DispatchRefused
from dispatcher.core.grants import widened
from dispatcher.core.lifecycle import FAILURE_OUTCOMES
from dispatcher.core.processes import this_host
from dispatcher.core.spend import total_tokens
from dispatcher.dispatch import queue
from dispatcher.dispatch.renewal import LEASE_AHEAD_SECONDS, attempt_lease_seconds
from dispatcher.store import Connection, Row, write_transaction
from dispatcher.store.attempts import (
    OUTCOMES,
    get_attempt,
    insert_attempt,
    record_finish,
    record_spawn,
    unsettled_attempts,
)
from dispatcher.store.claims import take_claim
from dispatcher.store.grants import grants_of
from dispatcher.store.messages import fetch_existing_message

# The attempt record's vocabulary and reads live in the store; callers keep importing them here.
__all__ = ["FAILURE_OUTCOMES", "OUTCOMES", "get_attempt", "unsettled_attempts"]

# event -> (target state, states it may happen in)
TRANSITIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "spawn": ("spawned", ("recorded",)),
    "finish": ("finished", ("recorded", "spawned")),
}
# Launcher diagnostics we keep: numbers, booleans and enum-like words, never free text.
_ENUM_WORD = re.compile(r"[A-Za-z0-9_.:-]{1,40}")
MAX_DIAGNOSTIC_KEYS = 32
MAX_LIST_ITEMS = 16  # a diagnostics list (the denied tools' names) keeps at most this many words


def begin_attempt(
    conn: Connection,
    *,
    message_id: int,
    config: AttemptConfig,
    now: float,
    manual: bool,
    supervisor_pid: int,
    supervisor_start: str | None,
    worker_token: str,
) -> Row:
    """The barrier: in one BEGIN IMMEDIATE, check the message is dispatchable, record the attempt
    and take the message's claim for it (under the attempt's claim owner, which only its worker's
    server acts as): from the commit on, no session of the agent can claim the task.

    ``manual`` (an explicit ``agent-bridge dispatch ID``) skips the ``auto`` and age tests,
    nothing else. Returns the message row. Raises DispatchRefused (nothing recorded,
    nothing launched); AlreadyAttempted when an attempt exists, whoever recorded it.
    """
    with write_transaction(conn):
        facts = queue.message_facts(conn, message_id, now, config)
        if facts is None:
            raise DispatchRefused("message_not_found", f"there is no message #{message_id}; check the id.")
        refusal = queue.dispatch_refusal(facts, now, config, manual)
        if refusal == "already_attempted":
            raise AlreadyAttempted(message_id)
        if refusal is not None:
            raise DispatchRefused(refusal, queue.refusal_text(refusal, facts, config))
        agent = facts.recipient
        deadline = now + config.agents[agent].worker_timeout_seconds
        insert_attempt(
            conn,
            message_id=message_id,
            agent=agent,
            started_at=now,
            supervisor_pid=supervisor_pid,
            supervisor_start_time=supervisor_start,
            deadline=deadline,
            worker_token=worker_token,
            max_cost_usd=config.agents[agent].max_cost_usd_per_task,
            # The level this task runs at: the agent's, widened by a person's grant for it (``retry --allow``).
            permission_level=widened(config.permissions(agent), grants_of(conn, message_id)).level,
            max_tokens=config.agents[agent].max_tokens_per_task,
            host=this_host(),
            lease_expires_at=now + attempt_lease_seconds(),
        )
        owner = attempt_claim_owner(agent, message_id)
        take_claim(conn, message_id, owner=owner, expires_at=min(now + LEASE_AHEAD_SECONDS, deadline), now=now)
        return fetch_existing_message(conn, message_id)


def mark_spawned(conn: Connection, message_id: int, worker_pid: int, worker_start: str | None) -> bool:
    """Record the worker; False when the attempt was settled meanwhile (it stays as settled)."""
    with write_transaction(conn):
        return record_spawn(
            conn,
            message_id,
            TRANSITIONS["spawn"],
            worker_pid=worker_pid,
            worker_start_time=worker_start,
            worker_started_at=clock.now(),
        )


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _usd(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < 1e9
    return float(value) if ok else None


def denied_tools_text(value: Any) -> str | None:
    """The denied tools' names as the ledger keeps them: sorted, unique, comma-separated (pure)."""
    names = (
        sorted({v for v in value if isinstance(v, str) and _ENUM_WORD.fullmatch(v)})
        if isinstance(value, list | tuple)
        else []
    )
    return ",".join(names[:MAX_LIST_ITEMS]) or None


def ledger_fields(
    diagnostics: dict[str, Any] | None, max_cost_usd: float | None, max_tokens: int | None = None
) -> dict[str, Any]:
    """The ledger columns from an attempt's diagnostics (pure). ``max_cost_usd`` and ``max_tokens``
    are the per-task caps in force: each overshoot is the amount above its cap (0 within it; None
    when either is unknown). ``cost_source``: ``estimated`` when the supervisor priced the tokens,
    else ``reported`` for any cost. ``denied_tools``: the names of the tools the CLI reported
    denied (never their arguments)."""
    d = diagnostics or {}
    status = d.get("cli_status")
    cost = _usd(d.get("cost_usd"))
    tokens = total_tokens(d)
    return {
        "cli_status": status if isinstance(status, str) and _ENUM_WORD.fullmatch(status) else None,
        "cost_usd": cost,
        **{k: _count(d.get(k)) for k in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")},
        "cost_overshoot_usd": None if cost is None or max_cost_usd is None else round(max(0.0, cost - max_cost_usd), 6),
        "denied_tools": denied_tools_text(d.get("denied_tools")),
        "cost_source": None if cost is None else "estimated" if d.get("cost_source") == "estimated" else "reported",
        "token_overshoot": None if tokens is None or max_tokens is None else max(0, tokens - max_tokens),
    }


def finish_attempt(
    conn: Connection,
    message_id: int,
    *,
    outcome: str,
    now: float,
    exit_code: int | None = None,
    error_kind: str | None = None,
    diagnostics: dict[str, Any] | None = None,
    ledger: dict[str, Any] | None = None,
    duration_seconds: float | None = None,
) -> bool:
    """Settle an attempt once, inside the caller's write transaction; False if already settled."""
    return record_finish(
        conn,
        message_id,
        TRANSITIONS["finish"],
        outcome=outcome,
        exit_code=exit_code,
        error_kind=error_kind,
        finished_at=now,
        diagnostics=diagnostics,
        ledger=ledger or {},
        duration_seconds=duration_seconds,
    )


def clean_diagnostics(raw: object) -> dict[str, Any] | None:
    """Keep scalar values and short lists of enum words under identifier keys: nothing a CLI
    wrote can smuggle text in."""
    if not isinstance(raw, dict):
        return None
    kept: dict[str, Any] = {}
    for key, value in list(raw.items())[:MAX_DIAGNOSTIC_KEYS]:
        if not (isinstance(key, str) and len(key) <= 40 and key.isidentifier()):
            continue
        scalar = (
            value is None
            or isinstance(value, bool | int | float)
            or (isinstance(value, str) and _ENUM_WORD.fullmatch(value))
        )
        words = (
            isinstance(value, list)
            and len(value) <= MAX_LIST_ITEMS
            and all(isinstance(v, str) and _ENUM_WORD.fullmatch(v) for v in value)
        )
        if scalar or words:
            kept[key] = value
    return kept or None
