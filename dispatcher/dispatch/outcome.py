"""Settling an attempt: judge the evidence, record the outcome, and on failure tell the sender.

Everything that follows from a verdict commits with it, in one transaction: the
attempt row, the end of the attempt's claim, the sender's system notice and a conversation
frozen as ``blocked``. A
crash at any point leaves either all of it or none of it (and then reconciliation
settles the attempt). Shared by the supervisor and by reconciliation.

The same transaction writes the attempt's ledger (the CLI's status word, cost, tokens
and the overshoot of the per-task cap) and applies a conversation's cost cap: once the
recorded cost of its attempts reaches ``max_cost_usd`` it moves to ``needs_human``
(event ``budget_exhausted``), so the dispatch rule refuses its next message.

``decide`` is the verdict's last step, pure: the store's evidence wins; without it, a
worker that exited after its CLI said ``budget_exceeded`` ends ``budget_exceeded`` (its
own outcome kind, a failure: the sender gets a system notice), anything else ``fallback``.
"""

import json
from collections.abc import Callable
from pathlib import Path

from dispatcher.bridge.conversations import block_conversation, exhaust_budget
from dispatcher.bridge.worker_scope import attempt_claim_owner
from dispatcher.core import clock, traces
from dispatcher.core.lifecycle import FAILURE_OUTCOMES
from dispatcher.core.logs import get_logger
from dispatcher.core.private_files import read_untrusted
from dispatcher.core.reasons import failure_reason
from dispatcher.dispatch.attempts import clean_diagnostics, finish_attempt, get_attempt, ledger_fields
from dispatcher.dispatch.cli_results import cli_diagnostics
from dispatcher.dispatch.evidence import verdict
from dispatcher.dispatch.leftovers import DIAGNOSTICS_NAME
from dispatcher.store import Connection, Row, write_transaction
from dispatcher.store.claims import drop_claim_of
from dispatcher.store.messages import fetch_message, insert_message

log = get_logger("agent_bridge.dispatch")
MAX_DIAGNOSTICS_BYTES = 64 * 1024


# The launcher contract's own exit codes (docs/launchers.md): with nothing done, they say why.
# 78 (EX_CONFIG): the agent's permission profile cannot be enforced by this CLI on this machine
# (say, its sandbox does not work here), so the launcher refused to run it unconfined.
PERMISSIONS_UNENFORCEABLE_EXIT = 78
LAUNCHER_EXIT_KINDS = {
    127: "cli_not_found",
    2: "launcher_usage",
    PERMISSIONS_UNENFORCEABLE_EXIT: "permissions_unenforceable",
}


def attempt_diagnostics(attempt_dir: Path, exit_code: int | None) -> dict | None:
    """What the attempt's files say about its run, once its worker is gone: the launcher's
    ``diagnostics.json``, else the CLI's own result file. The one reading of them, for a normal
    finish and for reconciliation alike; every file is read with ``read_untrusted``."""
    try:
        written = json.loads(read_untrusted(attempt_dir, DIAGNOSTICS_NAME, MAX_DIAGNOSTICS_BYTES) or "null")
    except ValueError:
        written = None
    return clean_diagnostics(written) or clean_diagnostics(cli_diagnostics(attempt_dir, exit_code))


def decide(
    evidence_outcome: str | None,
    evidence_kind: str | None,
    fallback: str,
    error_kind: str | None,
    cli_status: str | None,
    exit_code: int | None = None,
) -> tuple[str, str | None]:
    """(outcome, error_kind) from the evidence's verdict, the caller's fallback, the CLI's own status
    and the worker's exit code (127: the launcher found no CLI; 2: it was invoked wrongly; 78: it
    refused a permission profile its CLI cannot enforce here). A success never carries an
    error kind: the work was done, whatever happened to the processes afterwards."""
    if evidence_outcome == "succeeded":
        return evidence_outcome, None
    if evidence_outcome is not None:
        return evidence_outcome, error_kind
    if fallback == "failed" and cli_status == "budget_exceeded":
        return "budget_exceeded", error_kind or evidence_kind
    if fallback == "failed" and error_kind is None and evidence_kind == "no_evidence" and cli_status is None:
        return fallback, evidence_kind if exit_code is None else LAUNCHER_EXIT_KINDS.get(exit_code, evidence_kind)
    return fallback, error_kind or evidence_kind


def _usd(value: float | None) -> str:
    return "unknown" if value is None else f"${value:.4f}"


def _notify(conn: Connection, message: Row, text: str, now: float) -> None:
    insert_message(
        conn,
        sender=message["recipient"],
        recipient=message["sender"],
        text=text,
        kind="notice",
        reply_to=message["id"],
        created_at=now,
        origin="system",
    )


def _failure_text(
    message: Row,
    outcome: str,
    error_kind: str | None,
    ledger: dict,
    max_cost: float | None,
    max_tokens: int | None = None,
) -> str:
    """Payload-free: ids, enums, numbers and a fixed fix for the cause (``reasons``)."""
    agent = message["recipient"]
    why = failure_reason(outcome, error_kind, ledger.get("cli_status"))
    reason = f" ({error_kind})" if error_kind else ""
    budget = ""
    if outcome == "budget_exceeded" and ledger.get("token_overshoot"):
        budget = (
            f" The worker passed its token cap: max_tokens_per_task {max_tokens}, "
            f"{ledger.get('token_overshoot')} tokens over it when it stopped."
        )
    elif outcome == "budget_exceeded":
        budget = (
            f" The worker stopped at its cost cap: cost {_usd(ledger.get('cost_usd'))}"
            f"{' (estimated)' if ledger.get('cost_source') == 'estimated' else ''}, "
            f"max_cost_usd_per_task {_usd(max_cost)}."
        )
    return (
        f"Dispatch of message #{message['id']} to {agent} ended: {outcome}{reason}.{budget} Why: {why}. It is not "
        f"retried automatically; see `agent-bridge show {message['id']}` (cli_status, the attempt's files) and decide "
        "what to do."
    )


def _budget_text(message: Row, spent: dict) -> str:
    return (
        f"Conversation #{message['conversation_id']} reached its cost cap after message #{message['id']}: "
        f"recorded cost {_usd(spent['cost_usd'])} of max_cost_usd {_usd(spent['max_cost_usd'])} over "
        f"{spent['attempts']} attempts. It is now needs_human and no further task is dispatched; "
        "a human decides what happens next."
    )


def settle(
    conn: Connection,
    message_id: int,
    *,
    fallback: str,
    error_kind: str | None = None,
    exit_code: int | None = None,
    diagnostics: dict | None = None,
    now: float | None = None,
    duration_seconds: float | None = None,
    before_commit: Callable[[], None] | None = None,
) -> str:
    """Settle one attempt from the store's evidence; ``fallback`` applies when there is none.

    ``duration_seconds``: as the supervisor measured it on the monotonic clock; without it
    (reconciliation, in another process) it is ``now`` minus the start, never below 0.

    Returns the outcome; when another process settled the attempt first, theirs.
    ``before_commit`` runs inside the transaction just before COMMIT (crash-point tests).
    In a supervisor that traces, the verdict is the ``settle`` span under the attempt's.
    """
    with traces.child_span("settle", None, message_id):
        return _settle(
            conn, message_id, fallback, error_kind, exit_code, diagnostics, now, duration_seconds, before_commit
        )


def _settle(
    conn: Connection,
    message_id: int,
    fallback: str,
    error_kind: str | None,
    exit_code: int | None,
    diagnostics: dict | None,
    now: float | None,
    duration_seconds: float | None,
    before_commit: Callable[[], None] | None,
) -> str:
    now = clock.now() if now is None else now
    with write_transaction(conn):
        found, evidence_kind = verdict(conn, message_id, now)
        outcome, error_kind = decide(
            found, evidence_kind, fallback, error_kind, (diagnostics or {}).get("cli_status"), exit_code
        )
        attempt = get_attempt(conn, message_id)
        max_cost = attempt["max_cost_usd"] if attempt else None
        max_tokens = attempt["max_tokens"] if attempt else None
        ledger = ledger_fields(diagnostics, max_cost, max_tokens)
        traces.annotate_current(
            agent=attempt["agent"] if attempt else None, outcome=outcome, error_kind=error_kind, exit_code=exit_code
        )
        if not finish_attempt(
            conn,
            message_id,
            outcome=outcome,
            now=now,
            exit_code=exit_code,
            error_kind=error_kind,
            diagnostics=diagnostics,
            ledger=ledger,
            duration_seconds=duration_seconds,
        ):
            settled = get_attempt(conn, message_id)
            return settled["outcome"] if settled else outcome
        if attempt is not None:  # the claim the barrier took ends with the attempt: a session may take the task
            drop_claim_of(conn, message_id, attempt_claim_owner(attempt["agent"], message_id))
        message = fetch_message(conn, message_id)
        conversation_id = message["conversation_id"] if message is not None else None
        # The cost cap first: a conversation it stops is needs_human, not blocked by the failure below.
        spent = (
            exhaust_budget(conn, conversation_id, message["recipient"], now)
            if message is not None and conversation_id
            else None
        )
        if outcome in FAILURE_OUTCOMES and message is not None:
            text = _failure_text(message, outcome, error_kind, ledger, max_cost, max_tokens)
            _notify(conn, message, text + (" " + _budget_text(message, spent) if spent else ""), now)
            if conversation_id is not None:
                block_conversation(conn, conversation_id, message["recipient"], f"dispatch_{outcome}", now)
        elif spent and message is not None:  # (spent implies the message)
            _notify(conn, message, _budget_text(message, spent), now)
        if before_commit is not None:
            before_commit()
    log.info(
        "attempt_settled",
        message_id=message_id,
        outcome=outcome,
        error_kind=error_kind,
        exit_code=exit_code,
        cli_status=ledger["cli_status"],
        cost_usd=ledger["cost_usd"],
        overshoot_usd=ledger["cost_overshoot_usd"],
    )
    return outcome
