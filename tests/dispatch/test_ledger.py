"""The ledger on a real SQLite file, no processes: settle writes the attempt's cost and tokens
from the CLI's diagnostics, a budget stop is its own outcome, a conversation's cost cap moves
it to needs_human and stops dispatch, and the totals per attempt, conversation and agent."""

import math
import time

import pytest

from dispatcher.bridge import conversations, messages
from dispatcher.bridge.worker_scope import attempt_claim_owner
from dispatcher.core.config import AgentConfig, BridgeConfig
from dispatcher.core.errors import BridgeError
from dispatcher.core.lifecycle import FAILURE_OUTCOMES
from dispatcher.dispatch import queue
from dispatcher.dispatch.attempts import begin_attempt, get_attempt
from dispatcher.dispatch.control import agent_totals
from dispatcher.dispatch.outcome import decide, settle

AGENTS = {"claude", "kimi"}
WORKER = "worker-1"


def _config(cap: float | None = None) -> BridgeConfig:
    return BridgeConfig(
        agents={
            "claude": AgentConfig(launcher="launchers/command_headless.sh", auto=True, max_cost_usd_per_task=cap),
            "kimi": AgentConfig(launcher="launchers/command_headless.sh", auto=True),
        }
    )


def _attempt(conn, message_id: int, cap: float | None = None, now: float | None = None) -> None:
    begin_attempt(
        conn,
        message_id=message_id,
        config=_config(cap),
        now=now or time.time(),
        manual=False,
        supervisor_pid=1,
        supervisor_start=None,
        worker_token="t",
    )


def _task(conn) -> int:
    return messages.send_message(conn, sender="kimi", recipient="claude", text="do it", agents=AGENTS, kind="task")[
        "id"
    ]


def _succeed(conn, task: int, conversation: bool = False) -> int:
    result = messages.send_message(
        conn, sender="claude", recipient="kimi", text="done", agents=AGENTS, kind="result", reply_to=task, attempt=task
    )["id"]
    worker = attempt_claim_owner("claude", task)  # the attempt's worker, holding the claim the barrier took
    assert messages.mark_read(conn, agent="claude", worker_id=worker, message_ids=[task])["acknowledged"]
    return result


def _diag(status: str = "ok", cost: float | None = 0.01, tokens_in: int = 100, tokens_out: int = 20) -> dict:
    return {
        "cli": "claude",
        "cli_status": status,
        "cost_usd": cost,
        "input_tokens": tokens_in,
        "output_tokens": tokens_out,
        "cache_read_tokens": 3,
        "cache_write_tokens": 4,
    }


def _notices(conn, recipient: str = "kimi") -> list:
    return conn.execute(
        "SELECT * FROM messages WHERE recipient = ? AND kind = 'notice' ORDER BY id", (recipient,)
    ).fetchall()


# -- the pure decision -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("found", "kind", "fallback", "error_kind", "cli_status", "expected"),
    [
        ("succeeded", None, "failed", None, "budget_exceeded", ("succeeded", None)),  # evidence wins
        # A success found after a crash or a timeout carries no error kind: the work was done.
        ("succeeded", None, "crashed", "worker_gone", "ok", ("succeeded", None)),
        ("succeeded", None, "timeout", "timeout", None, ("succeeded", None)),
        ("blocked", None, "timeout", "timeout", None, ("blocked", "timeout")),
        ("blocked", None, "failed", None, "budget_exceeded", ("blocked", None)),
        (None, "no_evidence", "failed", None, "budget_exceeded", ("budget_exceeded", "no_evidence")),
        (None, "ack_without_result", "failed", None, "budget_exceeded", ("budget_exceeded", "ack_without_result")),
        (None, "no_evidence", "timeout", "timeout", "budget_exceeded", ("timeout", "timeout")),  # the clock first
        (None, "no_evidence", "crashed", None, "budget_exceeded", ("crashed", "no_evidence")),
        (None, "no_evidence", "failed", None, "api_error", ("failed", "no_evidence")),
        (None, "no_evidence", "failed", None, None, ("failed", "no_evidence")),
        (None, "no_evidence", "failed", "spawn:OSError", None, ("failed", "spawn:OSError")),
    ],
)
def test_decide(found, kind, fallback, error_kind, cli_status, expected):
    assert decide(found, kind, fallback, error_kind, cli_status) == expected


def test_a_budget_stop_is_a_failure_outcome_everywhere():
    assert "budget_exceeded" in FAILURE_OUTCOMES
    assert messages.FAILURE_OUTCOMES is FAILURE_OUTCOMES  # late results after it are news too


# -- the attempt's ledger ----------------------------------------------------------------------------


def test_settle_writes_the_ledger_and_get_message_shows_it(conn):
    task = _task(conn)
    _attempt(conn, task)
    _succeed(conn, task)
    assert settle(conn, task, fallback="failed", diagnostics=_diag(cost=0.0123)) == "succeeded"
    row = get_attempt(conn, task)
    assert (
        row["cli_status"],
        row["cost_usd"],
        row["input_tokens"],
        row["output_tokens"],
        row["cache_read_tokens"],
        row["cache_write_tokens"],
    ) == ("ok", 0.0123, 100, 20, 3, 4)
    assert (row["max_cost_usd"], row["cost_overshoot_usd"]) == (None, None)
    summary = messages.get_message(conn, agent="kimi", worker_id=WORKER, message_id=task)["dispatch"]
    assert {k: summary[k] for k in ("outcome", "cli_status", "cost_usd", "input_tokens", "output_tokens")} == {
        "outcome": "succeeded",
        "cli_status": "ok",
        "cost_usd": 0.0123,
        "input_tokens": 100,
        "output_tokens": 20,
    }


def test_no_diagnostics_leaves_the_ledger_empty(conn):
    task = _task(conn)
    _attempt(conn, task)
    assert settle(conn, task, fallback="crashed", error_kind="gone") == "crashed"
    row = get_attempt(conn, task)
    assert (row["cli_status"], row["cost_usd"], row["input_tokens"]) == (None, None, None)


def test_the_per_task_cap_is_recorded_with_the_overshoot_of_a_run_that_still_succeeded(conn):
    task = _task(conn)
    _attempt(conn, task, cap=0.05)
    _succeed(conn, task)
    # Claude checks its cap between turns: the turn that crossed it finished the work.
    assert settle(conn, task, fallback="failed", diagnostics=_diag("budget_exceeded", cost=0.0731)) == "succeeded"
    row = get_attempt(conn, task)
    assert (row["max_cost_usd"], row["cost_overshoot_usd"], row["cli_status"]) == (0.05, 0.0231, "budget_exceeded")
    assert _notices(conn) == []


def test_a_budget_stop_without_evidence_is_its_own_outcome_with_one_notice(conn):
    task = _task(conn)
    _attempt(conn, task, cap=0.05)
    assert (
        settle(conn, task, fallback="failed", exit_code=1, diagnostics=_diag("budget_exceeded", cost=0.0612))
        == "budget_exceeded"
    )
    row = get_attempt(conn, task)
    assert (row["outcome"], row["error_kind"], row["cost_overshoot_usd"]) == ("budget_exceeded", "no_evidence", 0.0112)
    [notice] = _notices(conn)
    assert notice["origin"] == "system" and notice["reply_to"] == task
    assert "ended: budget_exceeded (no_evidence)" in notice["text"]
    assert "cost $0.0612, max_cost_usd_per_task $0.0500" in notice["text"]


def test_a_budget_stop_in_a_conversation_freezes_it_like_any_failure(conn):
    started = conversations.start_conversation(
        conn, initiator="kimi", recipient="claude", goal="g", agents=AGENTS, max_body_bytes=1000
    )
    task = started["message_id"]
    _attempt(conn, task, cap=0.05)
    assert settle(conn, task, fallback="failed", diagnostics=_diag("budget_exceeded", cost=0.06)) == "budget_exceeded"
    status = conversations.conversation_action(
        conn, agent="kimi", action="status", conversation_id=started["conversation_id"]
    )
    assert status["state"] == "blocked"
    assert status["transitions"][-1]["reason"] == "dispatch_budget_exceeded"


# -- the conversation's cost cap --------------------------------------------------------------------


def _follow_up(conn, conversation_id: int, result_id: int) -> int:
    return messages.send_message(
        conn,
        sender="kimi",
        recipient="claude",
        text="more",
        agents=AGENTS,
        kind="task",
        reply_to=result_id,
        conversation_id=conversation_id,
        attempt=result_id,
    )["id"]


def test_a_conversation_reaching_its_cost_cap_needs_a_human_and_dispatches_nothing_more(conn):
    started = conversations.start_conversation(
        conn,
        initiator="kimi",
        recipient="claude",
        goal="g",
        agents=AGENTS,
        max_body_bytes=1000,
        max_turns=10,
        max_cost_usd=0.05,
    )
    cid, task = started["conversation_id"], started["message_id"]
    assert started["max_cost_usd"] == 0.05
    _attempt(conn, task)
    result = _succeed(conn, task)
    assert settle(conn, task, fallback="failed", diagnostics=_diag(cost=0.03)) == "succeeded"
    status = conversations.conversation_action(conn, agent="kimi", action="status", conversation_id=cid)
    assert status["state"] == "active" and status["max_cost_usd"] == 0.05
    assert status["totals"] == {"attempts": 1, "cost_usd": 0.03, "input_tokens": 100, "output_tokens": 20}
    assert _notices(conn) == []

    # The initiator's review turn: its own worker decides on a follow-up, which costs too.
    review_attempt = result
    _attempt(conn, review_attempt)
    follow = _follow_up(conn, cid, result)
    worker = attempt_claim_owner("kimi", result)
    assert messages.mark_read(conn, agent="kimi", worker_id=worker, message_ids=[result])["acknowledged"]
    assert settle(conn, review_attempt, fallback="failed", diagnostics=_diag(cost=0.025)) == "succeeded"

    status = conversations.conversation_action(conn, agent="kimi", action="status", conversation_id=cid)
    assert status["state"] == "needs_human"
    assert status["totals"]["attempts"] == 2 and math.isclose(status["totals"]["cost_usd"], 0.055)
    assert status["transitions"][-1]["reason"] == "budget_exhausted"
    # The follow-up task is refused by the dispatch rule: the state change suffices.
    facts = queue.message_facts(conn, follow, time.time(), _config())
    assert queue.dispatch_refusal(facts, time.time(), _config(), manual=False) == "conversation_not_active"
    assert queue.dispatch_refusal(facts, time.time(), _config(), manual=True) == "conversation_not_active"
    # The review's sender (claude) is told, once, payload-free.
    [notice] = _notices(conn, recipient="claude")
    assert notice["origin"] == "system" and notice["reply_to"] == review_attempt
    assert "reached its cost cap" in notice["text"] and "$0.0550 of max_cost_usd $0.0500" in notice["text"]


def test_a_failure_that_exhausts_the_cap_leaves_it_needing_a_human_with_one_notice(conn):
    started = conversations.start_conversation(
        conn, initiator="kimi", recipient="claude", goal="g", agents=AGENTS, max_body_bytes=1000, max_cost_usd=0.01
    )
    task = started["message_id"]
    _attempt(conn, task)
    assert settle(conn, task, fallback="failed", diagnostics=_diag("api_error", cost=0.02)) == "failed"
    assert (
        conversations.conversation_action(
            conn, agent="kimi", action="status", conversation_id=started["conversation_id"]
        )["state"]
        == "needs_human"
    )
    [notice] = _notices(conn)
    assert "ended: failed (no_evidence)" in notice["text"] and "reached its cost cap" in notice["text"]


def test_a_conversation_without_a_cap_or_without_costs_is_never_stopped_by_cost(conn):
    for cap, cost in ((None, 5.0), (0.01, None)):
        started = conversations.start_conversation(
            conn, initiator="kimi", recipient="claude", goal="g", agents=AGENTS, max_body_bytes=1000, max_cost_usd=cap
        )
        _attempt(conn, started["message_id"])
        _succeed(conn, started["message_id"])
        settle(conn, started["message_id"], fallback="failed", diagnostics=_diag(cost=cost))
        assert (
            conversations.conversation_action(
                conn, agent="kimi", action="status", conversation_id=started["conversation_id"]
            )["state"]
            == "active"
        )


@pytest.mark.parametrize("bad", [0, 0.0, -1.0, True, "1", float("nan"), float("inf"), 10001.0])
def test_max_cost_usd_must_be_a_positive_finite_number(conn, bad):
    with pytest.raises(BridgeError) as err:
        conversations.start_conversation(
            conn, initiator="kimi", recipient="claude", goal="g", agents=AGENTS, max_body_bytes=1000, max_cost_usd=bad
        )
    assert err.value.code == "invalid_number"
    assert conn.execute("SELECT count(*) FROM conversations").fetchone()[0] == 0


@pytest.mark.parametrize(
    ("state", "cap", "cost", "exhausted"),
    [
        ("active", 0.05, 0.05, True),
        ("active", 0.05, 0.0499, False),
        ("active", None, 9.0, False),
        ("active", 0.05, None, False),
        ("blocked", 0.05, 1.0, False),
        ("needs_human", 0.05, 1.0, False),
    ],
)
def test_budget_exhausted_rule(state, cap, cost, exhausted):
    assert conversations.budget_exhausted(state, cap, cost) is exhausted


# -- the agent's totals ---------------------------------------------------------------------------


def test_agent_totals_today_and_all_time(conn):
    now = time.time()
    day = now - now % 86400
    for cost, when in ((0.5, day - 3600), (0.25, day + 60), (None, day + 120)):
        task = _task(conn)
        _attempt(conn, task, cap=0.3, now=when - 10)
        settle(conn, task, fallback="failed", diagnostics=_diag(cost=cost), now=when)
    _attempt(conn, _task(conn))  # unsettled: not counted
    totals = agent_totals(conn, "claude", now)
    assert totals["all_time"] == {
        "attempts": 3,
        "cost_usd": 0.75,
        "input_tokens": 300,
        "output_tokens": 60,
        "overshoot_usd": 0.2,
    }
    assert totals["today"] == {
        "attempts": 2,
        "cost_usd": 0.25,
        "input_tokens": 200,
        "output_tokens": 40,
        "overshoot_usd": 0.0,
    }
    assert agent_totals(conn, "kimi", now)["all_time"] == {
        "attempts": 0,
        "cost_usd": None,
        "input_tokens": None,
        "output_tokens": None,
        "overshoot_usd": None,
    }


@pytest.mark.parametrize(
    ("cap", "accepted"), [(0.000001, True), (0.0000001, False), (0, False), (10000, True), (10001, False)]
)
def test_a_per_task_cap_is_one_the_launchers_can_pass_on(cap, accepted):
    """The supervisor writes the cap with six decimals; below a millionth it would read as 0,
    which Claude's --max-budget-usd (and the launcher) refuse."""
    from pydantic import ValidationError

    try:
        AgentConfig(launcher="x", max_cost_usd_per_task=cap)
    except ValidationError:
        assert not accepted
    else:
        assert accepted
