"""Crash-point injection: the supervisor is SIGKILLed at each named point of the dispatch
path (dispatcher/dispatch/faults.py), deterministically. Whatever the point, the promise
holds: launched at most once, exactly one terminal outcome, the failure notice sent once,
the conversation blocked, the request file gone, and the store intact."""

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


@pytest.fixture(scope="module")
def launches(env, bridge_root) -> Path:
    path = bridge_root / "launches.txt"
    directory = bridge_root / "launchers"
    directory.mkdir()
    # A worker that answers nothing: every attempt ends as a failure, so notices and blocks show.
    write_config_atomic(
        Path(env["AGENT_BRIDGE_CONFIG"]), make_launcher(directory, "noop", FAKE_WORKER_LAUNCHES=str(path))
    )
    return path


@pytest.mark.parametrize("point", POINTS)
def test_a_supervisor_killed_at_a_point_still_keeps_the_promise(env, db_path, launches, point):
    outcome, error_kind, launched = EXPECTED[point]
    listener = start_listener({**env, "AGENT_BRIDGE_FAULT_POINT": point})
    try:
        task = post_task(db_path, f"crash at {point}", conversation=True)
        exited = wait_until(
            lambda: [e for e in log_events(env, "supervisor_exited") if e["message_id"] == task], what="supervisor exit"
        )
        assert exited[0]["status"] == -9  # the fault point fired: SIGKILL
        done = wait_finished(db_path, task)
        assert (done["outcome"], done["error_kind"]) == (outcome, error_kind)
        ran = launches.read_text().split().count(str(task)) if launches.exists() else 0
        assert ran == launched
        assert len(notices_for(db_path, task)) == 1
        conversation = query(
            db_path,
            "SELECT c.state FROM conversations c JOIN messages m ON m.conversation_id = c.id WHERE m.id = ?",
            (task,),
        )
        assert [r[0] for r in conversation] == ["blocked"]
        request = Path(env["AGENT_BRIDGE_RUNTIME_DIR"]) / "attempts" / str(task) / "request.md"
        wait_until(lambda: not request.exists(), what="request file removed")
        assert integrity(db_path) == "ok"
        assert len(query(db_path, "SELECT 1 FROM dispatch_attempts WHERE message_id = ?", (task,))) == 1
        assert attempt(db_path, task)["state"] == "finished"
    finally:
        stop_listener(listener)
