"""Several workers and the daily budget: the rule (``spend.daily_budget_hold``), one case each,
and the barrier that applies it, on a real SQLite file and a real PostgreSQL server: two
supervisors started together cannot both pass on the same reading of today's spend."""

import time

import pytest

from dispatcher.bridge import messages
from dispatcher.core.config import AgentConfig, BridgeConfig
from dispatcher.core.config_view import max_workers
from dispatcher.core.errors import DispatchRefused
from dispatcher.core.spend import BudgetHold, daily_budget_hold
from dispatcher.dispatch import queue
from dispatcher.dispatch.attempts import begin_attempt
from dispatcher.dispatch.outcome import settle

pytestmark = pytest.mark.both_backends

AGENTS = {"claude", "kimi"}


@pytest.mark.parametrize(
    ("caps", "cost", "tokens", "running", "expected"),
    [
        # No daily cap: nothing is held, however many run.
        ({}, 1e6, 10**9, 8, None),
        ({"max_tokens_per_task": 10}, None, None, 8, None),
        # Reached: held until midnight, running or not.
        ({"max_tokens_per_day": 100}, None, 100, 0, BudgetHold("max_tokens_per_day", False)),
        ({"max_cost_usd_per_day": 1.0}, 1.0, None, 2, BudgetHold("max_cost_usd_per_day", False)),
        # Nothing running: below the cap starts, as with one worker.
        ({"max_tokens_per_day": 100}, None, 99, 0, None),
        ({"max_cost_usd_per_day": 1.0}, None, None, 0, None),
        # Running with no per-task cap of that kind: nothing bounds them, so held while they run.
        ({"max_tokens_per_day": 100}, None, 0, 1, BudgetHold("max_tokens_per_day", True)),
        ({"max_cost_usd_per_day": 1.0, "max_tokens_per_task": 10}, 0.0, 0, 1, BudgetHold("max_cost_usd_per_day", True)),
        # Running with a per-task cap: each reserves it; a worker starts while spent + reserved < daily.
        ({"max_tokens_per_day": 100, "max_tokens_per_task": 30}, None, 30, 2, None),  # 30 + 60 < 100
        ({"max_tokens_per_day": 100, "max_tokens_per_task": 30}, None, 40, 2, BudgetHold("max_tokens_per_day", True)),
        ({"max_tokens_per_day": 100, "max_tokens_per_task": 30}, None, None, 3, None),  # 0 + 90 < 100
        ({"max_tokens_per_day": 100, "max_tokens_per_task": 30}, None, None, 4, BudgetHold("max_tokens_per_day", True)),
        (
            {"max_cost_usd_per_day": 1.0, "max_cost_usd_per_task": 0.25},
            0.5,
            None,
            2,
            BudgetHold("max_cost_usd_per_day", True),
        ),
        ({"max_cost_usd_per_day": 1.0, "max_cost_usd_per_task": 0.25}, 0.25, None, 2, None),
        # Both kinds capped: the first that holds is named.
        (
            {"max_cost_usd_per_day": 1.0, "max_cost_usd_per_task": 0.1, "max_tokens_per_day": 100},
            0.0,
            0,
            1,
            BudgetHold("max_tokens_per_day", True),
        ),
    ],
)
def test_daily_budget_hold(caps, cost, tokens, running, expected):
    assert daily_budget_hold(cost, tokens, running, AgentConfig(launcher="x", **caps)) == expected


@pytest.mark.parametrize(
    ("entry", "isolated", "expected"),
    [
        ({}, False, 1),  # workers sharing one workspace would write over each other
        ({}, True, 2),  # each in a worktree of its own
        ({"max_workers": 4}, False, 4),
        ({"max_workers": 3}, True, 3),
        ({"max_workers": 1}, True, 1),
    ],
)
def test_max_workers_default_follows_isolation(entry, isolated, expected):
    assert max_workers(AgentConfig(launcher="x", **entry), isolated) == expected


def test_max_workers_bounds_are_validated():
    with pytest.raises(ValueError, match="max_workers"):
        AgentConfig(launcher="x", max_workers=0)
    with pytest.raises(ValueError, match="max_workers_total"):
        BridgeConfig(agents={"a": AgentConfig(launcher="x")}, max_workers_total=0)
    assert BridgeConfig(agents={"a": AgentConfig(launcher="x")}).max_workers_total == 4


def _config(**kimi) -> BridgeConfig:
    return BridgeConfig(
        agents={"kimi": AgentConfig(launcher="x", auto=True, **kimi), "claude": AgentConfig(launcher="x")},
        budget_time_zone="UTC",  # required once an agent has a daily budget
    )


def _task(conn) -> int:
    return messages.send_message(conn, sender="claude", recipient="kimi", text="do it", agents=AGENTS, kind="task")[
        "id"
    ]


def _begin(conn, message_id: int, config: BridgeConfig, now: float) -> None:
    begin_attempt(
        conn,
        message_id=message_id,
        config=config,
        now=now,
        manual=False,
        supervisor_pid=1,
        supervisor_start=None,
        worker_token=f"t{message_id}",
    )


def test_two_workers_started_together_the_second_is_held_while_the_first_runs(conn):
    """No per-task cap bounds the first: the second is refused at the barrier (held_budget_running),
    not launched; once the first ends below the cap, the second passes."""
    config = _config(max_tokens_per_day=1000, max_workers=2)
    now = time.time()
    first, second = _task(conn), _task(conn)
    # Both seen dispatchable on the same reading (as two listeners' scans, or a scan before a record).
    assert queue.next_action(conn, "kimi", config, now)[0].message_id == first
    _begin(conn, first, config, now)
    with pytest.raises(DispatchRefused) as refused:
        _begin(conn, second, config, now)
    assert refused.value.code == "held_budget_running"
    assert "waits until one of them ends" in str(refused.value)
    facts = queue.classify(conn, "kimi", config, now).held_budget
    assert [(f.message_id, f.daily_cap, f.budget_running) for f in facts] == [(second, "max_tokens_per_day", True)]
    assert queue.next_action(conn, "kimi", config, now) == (None, None)  # no midnight: the first's end wakes it
    assert queue.budget_hold_day(conn, "kimi", config, now) is None  # held while one runs: no budget_held notice
    settle(conn, first, fallback="failed", diagnostics={"cli": "kimi", "input_tokens": 400}, now=now + 1)
    _begin(conn, second, config, now + 2)  # 400 spent, nothing running: it starts


def test_with_a_per_task_cap_workers_start_together_until_the_reservations_reach_the_daily_cap(conn):
    """max_tokens_per_task 400 under max_tokens_per_day 1000: three start together (each while
    spent + reserved stays below 1000: 0, 400, 800), the fourth waits (3 x 400 >= 1000). The
    worst overrun is one task's cap (3 x 400 = 1200)."""
    config = _config(max_tokens_per_day=1000, max_tokens_per_task=400, max_workers=4)
    now = time.time()
    tasks = [_task(conn) for _ in range(4)]
    for task in tasks[:3]:
        _begin(conn, task, config, now)
    with pytest.raises(DispatchRefused) as refused:
        _begin(conn, tasks[3], config, now)
    assert refused.value.code == "held_budget_running"
