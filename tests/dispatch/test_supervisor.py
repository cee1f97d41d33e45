"""The dispatcher's process side end to end: fork safety, the worker gate, containment,
real timeout statuses, claim renewal, backoff, progress-write failures and the
store-side listener lease. Real listener processes, real fake workers, real signals."""

import json
import os
import signal
import time
from datetime import datetime
from pathlib import Path

import psutil
import pytest
from dispatch_harness import (
    alive,
    attempt,
    integrity,
    log_events,
    make_launcher,
    notices_for,
    post_task,
    query,
    start_listener,
    status,
    stop_listener,
    tree_of,
    wait_finished,
    wait_until,
    write_config_atomic,
)
from harness import sql

from dispatcher.dispatch.cgroups import PREFIX, delegated_directory
from dispatcher.dispatch.faults import NO_CGROUP_ENV
from dispatcher.dispatch.progress import render_last

pytestmark = pytest.mark.both_backends

PROVEN_ON_POSTGRES = pytest.mark.postgres_proven_by(
    "test_supervisor_renews_the_workers_claim",
    "a supervisor's run on PostgreSQL, its lease renewed there; what this case adds is the supervisor's process handling, the same on either store",
)


def use(config_path: Path, launchers: Path, mode: str, timeout: int = 60, **env: str) -> None:
    write_config_atomic(config_path, make_launcher(launchers, mode, **env), timeout=timeout)


def running_listener(env: dict, **extra: str):
    proc = start_listener({**env, **extra})
    wait_until(lambda: status({**env, **extra})["stage"] == "idle", what="listener idle")
    return proc


@PROVEN_ON_POSTGRES
def test_supervisor_outlives_a_stopped_listener_and_its_verdict_survives_other_processes(
    env, db_path, config_path, launchers
):
    # The supervisor is forked without the listener's connection, so its own connection holds
    # its -shm locks: a listener that closes, and the next process to open and close the store,
    # cannot delete the WAL under it, and its verdict survives.
    use(config_path, launchers, "late_noop", FAKE_WORKER_DELAY="4")
    listener = running_listener(env)
    task = post_task(db_path, "fail slowly while the listener is gone")
    running = wait_until(lambda: (a := attempt(db_path, task)) and a["state"] == "spawned" and a, what="worker spawned")
    listener.send_signal(signal.SIGTERM)
    assert listener.wait(30) == 0  # stops at once, not after the dispatch
    assert alive(running["supervisor_pid"], running["supervisor_start_time"])
    other = post_task(db_path, "another process opens, writes and closes the store", kind=None)
    wait_until(
        lambda: not alive(running["supervisor_pid"], running["supervisor_start_time"]), what="supervisor finished"
    )
    done = attempt(db_path, task)
    assert (done["state"], done["outcome"], done["error_kind"]) == ("finished", "failed", "no_evidence")
    assert len(notices_for(db_path, task)) == 1
    assert attempt(db_path, other) is None and integrity(db_path) == "ok"


@pytest.mark.parametrize(("mode", "exit_code"), [("hang", -signal.SIGTERM), ("ignore_term", -signal.SIGKILL)])
@PROVEN_ON_POSTGRES
def test_timeout_records_the_real_exit_status(env, db_path, config_path, launchers, mode, exit_code):
    # The group kill must not reap the leader behind Popen's back: its real status is recorded, not 0.
    use(config_path, launchers, mode, timeout=3)
    listener = running_listener(env)
    try:
        task = post_task(db_path, f"time out ({mode})")
        done = wait_finished(db_path, task)
        assert (done["outcome"], done["exit_code"]) == ("timeout", exit_code)
        last = wait_until(
            lambda: (l := status(env)["last"]) and l["message_id"] == task and l, what="progress shows it"
        )
        assert last["exit_code"] == exit_code and f"rc={exit_code}" in render_last(last)
    finally:
        stop_listener(listener)


CGROUP_HERE, NO_CGROUP_WHY = delegated_directory()
CONTAINMENT = [
    pytest.param(
        {}, id="cgroup", marks=pytest.mark.skipif(CGROUP_HERE is None, reason=f"no delegated cgroup: {NO_CGROUP_WHY}")
    ),
    pytest.param({NO_CGROUP_ENV: "1"}, id="fallback"),  # the subreaper's descendants and the token sweep
]


def contained_as(env: dict, task: int, knob: dict, token: str) -> None:
    """The worker ran in a cgroup of its own exactly where one was to be made, and it is removed."""
    [started] = [e for e in log_events(env, "worker_started") if e["message_id"] == task]
    assert started["cgroup"] is (not knob)
    assert CGROUP_HERE is None or not (CGROUP_HERE / f"{PREFIX}{token}").exists()


@pytest.mark.parametrize("knob", CONTAINMENT)
@PROVEN_ON_POSTGRES
def test_daemonised_grandchild_is_killed_and_never_answers(env, db_path, config_path, launchers, bridge_root, knob):
    """A double-forked, setsid'd grandchild that forks when it receives TERM leaves the group and
    outlives a single listing of the tree: it is still killed, with every child it forked, and
    nothing carrying the worker's token outlives the verdict or answers after it: in a cgroup of its
    own where the machine delegates one, and by the supervisor's descendants where it does not."""
    late = bridge_root / "late.txt"
    late.unlink(missing_ok=True)
    use(config_path, launchers, "daemonize", FAKE_WORKER_DELAY="3", FAKE_WORKER_LATE_FILE=str(late))
    listener = running_listener(env, **knob)
    try:
        task = post_task(db_path, "escape the group")
        done = wait_finished(db_path, task)
        assert (done["outcome"], done["error_kind"]) == ("failed", "no_evidence")
        assert tree_of(done["worker_token"]) == []
        contained_as(env, task, knob, done["worker_token"])
        time.sleep(5)  # past the grandchild's delay: proving an absence takes the time it would take
        assert not late.exists()
        assert query(db_path, "SELECT id FROM messages WHERE reply_to = ? AND kind = 'result'", (task,)) == []
    finally:
        stop_listener(listener)


@PROVEN_ON_POSTGRES
def test_a_worker_that_plants_fifos_cannot_hang_its_supervisor(env, db_path, config_path, launchers):
    """A worker that replaces diagnostics.json and a CLI's result file by FIFOs nothing writes to
    does not block its supervisor: its attempt settles from the store's evidence and the listener
    goes back to idle."""
    use(config_path, launchers, "succeed", FAKE_WORKER_FIFOS="diagnostics.json,claude-result.json")
    listener = running_listener(env)
    try:
        task = post_task(db_path, "plant fifos")
        done = wait_finished(db_path, task, deadline=60)
        assert (done["outcome"], done["error_kind"]) == ("succeeded", None)
        assert json.loads(done["diagnostics"])["result_json"] == "missing"  # the FIFO read as no output
        wait_until(lambda: status(env)["stage"] == "idle", what="listener idle again")
    finally:
        stop_listener(listener)


@PROVEN_ON_POSTGRES
def test_a_supervisor_stopped_by_its_worker_does_not_stall_its_agent(env, db_path, config_path, launchers):
    """A worker that SIGSTOPs its supervisor does not leave the attempt spawned forever: past the
    attempt's deadline and the supervisor's grace the listener kills the supervisor's group,
    settles the attempt with one notice, and dispatches the next task."""
    use(config_path, launchers, "stop_supervisor", timeout=2)
    listener = running_listener(env, AGENT_BRIDGE_TEST_SUPERVISOR_GRACE_SECONDS="2")
    try:
        task = post_task(db_path, "stop your supervisor")
        running = wait_until(
            lambda: (a := attempt(db_path, task)) and a["state"] == "spawned" and a, what="worker spawned"
        )
        done = wait_finished(db_path, task)
        assert (done["outcome"], done["error_kind"]) == ("timeout", "timeout")
        assert len(notices_for(db_path, task)) == 1
        assert not alive(running["supervisor_pid"], running["supervisor_start_time"])
        assert tree_of(running["worker_token"]) == []
        use(config_path, launchers, "succeed")
        assert wait_finished(db_path, post_task(db_path, "and the next one"))["outcome"] == "succeeded"
    finally:
        stop_listener(listener)


@pytest.mark.parametrize("knob", CONTAINMENT)
@PROVEN_ON_POSTGRES
def test_reconciliation_finds_the_whole_worker_tree_by_its_token(env, db_path, config_path, launchers, knob):
    """The reconciliation half of containment: with the supervisor dead, a live daemonised member of
    the tree keeps the attempt running, and past the deadline the whole tree is killed: through the
    cgroup its supervisor made, found by the token, or by the token sweep of /proc."""
    use(
        config_path,
        launchers,
        "daemonize",
        FAKE_WORKER_DELAY="3600",
        FAKE_WORKER_LATE_FILE="/dev/null",
        FAKE_WORKER_LEADER="hang",
    )
    listener = running_listener(env, **knob)
    try:
        task = post_task(db_path, "orphan a daemon")
        running = wait_until(
            lambda: (a := attempt(db_path, task)) and a["state"] == "spawned" and a, what="worker spawned"
        )
        # The grandchild itself: two token processes may still be the leader and the middle child
        # before its setsid, which the group kill below would take too (no daemon left to find).
        daemon = wait_until(lambda: daemon_of(running), what="daemon running")
        os.kill(running["supervisor_pid"], signal.SIGKILL)
        os.killpg(running["worker_pid"], signal.SIGKILL)  # the group dies; the daemon is not in it
        wait_until(lambda: not alive(running["worker_pid"], running["worker_start_time"]), what="leader gone")
        wait_until(lambda: status(env)["stage"] == "supervising", what="listener sees it still running")
        assert attempt(db_path, task)["state"] == "spawned"
        assert daemon in tree_of(running["worker_token"])
        in_cgroup = f"/{PREFIX}{running['worker_token']}" in Path(f"/proc/{daemon}/cgroup").read_text()
        assert in_cgroup is (not knob)
        query_commit(db_path, f"UPDATE dispatch_attempts SET deadline = 0 WHERE message_id = {task}")
        done = wait_finished(db_path, task)
        assert done["outcome"] == "timeout"
        wait_until(lambda: tree_of(running["worker_token"]) == [], what="daemon killed")
        contained_as(env, task, knob, running["worker_token"])
    finally:
        stop_listener(listener)


def daemon_of(running: dict) -> int | None:
    """The worker's double-forked grandchild: a process of its tree in a session of its own that
    the leader did not start (the middle child is the leader's)."""
    leader = running["worker_pid"]
    for pid in tree_of(running["worker_token"]):
        try:
            if pid != leader and os.getsid(pid) != os.getsid(leader) and psutil.Process(pid).ppid() != leader:
                return pid
        except (OSError, psutil.Error):  # gone meanwhile
            continue
    return None


@PROVEN_ON_POSTGRES
def test_a_worker_whose_pid_cannot_be_recorded_never_runs(env, db_path, config_path, launchers, bridge_root):
    # The worker must not act before its identity is in the store.
    launches = bridge_root / "gate-launches.txt"
    use(config_path, launchers, "succeed", FAKE_WORKER_LAUNCHES=str(launches))
    listener = running_listener(env, AGENT_BRIDGE_FAULT_POINT="record_pid:error")
    try:
        task = post_task(db_path, "never start")
        done = wait_finished(db_path, task)
        assert (done["outcome"], done["error_kind"]) == ("failed", "spawn_unrecorded")
        assert done["worker_pid"] is None and not launches.exists()
        assert len(notices_for(db_path, task)) == 1
        assert tree_of(done["worker_token"]) == []
    finally:
        stop_listener(listener)


def test_supervisor_renews_the_workers_claim(env, db_path, config_path, launchers):
    # A 30 s claim must not lapse while the worker is still inside its budget.
    release = launchers / "release-claim-and-wait"
    release.unlink(missing_ok=True)
    claim_file = launchers / "worker-claim.txt"
    claim_file.unlink(missing_ok=True)
    # The worker holds its claim until the test has seen it renewed (at most 80 s).
    use(
        config_path,
        launchers,
        "claim_and_wait",
        timeout=90,
        FAKE_WORKER_DELAY="80",
        FAKE_WORKER_RELEASE_FILE=str(release),
        FAKE_WORKER_CLAIM_FILE=str(claim_file),
    )
    listener = running_listener(env, AGENT_BRIDGE_TEST_RENEW_SECONDS="0.5")
    try:
        task = post_task(db_path, "hold the claim")
        # The worker's own 30 s claim as the tool granted it: the row may hold a renewal already
        # by the time a loaded test first reads it.
        granted = wait_until(lambda: claim_file.exists() and claim_file.read_text(), what="worker claimed")
        claimed_until = datetime.fromisoformat(granted.replace("Z", "+00:00")).timestamp()
        started = attempt(db_path, task)["started_at"]
        # Renewed to min(now + 300, deadline + grace) = about started + 95: far past the 30 s lease.
        renewed = wait_until(
            lambda: (
                (r := query(db_path, "SELECT claim_expires_at FROM messages WHERE id = ?", (task,))[0][0])
                and r > claimed_until + 30
                and r
            ),
            what="claim renewed",
        )
        assert renewed <= started + 90 + 5 + 1
        release.touch()
        assert wait_finished(db_path, task)["outcome"] == "succeeded"
    finally:
        stop_listener(listener)


@pytest.mark.sqlite_only("a SQLite trigger refuses the barrier's insert")
def test_a_refused_attempt_insert_backs_off_and_recovers(env, db_path, config_path, launchers):
    # A supervisor that cannot record its attempt is re-forked with backoff, not ~94 times a second.
    use(config_path, launchers, "succeed")
    listener = running_listener(env)
    trigger = (
        "CREATE TRIGGER refuse_attempts BEFORE INSERT ON dispatch_attempts"
        " BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END"
    )
    query_commit(db_path, trigger)
    try:
        before = len(log_events(env, "supervisor_exited"))
        task = post_task(db_path, "cannot be recorded yet")
        # Stage and error from one reading: between two readings the listener may retry.
        wait_until(
            lambda: (
                (s := status(env))["stage"] == "error"
                and "without recording an attempt" in ((s["progress"] or {}).get("error") or "")
            ),
            what="stage error, naming the attempt that could not be recorded",
        )
        time.sleep(4)  # a window to count spawns in
        spawns = len(log_events(env, "supervisor_exited")) - before
        assert 1 <= spawns <= 6, spawns  # backoff 0.5, 1, 2, 4 s; without it, dozens
        assert listener.poll() is None
        query_commit(db_path, "DROP TRIGGER refuse_attempts")
        assert wait_finished(db_path, task)["outcome"] == "succeeded"
        wait_until(
            lambda: status(env)["stage"] == "idle" and not status(env)["progress"]["error"], what="recovered to idle"
        )
    finally:
        query_commit(db_path, "DROP TRIGGER IF EXISTS refuse_attempts")
        stop_listener(listener)


def query_commit(db: Path | str, statement: str) -> None:
    sql(db, statement)


@PROVEN_ON_POSTGRES
def test_failing_progress_writes_do_not_stop_the_listener(env, db_path, config_path, launchers):
    # A full or read-only runtime directory must not crash the listener on its progress write.
    use(config_path, launchers, "succeed")
    progress = Path(env["AGENT_BRIDGE_RUNTIME_DIR"]) / "claude.progress.json"
    progress.unlink(missing_ok=True)
    progress.mkdir()  # every replace onto it fails, as on a full disk (and whoever runs the test)
    listener = start_listener(env)
    try:
        task = post_task(db_path, "dispatch without progress")
        assert wait_finished(db_path, task)["outcome"] == "succeeded"
        assert listener.poll() is None
        assert log_events(env, "progress_write_failed")
    finally:
        stop_listener(listener)
        progress.rmdir()


def test_one_listener_per_agent_per_store(env, db_path, config_path, launchers, bridge_root):
    # One listener per agent per store: the lock guards the store, not one runtime directory.
    use(config_path, launchers, "succeed")
    first = running_listener(env)
    try:
        other_runtime = {**env, "AGENT_BRIDGE_RUNTIME_DIR": str(bridge_root / "runtime-2")}
        second = start_listener(other_runtime)
        assert second.wait(60) == 0
        assert f"already running (pid {first.pid})" in second.stderr.read()
        (Path(env["AGENT_BRIDGE_RUNTIME_DIR"]) / "claude.lock").unlink()
        third = start_listener(env)
        assert third.wait(60) == 0
        assert f"already running (pid {first.pid})" in third.stderr.read()
        assert first.poll() is None
        rows = query(db_path, "SELECT pid FROM listeners WHERE agent = 'claude'")
        assert [r[0] for r in rows] == [first.pid]
    finally:
        stop_listener(first)
    assert query(db_path, "SELECT pid FROM listeners WHERE agent = 'claude'") == []  # released on exit
