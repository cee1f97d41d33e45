"""Unit tests of the dispatcher's process-side decisions: the listener step, backoff,
reconciliation, claim renewal, the listener lease, connection tracking and fault points.
No listener, no supervisor: pure functions and single transactions on a real SQLite file."""

import os
import signal
import sqlite3
import subprocess
import sys

import pytest

from dispatcher.core.processes import start_time, this_host
from dispatcher.dispatch import faults, lease, renewal
from dispatcher.dispatch.procs import fork_without_store
from dispatcher.dispatch.reconcile import BUSY, CRASHED, HOST_LOST, KILL, decide
from dispatcher.dispatch.renewal import renew_worker_claim
from dispatcher.dispatch.step import (
    BACKOFF_CAP_SECONDS,
    BUSY_RECHECK_SECONDS,
    HELD_MAX_WORKERS,
    HELD_MAX_WORKERS_TOTAL,
    RESCAN_SECONDS,
    BackOff,
    Dispatch,
    Observation,
    Stop,
    Wait,
    backoff_seconds,
    step,
)
from dispatcher.store.connection import open_connections, open_store

NOW = 1_000_000.0


# -- step ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("obs", "action"),
    [
        (Observation(stop_requested=True, candidate=7), Stop("signal")),
        (Observation(stop_requested=True, disabled=True), Stop("signal")),
        (Observation(disabled=True, candidate=7), Stop("disabled")),
        (Observation(disabled=True, backoff_left=10), Stop("disabled")),
        (Observation(backoff_left=3, candidate=7), Wait(3.0, "error", wake_on_commit=False)),
        (Observation(store_error="store_missing: gone", failures=1), BackOff(0.5, "store_missing: gone")),
        (Observation(store_error="full", failures=3, candidate=7), BackOff(2.0, "full")),
        (
            Observation(failure_reason="supervisor exited 4", failures=2, candidate=7),
            BackOff(1.0, "supervisor exited 4"),
        ),
        (Observation(config_error="bad json"), Wait(RESCAN_SECONDS, "error")),
        (Observation(running=1, candidate=7), Wait(BUSY_RECHECK_SECONDS, "supervising", held=HELD_MAX_WORKERS)),
        (Observation(candidate=7), Dispatch(7)),
        # Several workers: one more while fewer than max_workers run and the machine has a slot.
        (Observation(running=1, max_workers=2, candidate=7), Dispatch(7)),
        (
            Observation(running=2, max_workers=2, candidate=7),
            Wait(BUSY_RECHECK_SECONDS, "supervising", held=HELD_MAX_WORKERS),
        ),
        (Observation(running=3, max_workers=2), Wait(BUSY_RECHECK_SECONDS, "supervising")),  # max_workers lowered
        (
            Observation(running=1, max_workers=2, machine_full=True, candidate=7),
            Wait(BUSY_RECHECK_SECONDS, "supervising", held=HELD_MAX_WORKERS_TOTAL),
        ),
        (
            Observation(max_workers=2, machine_full=True, candidate=7),
            Wait(BUSY_RECHECK_SECONDS, "idle", held=HELD_MAX_WORKERS_TOTAL),
        ),
        # A supervisor not through the barrier yet: the next waits (its record, or its end, wakes us).
        (Observation(starting=True, max_workers=4, candidate=7), Wait(BUSY_RECHECK_SECONDS, "supervising")),
        (Observation(running=1, starting=True, max_workers=4), Wait(BUSY_RECHECK_SECONDS, "supervising")),
        (Observation(running=1, max_workers=2), Wait(BUSY_RECHECK_SECONDS, "supervising")),
        # Disabled: nothing new starts; the listener stops once its workers have ended.
        (Observation(disabled=True, running=1, max_workers=2, candidate=7), Wait(BUSY_RECHECK_SECONDS, "supervising")),
        (Observation(disabled=True, starting=True, max_workers=2), Wait(BUSY_RECHECK_SECONDS, "supervising")),
        # Stops and failures come first, whatever runs.
        (Observation(stop_requested=True, running=2, max_workers=2), Stop("signal")),
        (Observation(store_error="full", failures=1, running=1, max_workers=2, candidate=7), BackOff(0.5, "full")),
        (Observation(candidate=7, failures=2), Dispatch(7)),  # a backed-off failure: try again
        (Observation(backoff_left=0, candidate=7), Dispatch(7)),  # the backoff just ended
        (Observation(), Wait(RESCAN_SECONDS, "idle")),
    ],
)
def test_step(obs, action):
    assert step(obs, NOW) == action


def test_backoff_is_exponential_and_capped():
    assert [backoff_seconds(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 4.0, 8.0]
    assert backoff_seconds(0) == 0.5
    assert backoff_seconds(50) == backoff_seconds(10_000) == BACKOFF_CAP_SECONDS


# -- reconciliation ---------------------------------------------------------------------
GRACE = 60.0


@pytest.mark.parametrize(
    ("supervisor_alive", "worker_alive", "now", "expected"),
    [
        (True, True, NOW + 10, BUSY),  # the supervisor handles its own timeout, within its grace
        (True, False, NOW - 10, BUSY),
        # A supervisor still there past the deadline and its grace (SIGSTOPped by its worker) is ended.
        (True, True, NOW + GRACE, KILL),
        (True, False, NOW + GRACE + 1, KILL),
        (False, True, NOW - 10, BUSY),  # orphaned but inside its budget
        (False, True, NOW + 10, KILL),
        (False, True, NOW, KILL),
        (False, False, NOW - 10, CRASHED),
        (False, False, NOW + 10, CRASHED),
    ],
)
def test_reconcile_decision(supervisor_alive, worker_alive, now, expected):
    verdict = decide(supervisor_alive=supervisor_alive, worker_alive=worker_alive, now=now, deadline=NOW, grace=GRACE)
    assert verdict == expected


@pytest.mark.parametrize(
    ("lease_expires_at", "now", "expected"),
    [
        (NOW + 1, NOW, BUSY),  # its supervisor renewed it: running there, whatever /proc here says
        (NOW + 1, NOW + 1, HOST_LOST),  # unrenewed for a whole lease: that host is gone
        (None, NOW, HOST_LOST),  # never leased
        (NOW + 1, NOW + GRACE + 10, HOST_LOST),
    ],
)
def test_reconcile_decision_for_another_hosts_attempt(lease_expires_at, now, expected):
    verdict = decide(
        supervisor_alive=False,
        worker_alive=False,
        now=now,
        deadline=NOW + 3600,
        grace=GRACE,
        here=False,
        lease_expires_at=lease_expires_at,
    )
    assert verdict == expected


# -- the attempt's lease -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("state", "leased_until", "renewed_to"),
    [
        ("spawned", NOW + 10, NOW + renewal.ATTEMPT_LEASE_SECONDS),  # moved on
        ("recorded", NOW + 10, NOW + renewal.ATTEMPT_LEASE_SECONDS),
        ("spawned", NOW + 10_000, NOW + 10_000),  # already longer: never moved back
        ("finished", NOW + 10, NOW + 10),  # settled: left as it was
    ],
)
def test_the_supervisor_renews_its_attempts_lease_never_back_never_once_settled(conn, state, leased_until, renewed_to):
    task = _message(conn, None, None)
    conn.execute(
        "INSERT INTO dispatch_attempts (message_id, agent, state, started_at, host, lease_expires_at)"
        " VALUES (?, 'claude', ?, ?, 'here', ?)",
        (task, state, NOW - 30, leased_until),
    )
    assert renewal.renew_attempt_lease(conn, task, NOW) is (state != "finished")
    lease = conn.execute("SELECT lease_expires_at FROM dispatch_attempts WHERE message_id = ?", (task,)).fetchone()
    assert lease[0] == renewed_to


# -- claim renewal ----------------------------------------------------------------------
def _message(conn, owner, expires, acknowledged=None) -> int:
    return conn.execute(
        "INSERT INTO messages (sender, recipient, kind, text, created_at, claim_owner, claim_expires_at,"
        " acknowledged_at) VALUES ('kimi', 'claude', 'task', 't', ?, ?, ?, ?)",
        (NOW - 60, owner, expires, acknowledged),
    ).lastrowid


def _expiry(conn, message_id):
    return conn.execute("SELECT claim_expires_at FROM messages WHERE id = ?", (message_id,)).fetchone()[0]


@pytest.mark.parametrize(
    ("owner", "expires", "acknowledged", "renewed"),
    [
        ("claude-attempt-1", NOW + 20, None, True),  # the attempt's active claim
        ("claude-77-aa", NOW + 20, None, False),  # someone else's (a session's, say)
        ("claude-attempt-1", NOW - 1, None, False),  # expired: never revived
        (None, None, None, False),  # released: never revived
        ("claude-attempt-1", NOW + 20, NOW - 5, False),  # acknowledged: done
        ("claude-attempt-1", NOW + 500, None, False),  # already longer: never shortened
    ],
)
def test_renew_worker_claim(conn, owner, expires, acknowledged, renewed):
    message_id = _message(conn, owner, expires, acknowledged)
    until = NOW + 300
    assert renew_worker_claim(conn, message_id, owner="claude-attempt-1", until=until, now=NOW) is renewed
    assert _expiry(conn, message_id) == (until if renewed else expires)


# -- the listener lease -----------------------------------------------------------------
def _holder(conn):
    return conn.execute("SELECT pid, start_time, host FROM listeners WHERE agent = 'claude'").fetchone()


def _plant(conn, pid, started, host=None, renewed_at=None):
    conn.execute(
        "INSERT OR REPLACE INTO listeners (agent, pid, start_time, host, runtime_dir, started_at, renewed_at)"
        " VALUES ('claude', ?, ?, ?, '/elsewhere', 0, ?)",
        (pid, started, host or this_host(), renewed_at),
    )


def test_lease_is_taken_when_free_and_released_only_by_its_owner(conn):
    assert lease.acquire(conn, "claude", "/run", NOW) is None
    assert tuple(_holder(conn))[:1] == (os.getpid(),)
    assert lease.acquire(conn, "claude", "/run", NOW) is None  # our own row: re-entrant
    lease.release(conn, "claude")
    assert _holder(conn) is None
    _plant(conn, 1, start_time(1))
    lease.release(conn, "claude")  # not ours: left alone
    assert _holder(conn)[0] == 1


@pytest.fixture
def other_process():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait()


def test_a_live_holder_keeps_the_lease(conn, other_process):
    _plant(conn, other_process.pid, start_time(other_process.pid))
    assert lease.acquire(conn, "claude", "/run", NOW).pid == other_process.pid
    assert _holder(conn)[0] == other_process.pid


def test_another_hosts_holder_keeps_the_lease_while_it_renews_it(conn):
    """/proc cannot see another host: its listener runs while it renewed within the lease."""
    _plant(conn, 4242, "boot:1", host="another-host", renewed_at=NOW - lease.LISTENER_LEASE_SECONDS + 1)
    assert lease.acquire(conn, "claude", "/run", NOW).host == "another-host"
    assert _holder(conn)[0] == 4242


@pytest.mark.parametrize("case", ["dead_pid", "recycled_pid", "other_host_silent", "other_host_never_renewed"])
def test_a_stale_lease_is_taken_over(conn, other_process, case):
    if case == "dead_pid":
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        _plant(conn, dead.pid, 1.0)
    elif case == "recycled_pid":  # the pid is alive, but it is another process than recorded
        _plant(conn, other_process.pid, start_time(other_process.pid) + "0")  # ten times its ticks: another process
    elif case == "other_host_silent":  # its last renewal is a whole lease ago
        _plant(conn, 4242, "boot:1", host="another-host", renewed_at=NOW - lease.LISTENER_LEASE_SECONDS)
    else:  # a row from before leases (or from a host whose listener never said it runs)
        _plant(conn, other_process.pid, start_time(other_process.pid), host="another-host")
    assert lease.acquire(conn, "claude", "/run", NOW) is None
    assert _holder(conn)[0] == os.getpid()


def test_renewing_keeps_the_lease_and_a_taken_one_is_reported(conn):
    assert lease.acquire(conn, "claude", "/run", NOW) is None
    assert lease.renew(conn, "claude", "/run", NOW + 10) is None
    assert conn.execute("SELECT renewed_at FROM listeners").fetchone()[0] == NOW + 10
    _plant(conn, 4242, "boot:1", host="another-host", renewed_at=NOW + 10)  # taken while we could not renew
    assert lease.renew(conn, "claude", "/run", NOW + 20).host == "another-host"
    conn.execute("DELETE FROM listeners")  # a row gone (an admin's hand): taken again
    assert lease.renew(conn, "claude", "/run", NOW + 30) is None
    assert _holder(conn)[0] == os.getpid()


# -- no connection crosses a fork ------------------------------------------------------
def test_open_connections_are_counted_and_refuse_a_fork(tmp_path):
    before = open_connections()
    conn = open_store(tmp_path / "bridge.db")
    assert open_connections() == before + 1
    with pytest.raises(RuntimeError, match="refusing to fork"):
        fork_without_store()
    conn.close()
    assert open_connections() == before


def test_a_connection_only_a_reference_cycle_holds_is_collected_before_a_fork(tmp_path):
    before = open_connections()
    cycle: list = [open_store(tmp_path / "bridge.db")]
    cycle.append(cycle)  # garbage, but not freed until the collector runs
    del cycle
    assert open_connections() == before + 1
    pid = fork_without_store()
    if pid == 0:
        os._exit(0)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    assert open_connections() == before


def test_a_fork_without_connections_is_allowed(tmp_path):
    conn = open_store(tmp_path / "bridge.db")
    conn.close()
    pid = fork_without_store()
    if pid == 0:
        os._exit(0)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


# -- fault points ------------------------------------------------------------------------
def test_fault_points_do_nothing_unless_armed(monkeypatch, conn):
    monkeypatch.delenv(faults.ENV, raising=False)
    for point in faults.POINTS:
        faults.fault_point(point)


def test_an_error_fault_raises_a_store_error_at_its_point(monkeypatch):
    monkeypatch.setenv(faults.ENV, "record_pid:error")
    faults.fault_point("after_spawn")  # another point: nothing
    with pytest.raises(sqlite3.OperationalError, match="record_pid"):
        faults.fault_point("record_pid")


# -- signals ---------------------------------------------------------------------------------
def test_sigterm_only_sets_a_flag_and_never_cuts_a_transaction_short(tmp_path):
    from dispatcher.core.settings import BridgeSettings
    from dispatcher.dispatch.listener import Listener
    from dispatcher.store import write_transaction

    settings = BridgeSettings(db=tmp_path / "bridge.db", runtime_dir=tmp_path / "runtime")
    listener = Listener(settings, "claude")
    conn = open_store(settings.db)
    previous = signal.signal(signal.SIGTERM, listener._request_stop)
    try:
        with write_transaction(conn):
            conn.execute("INSERT INTO messages (sender, recipient, text, created_at) VALUES ('a', 'b', '1', 0)")
            os.kill(os.getpid(), signal.SIGTERM)  # the handler runs here, between the two writes
            conn.execute("INSERT INTO messages (sender, recipient, text, created_at) VALUES ('a', 'b', '2', 0)")
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert conn.execute("SELECT count(*) FROM messages").fetchone()[0] == 2
    assert listener._stop_requested
    conn.close()


def test_the_worker_gets_the_resolved_settings_and_its_token(tmp_path):
    from dispatcher.core.permissions import BRIDGE_ONLY
    from dispatcher.core.settings import BridgeSettings
    from dispatcher.dispatch.worker_run import worker_env

    settings = BridgeSettings(
        db=tmp_path / "bridge.db", runtime_dir=tmp_path / "rt", max_body_bytes=1000, log_level="INFO"
    )
    env = worker_env(settings, "claude", 5, tmp_path, tmp_path / "d.json", "tok", permissions=BRIDGE_ONLY)
    assert env["AGENT_BRIDGE_RUNTIME_DIR"] == str((tmp_path / "rt").resolve())
    assert (env["AGENT_BRIDGE_MAX_BODY_BYTES"], env["AGENT_BRIDGE_LOG_LEVEL"]) == ("1000", "INFO")
    assert (env["AGENT_BRIDGE_ROLE"], env["AGENT_BRIDGE_WORKER_TOKEN"], env["AGENT_ID"]) == ("worker", "tok", "claude")


def test_the_worker_is_told_the_cli_its_config_names_never_an_inherited_one(tmp_path, monkeypatch):
    """AGENT_BRIDGE_CLI is what launchers/agent_headless.sh runs: the agent's config's, or absent."""
    from dispatcher.core.permissions import BRIDGE_ONLY
    from dispatcher.core.settings import BridgeSettings
    from dispatcher.dispatch.worker_run import worker_env

    monkeypatch.setenv("AGENT_BRIDGE_CLI", "kimi")  # the listener's own shell had one
    settings = BridgeSettings(db=tmp_path / "bridge.db", runtime_dir=tmp_path / "rt")
    named = worker_env(settings, "claude", 5, tmp_path, tmp_path / "d.json", "t", permissions=BRIDGE_ONLY, cli="codex")
    older = worker_env(settings, "claude", 5, tmp_path, tmp_path / "d.json", "t", permissions=BRIDGE_ONLY)
    assert named["AGENT_BRIDGE_CLI"] == "codex" and "AGENT_BRIDGE_CLI" not in older
