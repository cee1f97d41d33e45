"""The ledger end to end: the real listener and supervisor, a launcher that leaves a Claude result
file (as claude_headless.sh does) before running a fake worker over the real bridge, the real
server.py over MCP stdio for the sender. Also the retention schedule run by the real listener."""

import json
import os
import sqlite3
import time
from pathlib import Path

import pytest
from dispatch_harness import FAKE_WORKER, attempt, start_listener, status, wait_finished, wait_until

pytestmark = pytest.mark.both_backends

CLAUDE_RESULT = {
    "type": "result",
    "subtype": "error_max_budget_usd",
    "is_error": True,
    "num_turns": 3,
    "terminal_reason": "budget_exhausted",
    "result": "partial CANARY-e2e",
    "total_cost_usd": 0.0731,
    "usage": {
        "input_tokens": 5400,
        "output_tokens": 800,
        "cache_read_input_tokens": 12,
        "cache_creation_input_tokens": 7,
    },
    "permission_denials": [],
    "session_id": "s-1",
}


def _launcher(directory: Path, name: str, mode: str, result: dict, cap_file: Path) -> Path:
    """Writes the CLI's result file where claude_headless.sh sends it, notes the cap it was given,
    then runs the fake worker in ``mode``."""
    source = directory / f"{name}.json"
    source.write_text(json.dumps(result))
    path = directory / f"{name}.sh"
    path.write_text(
        "#!/bin/sh\n"
        f'printf "%s" "${{AGENT_BRIDGE_MAX_COST_USD-unset}}" > "{cap_file}"\n'
        f'cat "{source}" > "$AGENT_BRIDGE_ATTEMPT_DIR/claude-result.json"\n'
        f'FAKE_WORKER_MODE={mode} exec "$AGENT_BRIDGE_PYTHON" {FAKE_WORKER} "$@"\n'
    )
    path.chmod(0o755)
    return path


def _config(config_path: Path, launcher: Path, cap: float | None = 0.05, retention: int | None = None) -> None:
    claude = {"auto": True, "launcher": str(launcher), "worker_timeout_seconds": 60}
    if cap is not None:
        claude["max_cost_usd_per_task"] = cap
    doc = {"agents": {"claude": claude, "kimi": {"auto": False, "launcher": "launchers/kimi_headless.sh"}}}
    if retention is not None:
        doc["attempt_retention_days"] = retention
    tmp = config_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, config_path)


def test_a_conversation_over_its_cost_cap_needs_a_human_and_the_totals_show_everywhere(
    env, config_path, launchers, db_path, kimi, tmp_path
):
    cap_file = tmp_path / "cap"
    _config(config_path, _launcher(launchers, "overshoot", "succeed", CLAUDE_RESULT, cap_file))
    started = kimi.ok("start_conversation", recipient="claude", goal="MODE=succeed CANARY-e2e", max_cost_usd=0.05)
    assert started["max_cost_usd"] == 0.05
    task, cid = started["message_id"], started["conversation_id"]
    start_listener(env)
    row = wait_finished(db_path, task)

    # The CLI overshot its cap between turns, but the work was done: the store's evidence decides.
    assert row["outcome"] == "succeeded" and row["cli_status"] == "budget_exceeded"
    assert cap_file.read_text() == "0.05"  # the launcher was given the per-task cap
    assert (
        row["cost_usd"],
        row["input_tokens"],
        row["output_tokens"],
        row["cache_read_tokens"],
        row["cache_write_tokens"],
    ) == (0.0731, 5400, 800, 12, 7)
    assert (row["max_cost_usd"], row["cost_overshoot_usd"]) == (0.05, 0.0231)

    dispatch = kimi.ok("get_message", message_id=task)["dispatch"]
    assert (
        dispatch["outcome"],
        dispatch["cost_usd"],
        dispatch["input_tokens"],
        dispatch["output_tokens"],
        dispatch["cost_overshoot_usd"],
    ) == ("succeeded", 0.0731, 5400, 800, 0.0231)
    conv = kimi.ok("conversation", action="status", conversation_id=cid)
    assert conv["state"] == "needs_human" and conv["max_cost_usd"] == 0.05
    assert conv["totals"] == {"attempts": 1, "cost_usd": 0.0731, "input_tokens": 5400, "output_tokens": 800}
    assert conv["transitions"][-1]["reason"] == "budget_exhausted"
    notices = [m for m in kimi.ok("receive_messages")["messages"] if m["kind"] == "notice"]
    assert len(notices) == 1 and "reached its cost cap" in notices[0]["text"]
    assert "CANARY" not in notices[0]["text"]
    report = status(env)
    totals = report["totals"]
    assert totals["all_time"]["cost_usd"] >= 0.0731 and totals["today"]["attempts"] >= 1
    runtime = Path(env["AGENT_BRIDGE_RUNTIME_DIR"])
    for text in (
        json.dumps(report),
        (runtime / "dispatcher.log").read_text(),
        (runtime / "claude.progress.json").read_text(),
        json.dumps(dict(row)),
    ):
        assert "CANARY" not in text  # the ledger is payload-free: the task text stays in the store

    # The claude worker's result is the in-flight review turn for kimi; kimi is not dispatched
    # (auto off), and neither is anything more in a conversation that needs a human.
    refused = kimi.call(
        "send_message",
        recipient="claude",
        text="more",
        kind="task",
        reply_to=conv["in_flight"]["id"],
        conversation_id=cid,
    )
    assert refused.is_error and refused.code == "conversation_not_active"


def test_a_budget_stop_is_its_own_outcome_with_one_notice(env, config_path, launchers, db_path, kimi, tmp_path):
    cap_file = tmp_path / "cap"
    _config(config_path, _launcher(launchers, "budget_stop", "noop", CLAUDE_RESULT, cap_file), cap=0.05)
    task = kimi.ok("send_message", recipient="claude", text="MODE=silent CANARY-e2e", kind="task")["id"]
    start_listener(env)
    row = wait_finished(db_path, task)
    # Claude stopped itself at its cost cap: the verdict names the cap its final report passed.
    assert (row["outcome"], row["error_kind"], row["cli_status"]) == (
        "budget_exceeded",
        "max_cost_usd_per_task",
        "budget_exceeded",
    )
    assert row["cost_overshoot_usd"] == 0.0231
    # The listener records the verdict in its progress document once its supervisor has returned.
    last = wait_until(lambda: (l := status(env)["last"]) and l["message_id"] == task and l, what="progress shows it")
    assert last["result"] == "budget_exceeded"
    notices = [m for m in kimi.ok("receive_messages")["messages"] if m["kind"] == "notice" and m["reply_to"] == task]
    assert len(notices) == 1
    assert "ended: budget_exceeded (max_cost_usd_per_task)" in notices[0]["text"]
    assert "cost $0.0731, max_cost_usd_per_task $0.0500" in notices[0]["text"]


def test_without_a_cap_the_launcher_gets_none(env, config_path, launchers, db_path, kimi, tmp_path, monkeypatch):
    cap_file = tmp_path / "cap"
    result = {**CLAUDE_RESULT, "subtype": "success", "is_error": False, "terminal_reason": "completed"}
    _config(config_path, _launcher(launchers, "no_cap", "succeed", result, cap_file), cap=None)
    task = kimi.ok("send_message", recipient="claude", text="MODE=succeed", kind="task")["id"]
    start_listener({**env, "AGENT_BRIDGE_MAX_COST_USD": "99"})  # an inherited value is not passed on
    row = wait_finished(db_path, task)
    assert (row["outcome"], row["cli_status"], row["max_cost_usd"], row["cost_overshoot_usd"]) == (
        "succeeded",
        "ok",
        None,
        None,
    )
    assert cap_file.read_text() == "unset"


# -- retention ------------------------------------------------------------------------------------------


def _plant(
    db: Path,
    runtime: Path,
    message_id: int,
    *,
    state: str | None,
    finished_days_ago: float | None,
    mtime_days_ago: float = 0.0,
    agent: str = "claude",
) -> Path:
    now = time.time()
    conn = sqlite3.connect(db, timeout=30)
    try:
        with conn:
            conn.execute(
                "INSERT INTO messages (id, sender, recipient, kind, text, created_at, acknowledged_at)"
                " VALUES (?, 'kimi', ?, 'task', 'CANARY-old', ?, ?)",
                (message_id, agent, now - 9 * 86400, now),
            )
            if state is not None:
                finished = None if finished_days_ago is None else now - finished_days_ago * 86400
                conn.execute(
                    "INSERT INTO dispatch_attempts (message_id, agent, state, outcome, started_at, finished_at,"
                    " supervisor_pid, supervisor_start_time) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        message_id,
                        agent,
                        state,
                        "succeeded" if state == "finished" else None,
                        now - 9 * 86400,
                        finished,
                        os.getpid(),
                        None,
                    ),
                )
    finally:
        conn.close()
    directory = runtime / "attempts" / str(message_id)
    (directory / "home" / "sessions").mkdir(parents=True, mode=0o700)
    (directory / "worker.log").write_text("CANARY-old\n")
    (directory / "home" / "sessions" / "s.jsonl").write_text("CANARY-old\n")
    (directory / "home" / "sessions").chmod(0o500)  # a CLI may leave read-only directories
    stamp = now - mtime_days_ago * 86400
    os.utime(directory, (stamp, stamp))
    return directory


@pytest.mark.sqlite_only("it plants old rows with ids of its own, which a PostgreSQL identity would hand out again")
def test_the_listener_prunes_finished_attempt_directories_past_the_retention(env, config_path, launchers, db_path):
    runtime = Path(env["AGENT_BRIDGE_RUNTIME_DIR"])
    _config(config_path, launchers / "unused.sh", retention=7)
    old = _plant(db_path, runtime, 9001, state="finished", finished_days_ago=8)
    fresh = _plant(db_path, runtime, 9002, state="finished", finished_days_ago=6)
    # Unsettled, its supervisor gone (a pid without a start time is never taken as alive): the
    # listener settles it as crashed first, so it finished just now, and its directory stays.
    unsettled = _plant(db_path, runtime, 9003, state="spawned", finished_days_ago=None, mtime_days_ago=30)
    orphan_old = _plant(db_path, runtime, 9004, state=None, finished_days_ago=None, mtime_days_ago=8)
    orphan_new = _plant(db_path, runtime, 9005, state=None, finished_days_ago=None, mtime_days_ago=1)
    other_agent = _plant(db_path, runtime, 9006, state="finished", finished_days_ago=30, agent="kimi")
    start_listener(env)
    wait_until(lambda: not old.exists() and not orphan_old.exists(), what="the old attempt directories to go")
    # Nothing within the retention is touched, nor another agent's (its own listener prunes it).
    assert attempt(db_path, 9003)["outcome"] == "crashed"
    for kept in (fresh, unsettled, orphan_new, other_agent):
        assert (kept / "worker.log").exists(), kept
