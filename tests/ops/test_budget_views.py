"""A daily budget reached shows wherever a user looks: ``listener pending`` (held_budget),
``listener status`` (budget), ``top`` (today's spend), ``doctor`` (budget_reached) and the
status line ("budget reached, resets at 00:00 UTC", the budget's zone); ``doctor`` also names the agents whose
cost nothing can tell (a CLI without a price and no ``prices`` block)."""

import json
import os
import time
from pathlib import Path

import pytest
from dispatch_harness import cli
from harness import bridge_env, write_config

from dispatcher.bridge import messages
from dispatcher.core.config import load_config
from dispatcher.dispatch.attempts import begin_attempt
from dispatcher.dispatch.outcome import settle
from dispatcher.store import open_store

AGENTS = {"claude", "kimi", "codex"}


@pytest.fixture
def capped_env(tmp_path):
    config = write_config(
        tmp_path / "config.json",
        {
            "claude": {"auto": True, "launcher": "launchers/claude_headless.sh", "max_cost_usd_per_day": 0.5},
            "kimi": {"auto": True, "launcher": "launchers/kimi_headless.sh", "max_tokens_per_day": 1000},
            "codex": {
                "auto": True,
                "launcher": "launchers/codex_headless.sh",
                "prices": {"input": 1.25, "output": 10},
            },
        },
        budget_time_zone="UTC",
    )
    env = bridge_env(tmp_path, config)
    conn = open_store(env["AGENT_BRIDGE_DB"])
    loaded = load_config(config)
    task = messages.send_message(conn, sender="claude", recipient="kimi", text="t", agents=AGENTS, kind="task")["id"]
    begin_attempt(
        conn,
        message_id=task,
        config=loaded,
        now=time.time() - 5,
        manual=True,
        supervisor_pid=1,
        supervisor_start=None,
        worker_token="t",
    )
    settle(conn, task, fallback="failed", diagnostics={"cli": "kimi", "cli_status": "ok", "input_tokens": 1200})
    waiting = messages.send_message(conn, sender="claude", recipient="kimi", text="t2", agents=AGENTS, kind="task")
    conn.close()
    return {**env, "waiting": str(waiting["id"])}


def _json(done):
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)


def test_a_reached_daily_budget_shows_in_pending_status_top_doctor_and_the_status_line(capped_env):
    env = {k: v for k, v in capped_env.items() if k != "waiting"}
    pending = _json(cli(env, "listener", "pending", "--agent", "kimi"))
    assert [m["id"] for m in pending["held_budget"]] == [int(capped_env["waiting"])] and pending["dispatchable"] == []
    assert pending["held_budget"][0]["daily_cap"] == "max_tokens_per_day"
    budget = _json(cli(env, "listener", "status", "--agent", "kimi"))["budget"]
    assert (budget["reached"], budget["today_tokens"], budget["max_tokens_per_day"]) == (
        "max_tokens_per_day",
        1200,
        1000,
    )
    assert _json(cli(env, "listener", "status", "--agent", "claude"))["budget"]["reached"] is None
    assert cli(env, "statusline").stdout.count("budget reached, resets at 00:00 UTC") == 1
    assert "[kimi] stopped · 2 unread · budget reached" in cli(env, "statusline").stdout

    findings = _json(cli(env, "doctor", "--json"))["findings"]
    by = {(f["code"], f["agent"]): f for f in findings}
    assert "budget reached, resets at 00:00 UTC" in by[("budget_reached", "kimi")]["message"]
    assert ("budget_reached", "claude") not in by
    assert by[("cost_unknown", "kimi")]["level"] == "ok" and "prices" in by[("cost_unknown", "kimi")]["fix"]
    assert by[("cost_known", "claude")]["message"] == "cost: its CLI reports it"
    assert by[("cost_known", "codex")]["message"] == "cost: estimated from its prices"


def test_top_shows_todays_spend_per_agent_and_a_reached_budget(capped_env, monkeypatch):
    pytest.importorskip("rich")
    for key, value in capped_env.items():
        if key != "waiting":
            monkeypatch.setenv(key, value)
    from rich.console import Console

    from dispatcher.core.settings import BridgeSettings
    from dispatcher.ops.top import render, snapshot

    snap = snapshot(BridgeSettings())
    today = {a["agent"]: a["today"] for a in snap["agents"]}
    assert today["kimi"] == {"cost_usd": None, "tokens": 1200, "reached": "max_tokens_per_day", "zone": "UTC"}
    assert today["claude"] == {"cost_usd": None, "tokens": None, "reached": None, "zone": "UTC"}
    with open(os.devnull, "w") as sink:
        console = Console(record=True, width=200, file=sink)
        console.print(render(snap))
        text = console.export_text()
    assert "1,200 tok budget reached, resets at 00:00 UTC" in text


def test_doctor_warns_when_a_cost_cap_cannot_apply(tmp_path):
    config = write_config(
        tmp_path / "config.json",
        {"gemini": {"auto": True, "launcher": "launchers/gemini_headless.sh", "max_cost_usd_per_task": 1}},
    )
    findings = _json(cli(bridge_env(tmp_path, config), "doctor", "--json"))["findings"]
    [unknown] = [f for f in findings if f["code"] == "cost_unknown"]
    assert unknown["level"] == "warn" and "cost caps cannot apply" in unknown["message"]


def test_doctor_the_status_line_and_top_agree_on_what_a_person_must_see(capped_env, tmp_path, monkeypatch):
    """The findings shown while working (a reached budget, a launcher that cannot run, a stopped
    listener) come from one table: doctor reports them for the agents the status line and top show
    them for, in the table's words (the budget's zone, UTC here, filled in)."""
    pytest.importorskip("rich")
    from rich.console import Console

    from dispatcher.core.findings import CODES, STATUSLINE
    from dispatcher.core.settings import BridgeSettings
    from dispatcher.dispatch.statusline import SEPARATOR
    from dispatcher.ops.top import render, snapshot

    launcher = tmp_path / "kimi_headless.sh"
    launcher.write_text("#!/bin/sh\nexit 0\n")
    launcher.chmod(0o644)  # not executable: launcher_not_executable
    path = Path(capped_env["AGENT_BRIDGE_CONFIG"])
    config = json.loads(path.read_text())
    config["agents"]["kimi"]["launcher"] = str(launcher)
    path.write_text(json.dumps(config))
    env = {k: v for k, v in capped_env.items() if k != "waiting"}

    surfaced = {code for code, entry in CODES.items() if STATUSLINE in entry.surfaces}
    findings = _json(cli(env, "doctor", "--json"))["findings"]
    doctor = {(f["agent"], f["code"]) for f in findings if f["code"] in surfaced}
    assert {
        ("kimi", "budget_reached"),
        ("kimi", "launcher_not_executable"),
        ("claude", "listener_not_running"),
    } <= doctor

    def said(text_of_agent: dict[str, str]) -> set[tuple[str, str]]:
        return {
            (a, code) for a, text in text_of_agent.items() for code in surfaced if CODES[code].said(zone="UTC") in text
        }

    line = cli(env, "statusline").stdout.strip()
    assert said({part.split("]", 1)[0].lstrip("["): part for part in line.split(SEPARATOR)}) == doctor, line

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with open(os.devnull, "w") as sink:
        console = Console(record=True, width=400, file=sink)
        console.print(render(snapshot(BridgeSettings())))
        rows = console.export_text().splitlines()
    by_agent = {a: next(r for r in rows if r.startswith(f"│ {a} ")) for a in AGENTS}  # each agent's row
    assert said(by_agent) == doctor, by_agent
