"""listener status never guesses: each odd progress document is reported as what it is."""

import json
import subprocess
import sys

import pytest

from dispatcher.core.locations import Locations, StoreUrl
from dispatcher.dispatch.control import _error_head, listener_status, progress_line
from dispatcher.dispatch.paths import AgentPaths
from dispatcher.dispatch.progress import write_progress

HOLD = "import fcntl, sys, time; f = open(sys.argv[1], 'a'); fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); sys.stdin.read()"


@pytest.fixture
def setup(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"agents": {"claude": {"launcher": "x"}, "kimi": {"launcher": "x"}}}))
    where = Locations(db=tmp_path / "bridge.db", config=config, runtime_dir=tmp_path / "runtime")
    return where, AgentPaths.of(where, "claude").ensure()


@pytest.fixture
def holder(setup):
    """A process holding the listener's flock, as a running listener would."""
    _, paths = setup
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(paths.lock)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "held"
    yield proc
    proc.communicate(timeout=30)


def test_stopped_when_nobody_holds_the_lock(setup):
    where, paths = setup
    write_progress(paths.progress, agent="claude", listener_pid=1, stage="idle", last=None)
    st = listener_status(where, "claude")
    assert (st["running"], st["pid"], st["stage"], st["progress_state"]) == (False, None, "stopped", None)
    assert progress_line(where, "claude") == "[claude] stopped"


def test_running_listener_with_its_own_document(setup, holder):
    where, paths = setup
    last = {"message_id": 43, "sender": "kimi", "result": "succeeded", "duration_seconds": 21.5, "exit_code": 0}
    write_progress(paths.progress, agent="claude", listener_pid=holder.pid, stage="idle", last=last, current=None)
    st = listener_status(where, "claude")
    assert (st["running"], st["pid"], st["stage"], st["progress_state"]) == (True, holder.pid, "idle", None)
    assert progress_line(where, "claude") == "[claude] idle | last msg#43 sender=kimi result=succeeded in 21.5s rc=0"


@pytest.mark.parametrize(
    ("content", "stage", "state"),
    [
        ("{not json", "unknown", "unreadable"),
        ('["a list"]', "unknown", "unreadable"),
        ('{"stage": "idle", "listener_pid": 1}', "legacy", "no_format_version"),
        ('{"format_version": 2, "stage": "idle", "listener_pid": 1}', "unknown", "stale_pid"),
    ],
)
def test_odd_documents_are_named_not_guessed(setup, holder, content, stage, state):
    where, paths = setup
    paths.progress.write_text(content)
    st = listener_status(where, "claude")
    assert (st["stage"], st["progress_state"], st["progress"]) == (stage, state, None)
    assert progress_line(where, "claude").startswith(f"[claude] {stage} ({state})")


def test_missing_document_from_a_long_running_listener(setup, holder, monkeypatch):
    where, _ = setup
    monkeypatch.setattr("dispatcher.dispatch.control.STARTUP_GRACE_SECONDS", 0.0)
    st = listener_status(where, "claude")
    assert (st["stage"], st["progress_state"]) == ("unknown", "missing_file")


def test_config_error_is_reported(setup):
    where, _ = setup
    where.config.write_text('{"agents": {"claude": {"auto": 1}}}')
    st = listener_status(where, "claude")
    assert st["stage"] == "error" and "auto" in st["config_error"]


def _store_with_a_settled_attempt(where: Locations, outcome: str) -> tuple[int, int, int]:
    """A task to claude whose attempt ended ``outcome`` at t=1000, and replies at t=990 and t=1010."""
    from dispatcher.store import open_store
    from dispatcher.store.messages import insert_message

    conn = open_store(where.db)
    try:
        task = insert_message(conn, sender="kimi", recipient="claude", text="t", kind="task", created_at=900.0)
        conn.execute(
            "INSERT INTO dispatch_attempts (message_id, agent, state, outcome, started_at, finished_at)"
            " VALUES (?, 'claude', 'finished', ?, 950.0, 1000.0)",
            (task, outcome),
        )
        early = insert_message(
            conn, sender="claude", recipient="kimi", text="r", kind="result", reply_to=task, created_at=990.0
        )
        late = insert_message(
            conn, sender="claude", recipient="kimi", text="r", kind="result", reply_to=task, created_at=1010.0
        )
    finally:
        conn.close()
    return task, early, late


@pytest.mark.parametrize(
    ("outcome", "late_shown"),
    [("crashed", True), ("timeout", True), ("failed", True), ("succeeded", False), ("blocked", False)],
)
def test_last_attempt_shows_replies_that_came_after_a_failed_verdict(setup, outcome, late_shown):
    where, paths = setup
    task, _, late = _store_with_a_settled_attempt(where, outcome)
    last = {"message_id": task, "sender": "kimi", "result": outcome, "duration_seconds": 50.0, "exit_code": None}
    write_progress(paths.progress, agent="claude", listener_pid=1, stage="idle", last=last, current=None)
    st = listener_status(where, "claude")
    assert st["last"]["late_result_ids"] == ([late] if late_shown else [])
    assert "late_result_ids" not in st["progress"]["last"]  # the listener's document is shown as written


def test_late_replies_are_unknown_not_an_error_when_the_store_is_unreadable(setup):
    where, paths = setup
    where.db.write_bytes(b"not a database\n" * 100)
    last = {"message_id": 7, "sender": "kimi", "result": "crashed"}
    write_progress(paths.progress, agent="claude", listener_pid=1, stage="idle", last=last, current=None)
    assert listener_status(where, "claude")["last"]["late_result_ids"] is None
    assert progress_line(where, "claude") == "[claude] stopped | last msg#7 sender=kimi result=crashed"


@pytest.mark.parametrize(
    ("error", "head"),
    [
        ("config_invalid: agent 'x' is not declared", "config_invalid"),  # doctor's codes
        ("workspace_missing: the workspace /w of agent 'x' is not an existing directory", "workspace_missing"),
        (
            "store_unavailable: the bridge store could not complete this operation (OperationalError: full)",
            "store_unavailable",
        ),
        ("supervisor for msg#3 exited 3 without recording an attempt", "error"),  # not a code: no free text
        ("", "error"),
        (None, "error"),
        (42, "error"),
        ("weird/text: with punctuation", "error"),
    ],
)
def test_the_status_line_names_the_listeners_error_by_its_head(error, head):
    assert _error_head(error) == head


@pytest.mark.parametrize("store", ["postgres", "sqlite"])
def test_a_listener_of_another_host_shows_where_it_runs_while_it_renews(setup, store, request):
    """A PostgreSQL store spans hosts: the agent's listener on another host, renewing its lease,
    is named with its host by listener status, the status line, ``who`` and doctor; once its
    renewals stop, the agent's listener is stopped here. A SQLite store is one host's: never."""
    from dispatcher.core import clock
    from dispatcher.core.config import load_config
    from dispatcher.dispatch import lease
    from dispatcher.dispatch.who import render_who, who_report
    from dispatcher.ops.doctor import Context
    from dispatcher.ops.doctor.table import CHECKS
    from dispatcher.store import open_store, write_transaction
    from dispatcher.store.listeners import put_listener, renew_listener

    where, _ = setup
    where.config.write_text(json.dumps({"agents": {"claude": {"launcher": "x", "auto": True}}}))
    if store == "postgres":
        where = Locations(
            db=StoreUrl(request.getfixturevalue("postgres_url")), config=where.config, runtime_dir=where.runtime_dir
        )
    conn = open_store(where.db)
    try:
        now = clock.now()
        with write_transaction(conn):
            put_listener(conn, "claude", pid=4242, start_time="b:1", host="host-b", runtime_dir="/r", started_at=now)
        st = listener_status(where, "claude")
        if store == "sqlite":
            assert (st["stage"], st["elsewhere"]) == ("stopped", None)
            return
        assert (st["running"], st["stage"], st["elsewhere"]["host"], st["elsewhere"]["pid"]) == (
            False,
            "elsewhere",
            "host-b",
            4242,
        )
        assert progress_line(where, "claude") == "[claude] elsewhere (on host host-b)"
        report = who_report(None, ["claude"], where, now)
        assert report["agents"][0]["listener"] == {"running": True, "pid": 4242, "stage": "elsewhere", "host": "host-b"}
        assert render_who(report).startswith("claude  listener elsewhere (pid 4242 on host host-b)")
        on_its_connection = who_report(conn, ["claude"], where, now)  # as the who tool reads it
        assert on_its_connection["agents"][0]["listener"] == report["agents"][0]["listener"]
        ctx = Context(where, config=load_config(where.config))
        (finding,) = [f for check in CHECKS if check.group == "listener" for f in check(ctx)]
        assert (finding.code, finding.level) == ("listener_ok", "ok") and "on host host-b (pid 4242" in finding.message
        with write_transaction(conn):  # its last renewal, a lease ago
            renew_listener(conn, "claude", pid=4242, host="host-b", now=now - lease.lease_seconds())
        st = listener_status(where, "claude")
        assert (st["running"], st["stage"], st["elsewhere"]) == (False, "stopped", None)
    finally:
        conn.close()
