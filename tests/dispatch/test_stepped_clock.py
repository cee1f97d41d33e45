"""A worker's budget, its claim renewal and the attempt's duration run on the monotonic clock.

With the wall clock stepped back one hour mid-attempt, the supervisor used to let the worker
run an hour past its budget; stepped forward, it killed a healthy worker as ``timeout`` at
once, and the recorded duration was the step's length (or below zero). Here a real supervisor
(``agent-bridge dispatch``) runs with its wall clock stepped mid-attempt: ``clock.now``, the
one reader of the wall clock, adds the seconds a file names (as a step of the system clock
would, without touching the machine's clock)."""

import json
import os
import subprocess
import sys

from dispatch_harness import attempt, make_launcher, post_task, wait_until, write_config_atomic
from harness import PROJECT

from dispatcher.dispatch.attempts import finish_attempt, get_attempt
from dispatcher.store.attempts import insert_attempt
from dispatcher.store.messages import insert_message

STEPPED_DISPATCH = """
import sys
from pathlib import Path
from dispatcher.core import clock

step, real = Path(sys.argv[2]), clock.now

def stepped():
    try:
        return real() + float(step.read_text())
    except (OSError, ValueError):
        return real()

clock.now = stepped
from dispatcher.ops.cli import main
main(["dispatch", sys.argv[1]])
"""


def _dispatch_stepped(env, db_path, tmp_path, message_id: int, step_seconds: float) -> dict:
    """Run the attempt; once its worker runs, step the wall clock by ``step_seconds``."""
    step = tmp_path / "step"
    proc = subprocess.Popen(
        [sys.executable, "-c", STEPPED_DISPATCH, str(message_id), str(step)],
        cwd=PROJECT,
        env={**os.environ, **env},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(lambda: (a := attempt(db_path, message_id)) and a["state"] == "spawned", what="the worker to run")
        step.write_text(str(step_seconds))
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert out, err
    return json.loads(out)


def test_a_wall_clock_stepped_back_does_not_stretch_the_budget(env, config_path, launchers, db_path, tmp_path):
    write_config_atomic(config_path, make_launcher(launchers, "hang"), auto=False, timeout=3)
    message_id = post_task(db_path, "hang, then be stepped back")
    result = _dispatch_stepped(env, db_path, tmp_path, message_id, -3600)
    assert (result["outcome"], result["error_kind"]) == ("timeout", "timeout")
    row = attempt(db_path, message_id)
    assert 2.5 <= row["duration_seconds"] < 60, row["duration_seconds"]


def test_a_wall_clock_stepped_forward_does_not_cut_the_budget(env, config_path, launchers, db_path, tmp_path):
    write_config_atomic(config_path, make_launcher(launchers, "slow", FAKE_WORKER_DELAY="2"), auto=False, timeout=60)
    message_id = post_task(db_path, "work a little, then be stepped forward")
    result = _dispatch_stepped(env, db_path, tmp_path, message_id, 3600)
    assert (result["outcome"], result["error_kind"]) == ("succeeded", None)
    row = attempt(db_path, message_id)
    assert 0 <= row["duration_seconds"] < 60, row["duration_seconds"]


def _recorded(conn, started_at: float) -> int:
    message_id = insert_message(conn, sender="kimi", recipient="claude", text="t", kind="task", created_at=started_at)
    insert_attempt(
        conn,
        message_id=message_id,
        agent="claude",
        started_at=started_at,
        supervisor_pid=1,
        supervisor_start_time=None,
        deadline=started_at + 60,
        worker_token="t",
        max_cost_usd=None,
        permission_level="bridge",
        host="here",
        lease_expires_at=started_at + 60,
    )
    return message_id


def test_a_duration_from_wall_times_is_never_negative(conn):
    """Settled by another process (reconciliation), the duration comes from wall times: a clock
    stepped back between start and finish gives 0, not a negative duration."""
    message_id = _recorded(conn, started_at=10_000.0)
    assert finish_attempt(conn, message_id, outcome="crashed", now=6_400.0)
    assert get_attempt(conn, message_id)["duration_seconds"] == 0


def test_a_measured_duration_wins_over_wall_times(conn):
    message_id = _recorded(conn, started_at=10_000.0)
    assert finish_attempt(conn, message_id, outcome="succeeded", now=13_600.0, duration_seconds=2.5)
    assert get_attempt(conn, message_id)["duration_seconds"] == 2.5
