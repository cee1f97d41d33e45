"""``agent-bridge costs``: the totals of the attempts table, by agent, day, sender or
conversation; reported and estimated costs kept apart and attempts of unknown cost counted,
never priced; the failure rate over finished attempts; a bad --since refused. The command runs on
both backends (its query once failed on every PostgreSQL store: an untyped ``:agent IS NULL``)."""

import json
import time

import pytest
from dispatch_harness import cli
from harness import bridge_env, on_backend, write_config

from dispatcher.bridge import messages
from dispatcher.core.config import AgentConfig, BridgeConfig
from dispatcher.dispatch.attempts import begin_attempt
from dispatcher.dispatch.outcome import settle
from dispatcher.ops.costs import summarise
from dispatcher.store import open_store

pytestmark = pytest.mark.both_backends

AGENTS = {"claude", "kimi", "codex"}
CONFIG = BridgeConfig(agents={a: AgentConfig(launcher="launchers/command_headless.sh", auto=True) for a in AGENTS})


def _row(
    agent="kimi", outcome="succeeded", cost=None, source=None, tokens=None, started=0.0, sender="claude", conv=None
):
    return {
        "agent": agent,
        "state": "finished" if outcome else "spawned",
        "outcome": outcome,
        "cost_usd": cost,
        "cost_source": source,
        "tokens": tokens,
        "started_at": started,
        "sender": sender,
        "conversation_id": conv,
    }


def test_summarise_splits_reported_estimated_and_unknown_costs_and_counts_failures():
    rows = [
        _row("claude", "succeeded", 0.5, "reported", 1000),
        _row("claude", "failed", 0.25, "reported", 500),
        _row("kimi", "budget_exceeded", 1.5, "estimated", 90000),
        _row("kimi", "blocked", None, None, 10),  # an answer, not a failure; cost unknown
        _row("codex", None, None, None, None),  # still running: no outcome yet
    ]
    report = summarise(rows, "agent")
    by = {g["key"]: g for g in report["groups"]}
    assert [g["key"] for g in report["groups"]] == ["claude", "codex", "kimi"]
    assert (by["claude"]["cost_reported_usd"], by["claude"]["failure_rate"]) == (0.75, 0.5)
    assert (by["kimi"]["cost_estimated_usd"], by["kimi"]["cost_unknown_attempts"], by["kimi"]["failure_rate"]) == (
        1.5,
        1,
        0.5,
    )
    assert (by["codex"]["finished"], by["codex"]["failure_rate"], by["codex"]["tokens"]) == (0, None, 0)
    total = report["total"]
    assert (total["attempts"], total["tokens"], total["cost_usd"], total["failed"]) == (5, 91510, 2.25, 2)
    assert total["outcomes"] == {"succeeded": 1, "failed": 1, "budget_exceeded": 1, "blocked": 1}


@pytest.mark.parametrize(
    ("by", "keys"),
    [("sender", ["claude", "kimi"]), ("conversation", ["#7", "-"]), ("day", None)],
)
def test_summarise_groups(by, keys):
    rows = [_row(sender="claude", conv=7), _row(sender="kimi", started=86400 * 3)]
    found = [g["key"] for g in summarise(rows, by)["groups"]]
    if keys is None:  # local dates, one per day
        assert len(found) == 2 and all(len(k) == 10 for k in found)
    else:
        assert sorted(found) == sorted(keys)


@pytest.fixture
def spent_env(tmp_path, backend, request):
    env = on_backend(bridge_env(tmp_path, write_config(tmp_path / "config.json")), backend, request)
    conn = open_store(env["AGENT_BRIDGE_DB"])
    now = time.time()
    plan = [  # (recipient, diagnostics, fallback, started seconds ago)
        (
            "claude",
            {"cli": "claude", "cli_status": "ok", "cost_usd": 0.125, "input_tokens": 100, "output_tokens": 5},
            1,
        ),
        ("kimi", {"cli": "kimi", "cli_status": "error", "input_tokens": 300, "cache_read_tokens": 7}, 2),
        (
            "kimi",
            {"cli": "kimi", "cli_status": "ok", "input_tokens": 40, "cost_usd": 0.5, "cost_source": "estimated"},
            3,
        ),
        ("claude", {"cli": "claude", "cli_status": "ok", "cost_usd": 9.0, "input_tokens": 1}, 30 * 86400),  # too old
    ]
    for recipient, diagnostics, ago in plan:
        sender = "kimi" if recipient == "claude" else "claude"
        task = messages.send_message(conn, sender=sender, recipient=recipient, text="t", agents=AGENTS, kind="task")
        begin_attempt(
            conn,
            message_id=task["id"],
            config=CONFIG,
            now=now - ago,
            manual=True,
            supervisor_pid=1,
            supervisor_start=None,
            worker_token="t",
        )
        settle(conn, task["id"], fallback="failed", diagnostics=diagnostics, now=now - ago + 0.5)
    conn.close()
    return env


def test_costs_totals_match_the_attempts(spent_env):
    done = cli(spent_env, "costs", "--since", "7d", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    by = {g["key"]: g for g in report["groups"]}
    assert (by["claude"]["attempts"], by["claude"]["cost_reported_usd"], by["claude"]["tokens"]) == (1, 0.125, 105)
    assert (by["kimi"]["attempts"], by["kimi"]["tokens"], by["kimi"]["cost_estimated_usd"]) == (2, 347, 0.5)
    assert by["kimi"]["cost_unknown_attempts"] == 1 and by["kimi"]["failure_rate"] == 1.0
    assert (report["total"]["attempts"], report["total"]["cost_usd"], report["total"]["tokens"]) == (3, 0.625, 452)
    # One agent, all time in 31 days.
    one = json.loads(cli(spent_env, "costs", "--agent", "claude", "--since", "31d", "--json").stdout)
    assert (one["total"]["attempts"], one["total"]["cost_usd"]) == (2, 9.125)
    text = cli(spent_env, "costs").stdout
    assert "est." in text and "1 unknown" in text and text.splitlines()[-1].startswith("total")


def test_a_bad_since_is_refused_with_what_to_write(spent_env):
    done = cli(spent_env, "costs", "--since", "a week")
    assert done.returncode != 0 and "--since 'a week' is not a duration" in done.stderr
