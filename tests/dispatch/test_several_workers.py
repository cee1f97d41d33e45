"""Several workers per agent, end to end: a real listener process, real supervisors and fake
workers that talk MCP to server.py, on a real SQLite file and a real PostgreSQL server. Overlap
is read from the store's recorded times, never from how fast anything went."""

import json
import os
import signal
from pathlib import Path

import pytest
from dispatch_harness import (
    alive,
    attempt,
    cli,
    make_launcher,
    post_task,
    query,
    start_listener,
    status,
    wait_finished,
    wait_until,
)

pytestmark = pytest.mark.both_backends

PROVEN_ON_POSTGRES = pytest.mark.postgres_proven_by(
    "test_eight_tasks_through_four_workers_nothing_launched_twice",
    "several workers of one agent on PostgreSQL, each task launched once; the caps' and budget's rules run on both backends in tests/dispatch/test_workers_budget.py and tests/store",
)


def _configure(config_path: Path, launcher: Path, total: int | None = None, **claude) -> None:
    doc: dict = {
        "agents": {
            "claude": {"auto": True, "launcher": str(launcher), "worker_timeout_seconds": 120, **claude},
            "kimi": {"auto": False, "launcher": "launchers/kimi_headless.sh"},
        },
        "budget_time_zone": "UTC",  # required once an agent has a daily budget
    }
    if total is not None:
        doc["max_workers_total"] = total
    tmp = config_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, config_path)


def _held_workers(tmp_path: Path, launchers: Path, name: str) -> tuple[Path, Path, Path]:
    """A launcher whose workers claim their task and wait for ``release`` (at most 100 s), each
    noting its message id in ``launches`` as it starts."""
    release, launches = tmp_path / f"{name}.release", tmp_path / f"{name}.launches"
    launcher = make_launcher(
        launchers,
        "claim_and_wait",
        FAKE_WORKER_RELEASE_FILE=str(release),
        FAKE_WORKER_LAUNCHES=str(launches),
        FAKE_WORKER_DELAY="100",
    )
    return launcher, release, launches


def _spawned(db_path, tasks: list[int]) -> bool:
    return all((a := attempt(db_path, t)) is not None and a["state"] == "spawned" for t in tasks)


def _launched(launches: Path) -> list[int]:
    return sorted(int(line) for line in launches.read_text().split()) if launches.exists() else []


def _attempts(db_path, tasks: list[int]) -> int:
    """How many attempts the store holds for ``tasks`` (the module's store keeps earlier tests' too)."""
    return sum(query(db_path, "SELECT count(*) FROM dispatch_attempts WHERE message_id = ?", (t,))[0][0] for t in tasks)


def _peak(done: list[dict]) -> int:
    """The most attempts running at one moment, from their recorded start and finish times."""
    edges = sorted(
        [(d["started_at"], 1) for d in done] + [(d["finished_at"], -1) for d in done], key=lambda e: (e[0], e[1])
    )
    peak = now = 0
    for _, change in edges:
        now += change
        peak = max(peak, now)
    return peak


@PROVEN_ON_POSTGRES
def test_two_tasks_run_at_once_and_a_third_waits_for_a_free_worker(env, db_path, config_path, launchers, tmp_path):
    launcher, release, launches = _held_workers(tmp_path, launchers, "two")
    _configure(config_path, launcher, max_workers=2)
    start_listener(env)
    tasks = [post_task(db_path, f"task {n}") for n in range(3)]
    wait_until(lambda: _spawned(db_path, tasks[:2]), what="two workers running")
    # The third is held for a worker, and every view shows both running attempts.
    shown = wait_until(lambda: (s := status(env))["progress"] and s["progress"].get("held") == "max_workers" and s)
    assert attempt(db_path, tasks[2]) is None
    assert [r["message_id"] for r in shown["progress"]["running"]] == tasks[:2]
    line = cli(env, "listener", "progress", "--agent", "claude", "--once").stdout
    assert f"supervising 2/2 msg#{tasks[0]} " in line and f"; msg#{tasks[1]} " in line, line
    assert "next task held (max_workers)" in line, line
    release.touch()
    done = [wait_finished(db_path, t) for t in tasks]
    assert [d["outcome"] for d in done] == ["succeeded"] * 3
    first, second, third = done
    # Their running intervals overlap, as the store recorded them.
    assert first["worker_started_at"] < second["finished_at"] and second["worker_started_at"] < first["finished_at"]
    # The third started only once a worker was free.
    assert third["started_at"] >= min(first["finished_at"], second["finished_at"])
    assert _launched(launches) == sorted(tasks)


@PROVEN_ON_POSTGRES
def test_kill_9_of_the_listener_with_two_workers_running(env, db_path, config_path, launchers, tmp_path):
    """Its supervisors run on (each in its own session) and settle their own attempts; the next
    listener counts them against max_workers, launches neither again, and holds a new task."""
    launcher, release, launches = _held_workers(tmp_path, launchers, "kill9")
    _configure(config_path, launcher, max_workers=2)
    listener = start_listener(env)
    tasks = [post_task(db_path, f"task {n}") for n in range(2)]
    wait_until(lambda: _spawned(db_path, tasks), what="two workers running")
    supervisors = [(attempt(db_path, t)["supervisor_pid"], attempt(db_path, t)["supervisor_start_time"]) for t in tasks]
    listener.send_signal(signal.SIGKILL)
    listener.wait(timeout=60)  # (its pipes stay open while its supervisors, which inherited them, run)
    assert all(alive(pid, start) for pid, start in supervisors)
    start_listener(env)
    later = post_task(db_path, "a task sent while both run")
    shown = wait_until(lambda: (s := status(env))["progress"] and s["progress"].get("held") == "max_workers" and s)
    assert [r["message_id"] for r in shown["progress"]["running"]] == tasks  # from before this listener
    assert attempt(db_path, later) is None
    release.touch()
    done = [wait_finished(db_path, t) for t in [*tasks, later]]
    assert [d["outcome"] for d in done] == ["succeeded"] * 3
    assert [d["supervisor_pid"] for d in done[:2]] == [pid for pid, _ in supervisors]  # settled by their own
    assert _launched(launches) == sorted([*tasks, later])  # nothing launched twice
    assert _attempts(db_path, [*tasks, later]) == 3


@PROVEN_ON_POSTGRES
def test_a_daily_budget_holds_the_second_of_two_tasks_sent_together(env, db_path, config_path, launchers):
    """No per-task cap bounds a running worker, so with a daily cap the second waits until the
    first has ended (spend.daily_budget_hold), even with max_workers 2, and `listener pending`
    says so. Each worker takes 8 s by itself: a listener without the rule would have started the
    second long before."""
    launcher = make_launcher(launchers, "slow", FAKE_WORKER_DELAY="8")
    _configure(config_path, launcher, max_workers=2, max_tokens_per_day=1_000_000)
    start_listener(env)
    first, second = post_task(db_path, "first"), post_task(db_path, "second")
    held = wait_until(lambda: json.loads(cli(env, "listener", "pending", "--agent", "claude").stdout)["held_budget"])
    assert [(h["id"], h["daily_cap"], h["budget_running"], h["release_in_seconds"]) for h in held] == [
        (second, "max_tokens_per_day", True, None)
    ]
    one, two = wait_finished(db_path, first), wait_finished(db_path, second)
    assert (one["outcome"], two["outcome"]) == ("succeeded", "succeeded")
    assert two["started_at"] >= one["finished_at"]


def test_eight_tasks_through_four_workers_nothing_launched_twice(env, db_path, config_path, launchers, tmp_path):
    launches = tmp_path / "eight.launches"
    launcher = make_launcher(launchers, "slow", FAKE_WORKER_DELAY="2", FAKE_WORKER_LAUNCHES=str(launches))
    _configure(config_path, launcher, max_workers=4)
    start_listener(env)
    tasks = [post_task(db_path, f"task {n}") for n in range(8)]
    done = [wait_finished(db_path, t) for t in tasks]
    assert [d["outcome"] for d in done] == ["succeeded"] * 8
    assert _launched(launches) == sorted(tasks)
    assert _attempts(db_path, tasks) == 8
    assert 2 <= _peak(done) <= 4


@PROVEN_ON_POSTGRES
def test_the_machine_wide_cap_holds_a_task_with_a_reason_the_views_show(env, db_path, config_path, launchers, tmp_path):
    launcher, release, launches = _held_workers(tmp_path, launchers, "total")
    _configure(config_path, launcher, total=1, max_workers=2)
    start_listener(env)
    first, second = post_task(db_path, "first"), post_task(db_path, "second")
    wait_until(lambda: _spawned(db_path, [first]), what="one worker running")
    wait_until(lambda: (status(env)["progress"] or {}).get("held") == "max_workers_total", what="held by the cap")
    assert attempt(db_path, second) is None
    line = cli(env, "listener", "progress", "--agent", "claude", "--once").stdout
    assert "next task held (max_workers_total)" in line, line
    release.touch()
    one, two = wait_finished(db_path, first), wait_finished(db_path, second)
    assert (one["outcome"], two["outcome"]) == ("succeeded", "succeeded")
    assert two["started_at"] >= one["finished_at"]
    assert _launched(launches) == [first, second]
