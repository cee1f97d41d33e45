"""Crash-point injection: the supervisor is SIGKILLed at each named point of the dispatch
path (dispatcher/dispatch/faults.py), deterministically. Whatever the point, the promise
holds: launched at most once, exactly one terminal outcome, the failure notice sent once,
the conversation blocked, the request file gone, and the store intact. With a worker that
succeeds and reports a cost, a verdict reached after a crash is the same as a normal finish:
the cost is in the ledger, the conversation's cost cap fires, and a success carries no error kind."""

import json
from pathlib import Path

import pytest
from dispatch_harness import (
    attempt,
    integrity,
    log_events,
    make_launcher,
    notices_for,
    post_task,
    query,
    start_listener,
    stop_listener,
    wait_finished,
    wait_until,
    write_config_atomic,
)

from dispatcher.dispatch.faults import POINTS

pytestmark = pytest.mark.both_backends

PROVEN_ON_POSTGRES = pytest.mark.postgres_proven_by(
    "test_a_costed_success_keeps_its_ledger_whatever_point_the_supervisor_dies_at",
    "the same kill points on PostgreSQL, each followed by reconciliation, with a costed attempt's ledger besides",
)

# point -> (outcome, error_kind, launches): before the gate opens the launcher never runs.
EXPECTED = {
    "after_barrier": ("crashed", "supervisor_gone", 0),
    "after_spawn": ("crashed", "supervisor_gone", 0),
    "record_pid": ("crashed", "supervisor_gone", 0),
    "after_pid_recorded": ("crashed", "worker_gone", 0),
    "before_verdict_commit": ("crashed", "worker_gone", 1),
    "after_verdict_commit": ("failed", "no_evidence", 1),
    "after_request_removed": ("failed", "no_evidence", 1),
}


def test_every_point_is_covered():
    assert set(EXPECTED) == set(POINTS)


def costed_expected(point: str) -> tuple[str, str | None, int, float | None, str]:
    """(outcome, error_kind, launches, cost_usd, conversation state) with the costed worker: once it
    has run, its success and its cost hold whoever settles the attempt."""
    outcome, error_kind, launched = EXPECTED[point]
    if not launched:
        return outcome, error_kind, 0, None, "blocked"
    return "succeeded", None, 1, COST, "needs_human"  # the cost is above the conversation's cap


COST, CAP = 0.25, 0.1


@pytest.fixture
def launches(env, bridge_root, request) -> Path:
    path = bridge_root / "launches.txt"
    directory = bridge_root / "launchers"
    directory.mkdir(exist_ok=True)
    if request.param == "noop":  # answers nothing: every attempt ends as a failure, so notices and blocks show
        launcher = make_launcher(directory, "noop", FAKE_WORKER_LAUNCHES=str(path))
    else:  # succeeds, and its launcher reports what the CLI cost
        diagnostics = json.dumps({"cli_status": "ok", "cost_usd": COST})
        launcher = make_launcher(
            directory, "succeed", FAKE_WORKER_LAUNCHES=str(path), FAKE_WORKER_DIAGNOSTICS=f"'{diagnostics}'"
        )
    write_config_atomic(Path(env["AGENT_BRIDGE_CONFIG"]), launcher)
    return path


def run_to_the_end(env, db_path, launches, point: str, **task) -> tuple[int, dict]:
    listener = start_listener({**env, "AGENT_BRIDGE_FAULT_POINT": point})
    try:
        task_id = post_task(db_path, f"crash at {point}", conversation=True, **task)
        exited = wait_until(
            lambda: [e for e in log_events(env, "supervisor_exited") if e["message_id"] == task_id],
            what="supervisor exit",
        )
        assert exited[0]["status"] == -9  # the fault point fired: SIGKILL
        done = wait_finished(db_path, task_id)
        request = Path(env["AGENT_BRIDGE_RUNTIME_DIR"]) / "attempts" / str(task_id) / "request.md"
        wait_until(lambda: not request.exists(), what="request file removed")
    finally:
        stop_listener(listener)
    assert integrity(db_path) == "ok"
    assert len(query(db_path, "SELECT 1 FROM dispatch_attempts WHERE message_id = ?", (task_id,))) == 1
    assert attempt(db_path, task_id)["state"] == "finished"
    assert len(notices_for(db_path, task_id)) == 1
    return task_id, done


def launch_count(launches: Path, task: int) -> int:
    return launches.read_text().split().count(str(task)) if launches.exists() else 0


def conversation_state(db_path, task: int) -> list[str]:
    rows = query(
        db_path,
        "SELECT c.state FROM conversations c JOIN messages m ON m.conversation_id = c.id WHERE m.id = ?",
        (task,),
    )
    return [r[0] for r in rows]


@pytest.mark.parametrize("launches", ["noop"], indirect=True)
@pytest.mark.parametrize("point", POINTS)
@PROVEN_ON_POSTGRES
def test_a_supervisor_killed_at_a_point_still_keeps_the_promise(env, db_path, launches, point):
    outcome, error_kind, launched = EXPECTED[point]
    task, done = run_to_the_end(env, db_path, launches, point)
    assert (done["outcome"], done["error_kind"]) == (outcome, error_kind)
    assert launch_count(launches, task) == launched
    assert conversation_state(db_path, task) == ["blocked"]


@pytest.mark.parametrize("launches", ["costed"], indirect=True)
@pytest.mark.parametrize("point", POINTS)
def test_a_costed_success_keeps_its_ledger_whatever_point_the_supervisor_dies_at(env, db_path, launches, point):
    """A supervisor that dies after its worker succeeded does not lose the attempt's cost: the
    attempt settled by reconciliation carries the cost its launcher reported, the conversation's
    cost cap fires, and a success never carries an error kind (not worker_gone)."""
    outcome, error_kind, launched, cost, state = costed_expected(point)
    task, done = run_to_the_end(env, db_path, launches, point, max_cost_usd=CAP)
    assert (done["outcome"], done["error_kind"], done["cost_usd"]) == (outcome, error_kind, cost)
    assert launch_count(launches, task) == launched
    assert conversation_state(db_path, task) == [state]
