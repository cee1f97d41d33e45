"""kill -9 in the middle of a dispatch, restarts, duplicates and disable/enable."""

import os
import signal
from pathlib import Path

import pytest
from dispatch_harness import (
    attempt,
    cli,
    make_launcher,
    start_listener,
    status,
    wait_finished,
    wait_until,
    write_config_atomic,
)
from harness import sql

from dispatcher.dispatch import cgroups

pytestmark = pytest.mark.both_backends

PROVEN_ON_POSTGRES = pytest.mark.postgres_proven_by(
    "test_kill_supervisor_mid_dispatch_success_is_still_recognised",
    "kill -9 mid dispatch and reconciliation on PostgreSQL (with test_kill_listener_mid_dispatch_then_restart); the reconciliation rules run on both backends in tests/faults/test_crash_points.py",
)


@pytest.fixture(scope="module")
def launches(bridge_root) -> Path:
    return bridge_root / "launches.txt"


@pytest.fixture(scope="module")
def slow_config(env, bridge_root, launches):
    directory = bridge_root / "launchers"
    directory.mkdir(exist_ok=True)
    launcher = make_launcher(directory, "slow", FAKE_WORKER_DELAY="4", FAKE_WORKER_LAUNCHES=str(launches))
    write_config_atomic(Path(env["AGENT_BRIDGE_CONFIG"]), launcher, timeout=120)


def launch_count(launches: Path, message_id: int) -> int:
    return launches.read_text().split().count(str(message_id)) if launches.exists() else 0


def spawned(db_path, message_id):
    return wait_until(
        lambda: (a := attempt(db_path, message_id)) and a["state"] == "spawned" and a, what="worker spawned"
    )


def stop(proc):
    if proc.poll() is None:
        proc.terminate()
        proc.wait(30)


def test_kill_listener_mid_dispatch_then_restart(slow_config, env, db_path, kimi, launches):
    listener = start_listener(env)
    task = kimi.ok("send_message", recipient="claude", text="survive a dead listener", kind="task")["id"]
    running = spawned(db_path, task)
    os.kill(listener.pid, signal.SIGKILL)
    listener.wait(30)
    # The supervisor lives in its own session and still finishes the job.
    assert wait_finished(db_path, task)["outcome"] == "succeeded"
    restarted = start_listener(env)
    try:
        wait_until(lambda: status(env)["stage"] == "idle", what="idle after restart")
        assert launch_count(launches, task) == 1
        assert attempt(db_path, task)["supervisor_pid"] == running["supervisor_pid"]
    finally:
        stop(restarted)


def test_kill_supervisor_mid_dispatch_success_is_still_recognised(slow_config, env, db_path, kimi, launches):
    listener = start_listener(env)
    try:
        task = kimi.ok("send_message", recipient="claude", text="survive a dead supervisor", kind="task")["id"]
        running = spawned(db_path, task)
        os.kill(running["supervisor_pid"], signal.SIGKILL)
        # The orphaned worker finishes inside its budget; reconciliation reads the evidence.
        done = wait_finished(db_path, task)
        assert done["outcome"] == "succeeded" and launch_count(launches, task) == 1
        next_task = kimi.ok("send_message", recipient="claude", text="and the next one", kind="task")["id"]
        assert wait_finished(db_path, next_task)["outcome"] == "succeeded"
    finally:
        stop(listener)


@PROVEN_ON_POSTGRES
def test_kill_supervisor_and_worker_is_settled_as_crashed(slow_config, env, db_path, kimi, launches):
    listener = start_listener(env)
    try:
        task = kimi.ok("send_message", recipient="claude", text="both die", kind="task")["id"]
        running = spawned(db_path, task)
        wait_until(lambda: launch_count(launches, task) == 1, what="worker running")
        had_cgroup = cgroups.find(running["worker_token"]) is not None  # where the machine delegates one
        os.kill(running["supervisor_pid"], signal.SIGKILL)
        os.killpg(running["worker_pid"], signal.SIGKILL)
        done = wait_finished(db_path, task)
        assert (done["outcome"], done["error_kind"]) == ("crashed", "worker_gone")
        assert had_cgroup is (cgroups.delegated_directory()[0] is not None)
        # Its emptied cgroup goes right after the verdict's commit (the same reconciliation pass).
        wait_until(lambda: cgroups.find(running["worker_token"]) is None, what="the worker's cgroup removed")
        notices = [m for m in kimi.ok("receive_messages", limit=100)["messages"] if m["reply_to"] == task]
        assert [n["kind"] for n in notices] == ["notice"] and "crashed" in notices[0]["text"]
        assert launch_count(launches, task) == 1
    finally:
        stop(listener)


@PROVEN_ON_POSTGRES
def test_recycled_pid_does_not_pin_an_attempt(slow_config, env, db_path, kimi):
    # An attempt whose recorded pids now belong to other processes (here: this test) is crashed.
    task = kimi.ok("send_message", recipient="claude", text="pid reuse", kind="task")["id"]
    sql(
        db_path,
        "INSERT INTO dispatch_attempts (message_id, agent, state, started_at, supervisor_pid,"
        " supervisor_start_time, worker_pid, worker_start_time, deadline) VALUES (?, 'claude', 'spawned',"
        " 0, ?, 1.0, ?, 1.0, 9e12)",
        (task, os.getpid(), os.getpid()),
    )
    done = cli(env, "listener", "recover", "--agent", "claude")
    assert done.returncode == 0, done.stderr
    assert attempt(db_path, task)["outcome"] == "crashed"


@PROVEN_ON_POSTGRES
def test_disable_then_enable(slow_config, env, db_path, kimi):
    listener = start_listener(env)
    wait_until(lambda: status(env)["running"], what="listener running")
    assert cli(env, "listener", "disable", "--agent", "claude").returncode == 0
    assert listener.wait(60) == 0
    st = status(env)
    assert (st["enabled"], st["running"], st["stage"]) == (False, False, "stopped")
    # While disabled, a start attempt refuses politely (systemd would not restart it: exit 0).
    again = start_listener(env)
    assert again.wait(60) == 0 and "disabled" in again.stderr.read()
    task = kimi.ok("send_message", recipient="claude", text="wait for enable", kind="task")["id"]
    assert attempt(db_path, task) is None
    enabled = cli(env, "listener", "enable", "--agent", "claude")
    assert enabled.returncode == 0, enabled.stderr
    pid = status(env)["pid"]
    try:
        assert pid and wait_finished(db_path, task)["outcome"] == "succeeded"
        # Enabling again is idempotent: the same listener keeps running.
        assert '"already_running"' in cli(env, "listener", "enable", "--agent", "claude").stdout
        assert status(env)["pid"] == pid
    finally:
        os.kill(pid, signal.SIGTERM)
        wait_until(lambda: not status(env)["running"], what="listener stopped")
