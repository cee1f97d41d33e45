"""Spend under control for every CLI, on a real SQLite file and without processes: prices turn
tokens into an estimated cost (a reported cost wins), a per-task token or cost cap passed makes
the verdict ``budget_exceeded`` with the overshoot recorded and one notice, and a daily budget
holds the agent's next tasks (``held_budget``) until the next local midnight."""

import json
import time

import pytest

from dispatcher.bridge import messages
from dispatcher.core import clock
from dispatcher.core.config import AgentConfig, BridgeConfig, ConfigError, Prices, load_config
from dispatcher.core.spend import cap_passed, cap_to_stop_for, daily_cap_reached, estimate_cost, priced, total_tokens
from dispatcher.dispatch import queue
from dispatcher.dispatch.attempts import begin_attempt, get_attempt
from dispatcher.dispatch.control import daily_budget
from dispatcher.dispatch.outcome import settle
from dispatcher.dispatch.worker_run import ended_over_cap, with_spend

AGENTS = {"claude", "kimi"}
PRICES = Prices(input=2.0, output=10.0, cache_read=0.5, cache_write=1.0)
USAGE = {"input_tokens": 1_000_000, "output_tokens": 100_000, "cache_read_tokens": 200_000, "cache_write_tokens": 0}


# -- the pure rules ----------------------------------------------------------------------------------


def test_prices_turn_tokens_into_an_estimate_and_a_reported_cost_wins():
    assert total_tokens(USAGE) == 1_300_000
    assert total_tokens({"input_tokens": None}) is None
    assert estimate_cost(USAGE, PRICES) == pytest.approx(2.0 + 1.0 + 0.1)
    assert estimate_cost(USAGE, None) is None  # no guessed default price
    assert estimate_cost({}, PRICES) is None  # no tokens: no cost, not $0
    assert priced(USAGE, PRICES) == (pytest.approx(3.1), "estimated")
    assert priced({**USAGE, "cost_usd": 0.25}, PRICES) == (0.25, "reported")
    assert priced(USAGE, None) == (None, None)


@pytest.mark.parametrize(
    ("agent", "usage", "expected"),
    [
        ({"max_tokens_per_task": 1_300_000}, USAGE, None),  # at the cap: not past it
        ({"max_tokens_per_task": 1_299_999}, USAGE, "max_tokens_per_task"),
        ({"max_cost_usd_per_task": 3.0, "prices": PRICES}, USAGE, "max_cost_usd_per_task"),  # estimated
        ({"max_cost_usd_per_task": 3.0}, USAGE, None),  # no price, no reported cost: unknown
        ({"max_cost_usd_per_task": 0.1}, {"cost_usd": 0.2}, "max_cost_usd_per_task"),  # reported
        ({}, USAGE, None),
        ({"max_tokens_per_task": 10}, {}, None),  # nothing reported yet
    ],
)
def test_cap_passed(agent, usage, expected):
    assert cap_passed(usage, AgentConfig(launcher="x", **agent)) == expected


@pytest.mark.parametrize(
    ("agent", "usage", "expected"),
    [
        ({"max_tokens_per_task": 1_299_999}, USAGE, "max_tokens_per_task"),
        ({"max_tokens_per_task": 10}, {**USAGE, "cost_usd": 0.01}, "max_tokens_per_task"),  # tokens: always
        ({"max_cost_usd_per_task": 3.0, "prices": PRICES}, USAGE, "max_cost_usd_per_task"),  # our estimate
        ({"max_cost_usd_per_task": 0.1}, {"cost_usd": 0.2}, None),  # the CLI's own cost: its own cap
        ({}, USAGE, None),
    ],
)
def test_cap_to_stop_a_running_worker_for(agent, usage, expected):
    """A running worker is ended for its token cap, or for a cost cap only on an estimated cost:
    a CLI that reports its own cost stops itself, and its work is judged by the evidence."""
    assert cap_to_stop_for(usage, AgentConfig(launcher="x", **agent)) == expected


@pytest.mark.parametrize(
    ("agent", "cost", "tokens", "expected"),
    [
        ({"max_cost_usd_per_day": 5.0}, 5.0, 10, "max_cost_usd_per_day"),  # reaching it holds
        ({"max_cost_usd_per_day": 5.0}, 4.99, 10, None),
        ({"max_cost_usd_per_day": 5.0}, None, 10, None),
        ({"max_tokens_per_day": 100}, None, 100, "max_tokens_per_day"),
        ({"max_tokens_per_day": 100}, 1.0, 99, None),
        ({}, 1e6, 10**9, None),
    ],
)
def test_daily_cap_reached(agent, cost, tokens, expected):
    assert daily_cap_reached(cost, tokens, AgentConfig(launcher="x", **agent)) == expected


def test_the_day_starts_at_local_midnight(monkeypatch):
    monkeypatch.setenv("TZ", "Asia/Tokyo")  # UTC+9, no DST
    time.tzset()
    try:
        noon = 1_780_000_000 - 1_780_000_000 % 86400 + 3 * 3600  # 12:00 in Tokyo
        assert clock.local_day_start(noon) == noon - 12 * 3600
        assert clock.next_local_day_start(noon) == noon + 12 * 3600
        assert clock.next_local_day_start(noon + 12 * 3600) == noon + 36 * 3600
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_config_takes_prices_and_caps_and_refuses_nonsense(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(
        '{"agents": {"kimi": {"launcher": "x", "prices": {"input": 0.6, "output": 2.5}, "max_tokens_per_task": 5000,'
        ' "max_cost_usd_per_day": 3, "max_tokens_per_day": 1000000}}, "budget_time_zone": "Europe/Berlin"}'
    )
    agent = load_config(path).agents["kimi"]
    assert agent.prices == Prices(input=0.6, output=2.5) and agent.max_tokens_per_task == 5000
    for bad in ('{"input": -1, "output": 1}', '{"input": 1}', '{"input": 1, "output": 1, "extra": 2}'):
        path.write_text('{"agents": {"kimi": {"launcher": "x", "prices": ' + bad + "}}}")
        with pytest.raises(ConfigError, match="prices"):
            load_config(path)


# -- settle: estimated costs, token caps -------------------------------------------------------------


def _config(**kimi) -> BridgeConfig:
    return BridgeConfig(
        agents={
            "claude": AgentConfig(launcher="launchers/command_headless.sh", auto=True),
            "kimi": AgentConfig(launcher="launchers/command_headless.sh", auto=True, **kimi),
        },
        budget_time_zone="America/New_York",
    )


def _task(conn, recipient: str = "kimi") -> int:
    other = "claude" if recipient == "kimi" else "kimi"
    return messages.send_message(conn, sender=other, recipient=recipient, text="do it", agents=AGENTS, kind="task")[
        "id"
    ]


def _attempt(conn, message_id: int, config: BridgeConfig, now: float | None = None) -> None:
    begin_attempt(
        conn,
        message_id=message_id,
        config=config,
        now=now or time.time(),
        manual=False,
        supervisor_pid=1,
        supervisor_start=None,
        worker_token="t",
    )


def _kimi_diag(status: str = "error", **usage) -> dict:
    return {"cli": "kimi", "cli_status": status, "cost_usd": None, **usage}


def _notices(conn) -> list:
    return conn.execute("SELECT text FROM messages WHERE kind = 'notice' ORDER BY id").fetchall()


def test_a_cli_without_a_price_gets_an_estimated_cost_from_the_agents_prices(conn):
    config = _config(prices=PRICES)
    task = _task(conn)
    _attempt(conn, task, config)
    diagnostics = with_spend(_kimi_diag("ok", **USAGE), config.agents["kimi"], None)
    settle(conn, task, fallback="failed", diagnostics=diagnostics)
    row = get_attempt(conn, task)
    assert (row["cost_usd"], row["cost_source"], row["token_overshoot"]) == (pytest.approx(3.1), "estimated", None)


def test_a_worker_past_its_token_cap_ends_budget_exceeded_with_the_overshoot_and_one_notice(conn):
    config = _config(max_tokens_per_task=1000)
    task = _task(conn)
    _attempt(conn, task, config)
    diagnostics = with_spend(_kimi_diag(input_tokens=1500, output_tokens=20), config.agents["kimi"], None)
    assert diagnostics["cli_status"] == "budget_exceeded"
    assert settle(conn, task, fallback="failed", diagnostics=diagnostics) == "budget_exceeded"
    row = get_attempt(conn, task)
    assert (row["max_tokens"], row["token_overshoot"], row["cli_status"], row["cost_usd"]) == (
        1000,
        520,
        "budget_exceeded",
        None,
    )
    (notice,) = _notices(conn)
    assert "max_tokens_per_task 1000, 520 tokens over it" in notice["text"]


def test_a_worker_the_supervisor_ended_for_its_cap_is_budget_exceeded_even_below_it_in_the_last_report(conn):
    config = _config(max_tokens_per_task=1000)
    task = _task(conn)
    _attempt(conn, task, config)
    diagnostics = with_spend(_kimi_diag(), config.agents["kimi"], "max_tokens_per_task")
    outcome = settle(conn, task, fallback="failed", error_kind="max_tokens_per_task", diagnostics=diagnostics)
    assert (outcome, get_attempt(conn, task)["error_kind"]) == ("budget_exceeded", "max_tokens_per_task")


@pytest.mark.parametrize(
    ("usage", "stopped_for", "cap"),
    [
        ({"input_tokens": 1500, "output_tokens": 20}, None, "max_tokens_per_task"),  # seen only at the end
        ({"input_tokens": 10}, "max_tokens_per_task", "max_tokens_per_task"),  # ended for it
        ({"input_tokens": 10}, None, None),
        (None, None, None),
    ],
)
def test_the_cap_a_finished_worker_went_past(usage, stopped_for, cap):
    config = _config(max_tokens_per_task=1000)
    diagnostics = None if usage is None else _kimi_diag(**usage)
    assert ended_over_cap(diagnostics, config.agents["kimi"], stopped_for) == cap


def test_within_its_caps_a_worker_is_judged_as_before(conn):
    config = _config(max_tokens_per_task=10_000, prices=PRICES)
    task = _task(conn)
    _attempt(conn, task, config)
    diagnostics = with_spend(_kimi_diag("error", input_tokens=10), config.agents["kimi"], None)
    assert settle(conn, task, fallback="failed", diagnostics=diagnostics) == "failed"
    assert get_attempt(conn, task)["token_overshoot"] == 0


# -- the daily budget: held_budget, released the next day ---------------------------------------------


def _spent(conn, config: BridgeConfig, now: float, cost: float | None, tokens: int) -> None:
    task = _task(conn)
    _attempt(conn, task, config, now)
    diagnostics = _kimi_diag("ok", input_tokens=tokens) | ({"cost_usd": cost} if cost is not None else {})
    settle(conn, task, fallback="failed", diagnostics=diagnostics, now=now)


@pytest.mark.parametrize("cap", [{"max_cost_usd_per_day": 1.0}, {"max_tokens_per_day": 5000}])
def test_a_daily_cap_holds_the_agents_tasks_until_the_next_local_midnight(conn, monkeypatch, cap):
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        config = _config(**cap)
        day = clock.local_day_start(1_780_000_000.0)
        now = day + 10 * 3600
        _spent(conn, config, day - 60, 50.0, 10**6)  # yesterday's spend does not count
        waiting = _task(conn)
        assert queue.next_action(conn, "kimi", config, now)[0].message_id == waiting
        assert daily_budget(conn, "kimi", config, now)["reached"] is None
        assert queue.budget_hold_day(conn, "kimi", config, now) is None  # no budget_held notice
        _spent(conn, config, now - 5, 0.6, 3000)
        _spent(conn, config, now - 4, 0.4, 2000)  # today: $1.00, 5000 tokens
        picked, release = queue.next_action(conn, "kimi", config, now)
        assert picked is None and release == clock.next_local_day_start(now) == day + 86400
        assert queue.budget_hold_day(conn, "kimi", config, now) == day  # the listener's budget_held notice, once today
        backlog = queue.classify(conn, "kimi", config, now)
        assert [c.message_id for c in backlog.held_budget] == [waiting] and backlog.dispatchable == []
        facts = backlog.held_budget[0]
        assert queue.refusal_text("held_budget", facts, config).startswith(f"kimi reached its {next(iter(cap))}")
        assert "resets at 00:00 America/New_York" in queue.refusal_text("held_budget", facts, config)
        budget = daily_budget(conn, "kimi", config, now)
        assert budget["reached"] == next(iter(cap)) and budget["today_tokens"] == 5000
        assert budget["resets_at"] == clock.iso(day + 86400)
        # A manual dispatch is a human's decision: the budget does not refuse it.
        assert queue.dispatch_refusal(facts, now, config, manual=True) is None
        # The next local day: released by itself.
        tomorrow = day + 86400 + 1
        assert queue.next_action(conn, "kimi", config, tomorrow)[0].message_id == waiting
        assert queue.budget_hold_day(conn, "kimi", config, tomorrow) is None
        # Another agent is not held by kimi's spend.
        assert queue.classify(conn, "claude", config, now).held_budget == []
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_no_daily_cap_means_no_spend_query(conn, monkeypatch):
    import dispatcher.dispatch.queue as q

    def refuse(*args):
        raise AssertionError("today's spend was read for an agent without a daily cap")

    monkeypatch.setattr(q, "spend_since", refuse)
    task = _task(conn)
    assert queue.next_action(conn, "kimi", _config(), time.time())[0].message_id == task


# -- Claude's stream-json: the usage so far, before its result ----------------------------------------


def test_claude_stream_usage_counts_each_api_message_once_until_the_result():
    from dispatcher.clis.claude.results import claude_diagnostics

    def assistant(mid: str, tokens_in: int, tokens_out: int) -> str:
        usage = {"input_tokens": tokens_in, "output_tokens": tokens_out, "cache_read_input_tokens": 2}
        return json.dumps({"type": "assistant", "message": {"id": mid, "usage": usage}})

    stream = "\n".join(
        [
            json.dumps({"type": "system", "subtype": "init"}),
            assistant("m1", 100, 1),
            assistant("m1", 100, 7),  # the same message, another content block: counted once, last wins
            json.dumps({"type": "user", "message": {"content": "tool result"}}),
            assistant("m2", 300, 5),
            "not json",
        ]
    )
    running = claude_diagnostics(stream)
    assert (running["input_tokens"], running["output_tokens"], running["cache_read_tokens"]) == (400, 12, 4)
    assert running["cli_status"] == "no_result"
    result = {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "usage": {"input_tokens": 9, "output_tokens": 1},
    }
    done = claude_diagnostics(stream + "\n" + json.dumps(result))
    assert (done["input_tokens"], done["output_tokens"], done["cli_status"]) == (9, 1, "ok")  # the result wins


def test_a_daily_budget_needs_an_explicit_time_zone(tmp_path):
    """Each host's own zone could mean another day: a daily budget names the zone of its day."""
    path = tmp_path / "config.json"
    path.write_text('{"agents": {"kimi": {"launcher": "x", "max_tokens_per_day": 1000}}}')
    with pytest.raises(ConfigError, match="kimi have a daily budget, so budget_time_zone must name the time zone"):
        load_config(path)
    path.write_text('{"agents": {"kimi": {"launcher": "x", "max_tokens_per_day": 1}}, "budget_time_zone": "Mars/Base"}')
    with pytest.raises(ConfigError, match="'Mars/Base' is not a time zone this host knows; use an IANA name"):
        load_config(path)
    path.write_text('{"agents": {"kimi": {"launcher": "x"}}}')  # no daily budget: no zone needed
    assert load_config(path).budget_time_zone is None


def test_the_budgets_day_is_its_zones_whatever_the_hosts(conn, monkeypatch):
    """Two hosts in other zones (TZ) count the same day: the one of ``budget_time_zone``."""
    config = _config(max_tokens_per_day=5000)  # budget_time_zone America/New_York
    new_york_midnight = 1_780_000_000.0 - 1_780_000_000.0 % 86400 + 4 * 3600  # 00:00 EDT
    now = new_york_midnight + 3600
    _spent(conn, config, new_york_midnight - 60, 0.0, 5000)  # yesterday in New York
    for host_zone in ("Asia/Tokyo", "America/New_York", "Pacific/Kiritimati"):
        monkeypatch.setenv("TZ", host_zone)
        time.tzset()
        try:
            assert daily_budget(conn, "kimi", config, now)["reached"] is None, host_zone
            assert queue.next_action(conn, "kimi", config, now)[1] is None
        finally:
            monkeypatch.delenv("TZ")
            time.tzset()


@pytest.mark.parametrize("zone", ['"local"', '"../../etc/passwd"', '"/etc/localtime"', '""', "3", "null"])
def test_a_budget_time_zone_that_is_no_iana_name_is_refused(tmp_path, zone):
    path = tmp_path / "config.json"
    path.write_text(
        '{"agents": {"kimi": {"launcher": "x", "max_tokens_per_day": 1}}, "budget_time_zone": ' + zone + "}"
    )
    with pytest.raises(ConfigError, match="budget_time_zone"):
        load_config(path)
