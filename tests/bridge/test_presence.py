"""Presence: the throttle case by case, the session rows on a real store (register, prune, wake
paths, who), a recycled pid, and the upgrade from a schema-4 store. (The liveness rule and the
process evidence it reads: test_processes.)"""

import json
import os
import sqlite3
import subprocess
import sys
import time

import pytest
from harness import V4_TABLES, assert_rows_kept, store_from_fixture, table_rows

from dispatcher.bridge import presence
from dispatcher.core import clock, processes
from dispatcher.core.errors import BridgeError
from dispatcher.core.processes import start_time
from dispatcher.dispatch import who
from dispatcher.store import SCHEMA_VERSION, open_store

HERE = "host-a"
NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    "last,now,touch",
    [
        (None, NOW, True),  # the first call always writes
        (NOW, NOW + 1, False),  # within the interval: no write
        (NOW, NOW + 4.99, False),
        (NOW, NOW + 5, True),  # the interval has passed
        (NOW, NOW - 60, True),  # the clock went back: write, or "idle for" would be stuck
    ],
)
def test_should_touch(last, now, touch):
    assert presence.should_touch(last, now) is touch


def test_role_client_text_and_wake_paths_parse():
    assert (presence.role_of("worker"), presence.role_of("session")) == ("worker", "interactive")
    assert presence.client_text("claude-code") == "claude-code"
    assert presence.client_text("2.1.332 (Claude Code)") == "2.1.332 (Claude Code)"
    for bad in (True, 1, None, "", "x" * 65, "evil\nline", "a;rm -rf", "\u202eltr", " leading"):
        assert presence.client_text(bad) is None, bad
    assert presence.wake_paths_of('["channel", "hook", "bogus"]') == ["hook", "channel"]
    for damaged in ("{", '"hook"', "{}", None, 7, "[1, true]"):
        assert presence.wake_paths_of(damaged) == [], damaged


# -- rows on a real store ---------------------------------------------------------------------
def probe_of(running: dict[int, float]):
    return lambda pid: running.get(pid)


def _add(conn, agent, pid, start, *, host=HERE, role="interactive", paths="[]", renewed=None):
    cur = conn.execute(
        "INSERT INTO sessions (agent, role, host, pid, start_time, started_at, wake_paths, renewed_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (agent, role, host, pid, start, NOW - 60, paths, renewed),
    )
    return cur.lastrowid


def test_register_cleans_dead_local_rows_and_keeps_live_and_foreign_ones(conn):
    live = _add(conn, "claude", 11, 100.0)
    killed = _add(conn, "claude", 12, 100.0)  # kill -9: no process any more
    recycled = _add(conn, "kimi", 13, 100.0)  # pid 13 now runs something younger
    foreign = _add(conn, "kimi", 12, 100.0, host="host-b")  # another host: never judged dead
    probe = probe_of({11: 100.0, 13: 500.0})
    new = presence.register_session(
        conn, "claude", "interactive", pid=14, start_time=600.0, client_pid=1, now=NOW, here=HERE, probe=probe
    )
    ids = [r[0] for r in conn.execute("SELECT id FROM sessions ORDER BY id")]
    assert ids == [live, foreign, new] and killed not in ids and recycled not in ids
    with pytest.raises(BridgeError) as refused:
        presence.register_session(conn, "claude", "boss", pid=1, start_time=1.0, client_pid=None, now=NOW)
    assert refused.value.code == "invalid_role"


def test_record_wake_path_is_idempotent_ordered_and_refuses_what_it_cannot_mark(conn):
    sid = _add(conn, "claude", 11, 100.0)
    assert presence.record_wake_path(conn, sid, "resource") == ["resource"]
    assert presence.record_wake_path(conn, sid, "hook") == ["hook", "resource"]
    assert presence.record_wake_path(conn, sid, "hook") == ["hook", "resource"]
    assert json.loads(conn.execute("SELECT wake_paths FROM sessions WHERE id = ?", (sid,)).fetchone()[0]) == [
        "hook",
        "resource",
    ]
    for path in ("pigeon", "", None, True):
        with pytest.raises(BridgeError) as bad:
            presence.record_wake_path(conn, sid, path)
        assert bad.value.code == "invalid_wake_path"
    for session in (sid + 1, True, "1"):
        with pytest.raises(BridgeError) as gone:
            presence.record_wake_path(conn, session, "hook")
        assert gone.value.code == "unknown_session"
    assert conn.execute("SELECT COUNT(*) FROM sessions").fetchone()[0] == 1


def test_session_of_client_finds_the_session_a_hook_speaks_for(conn):
    host = processes.this_host()
    conn.execute(
        "INSERT INTO sessions (agent, role, host, pid, client_pid, started_at) VALUES"
        " ('claude', 'interactive', ?, 50, 40, 1), ('claude', 'interactive', ?, 51, 40, 2),"
        " ('kimi', 'interactive', ?, 52, 40, 3), ('claude', 'interactive', 'elsewhere', 53, 40, 4)",
        (host, host, host),
    )
    assert presence.session_of_client(conn, "claude", 40) == 2
    assert presence.session_of_client(conn, "claude", 41) is None


@pytest.mark.parametrize(
    "row,wakeable",
    [
        ({}, True),
        ({"paths": "[]"}, False),  # live, but no way to wake it
        ({"paths": '["resource"]'}, False),  # a resource update starts no turn
        ({"paths": '["resource"]', "watch": (21, 200.0)}, True),  # but a running Monitor watch does
        ({"paths": "[]", "watch": (21, 200.0)}, True),
        ({"paths": "[]", "watch": (22, 200.0)}, False),  # the watch was killed (-9): it ended nothing
        ({"paths": "[]", "watch": (21, 999.0)}, False),  # its pid now runs another process
        ({"paths": '["monitor"]'}, False),  # a stored flag (an older version's) proves nothing
        ({"pid": 99, "watch": (21, 200.0)}, False),  # a watch of a dead session
        ({"paths": '["channel"]'}, True),
        ({"role": "worker"}, False),  # a headless worker is no interactive session
        ({"pid": 99}, False),  # dead
        ({"start": 123.0}, False),  # recycled pid
        ({"host": "host-b"}, False),  # unknown is not evidence of life
        ({"host": "host-b", "renewed": "now"}, True),  # another host's, renewed within its lease
        ({"host": "host-b", "renewed": "lapsed"}, False),  # its renewals stopped: unknown again
        ({"host": "host-b", "renewed": "now", "paths": "[]", "watch": (21, 200.0)}, False),  # its watch is its host's
        ({"agent": "kimi"}, False),  # another agent's session
    ],
)
def test_has_wakeable_session(conn, row, wakeable):
    _add(
        conn,
        row.get("agent", "claude"),
        row.get("pid", 11),
        row.get("start", 100.0),
        host=row.get("host", HERE),
        role=row.get("role", "interactive"),
        paths=row.get("paths", '["hook"]'),
        renewed={None: None, "now": clock.now(), "lapsed": clock.now() - presence.session_lease()}[row.get("renewed")],
    )
    if "watch" in row:
        pid, start = row["watch"]
        conn.execute(
            "INSERT INTO session_watches (session_id, pid, start_time) VALUES (last_insert_rowid(), ?, ?)", (pid, start)
        )
    probe = probe_of({11: 100.0, 21: 200.0})
    assert presence.has_wakeable_session(conn, "claude", here=HERE, probe=probe) is wakeable


def test_prune_dead_removes_dead_watches_and_the_watches_of_dead_sessions(conn):
    live = _add(conn, "claude", 11, 100.0, paths="[]")
    dead = _add(conn, "claude", 12, 100.0, paths="[]")
    for session, pid in ((live, 21), (live, 22), (dead, 23)):
        presence.add_watch(conn, session, pid=pid, start_time=200.0)
    probe = probe_of({11: 100.0, 21: 200.0, 23: 200.0})
    assert presence.prune_dead(conn, here=HERE, probe=probe) == 1
    assert [tuple(r) for r in conn.execute("SELECT session_id, pid FROM session_watches")] == [(live, 21)]
    (session,) = presence.sessions(conn, "claude", here=HERE, probe=probe)
    assert session.wake_paths == ("monitor",)
    assert presence.add_watch(conn, dead, pid=24, start_time=1.0) is None  # the session is gone
    with pytest.raises(BridgeError) as refused:
        presence.record_wake_path(conn, live, "monitor")
    assert refused.value.code == "invalid_wake_path"


def test_who_report_lists_live_sessions_and_inboxes_payload_free(conn, tmp_path, monkeypatch):
    from dispatcher.bridge import messages

    monkeypatch.setenv("AGENT_BRIDGE_RUNTIME_DIR", str(tmp_path / "runtime"))
    from dispatcher.core.settings import BridgeSettings

    settings = BridgeSettings(db=tmp_path / "bridge.db")
    live = _add(conn, "claude", 11, 100.0, paths='["hook"]')
    conn.execute(
        "UPDATE sessions SET client_name = 'claude-code', client_version = '2.1.332', last_call_at = ? WHERE id = ?",
        (NOW - 5, live),
    )
    _add(conn, "claude", 12, 100.0)  # dead: left out
    _add(conn, "claude", 13, 100.0, role="worker")  # a worker's server: counted apart
    foreign = _add(conn, "kimi", 11, 100.0, host="host-b")  # unknown: shown as such
    secret = "CANARY-who-5e1 secret text"
    messages.send_message(
        conn,
        sender="kimi",
        recipient="claude",
        text=secret,
        agents={"claude", "kimi"},
        max_body_bytes=1000,
        kind="task",
    )
    report = who.who_report(
        conn, ["claude", "kimi"], settings, time.time(), here=HERE, probe=probe_of({11: 100.0, 13: 100.0})
    )
    claude, kimi = report["agents"]
    assert [s["id"] for s in claude["sessions"]] == [live] and claude["workers"] == 1
    view = claude["sessions"][0]
    assert (view["client"], view["client_version"], view["wake_paths"], view["liveness"]) == (
        "claude-code",
        "2.1.332",
        ["hook"],
        "alive",
    )
    assert claude["unread"] == 1 and claude["oldest_unread_age_seconds"] >= 0
    assert claude["listener"] == {"running": False, "pid": None, "stage": "stopped", "host": None}
    assert [(s["id"], s["liveness"]) for s in kimi["sessions"]] == [(foreign, "unknown")]
    assert kimi["unread"] == 0 and kimi["oldest_unread_age_seconds"] is None
    assert secret not in json.dumps(report) and "CANARY" not in who.render_who(report)


def test_v4_store_migrates_to_one_with_an_empty_sessions_table_and_every_row_kept(tmp_path):
    db = store_from_fixture(tmp_path / "store_v4.db", "store_v4", 4)
    before = table_rows(db, V4_TABLES)
    assert [len(before[t]) for t in V4_TABLES] == [6, 3, 1, 1, 1]
    conn = open_store(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert_rows_kept(conn, before)
    columns = [r[1] for r in conn.execute("PRAGMA table_info(sessions)")]
    assert columns[:12] == [
        "id",
        "agent",
        "role",
        "host",
        "pid",
        "start_time",
        "client_pid",
        "client_name",
        "client_version",
        "started_at",
        "last_call_at",
        "wake_paths",
    ]
    assert conn.execute("SELECT COUNT(*) FROM sessions").fetchone()[0] == 0
    conn.execute(
        "INSERT INTO sessions (agent, role, host, pid, started_at) VALUES ('claude', 'interactive', 'h', 1, 0)"
    )
    assert conn.execute("SELECT wake_paths FROM sessions").fetchone()[0] == "[]"
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute("INSERT INTO sessions (agent, role, host, pid, started_at) VALUES ('claude', 'boss', 'h', 1, 0)")
    assert "sessions_by_agent" in {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()


# -- real process evidence -------------------------------------------------------------------
def test_a_recycled_pid_is_dead_and_pruned(conn):
    """The row's pid runs, but it is another process (started later): the start time tells them apart."""
    me = os.getpid()
    here = processes.this_host()
    older = start_time(me) + "0"  # another start: ten times its ticks
    sid = presence.register_session(
        conn, "claude", "interactive", pid=me, start_time=older, client_pid=None, now=time.time()
    )
    assert [s.liveness for s in presence.sessions(conn, "claude")] == ["dead"]
    assert presence.prune_dead(conn, here=here) == 1
    assert conn.execute("SELECT COUNT(*) FROM sessions WHERE id = ?", (sid,)).fetchone()[0] == 0


def test_server_presence_survives_a_store_that_refuses_its_writes(tmp_path):
    """Presence is a view: a store that cannot take the row must not stop the server or fail a call."""
    from dispatcher.store import SqliteStore

    store = SqliteStore(tmp_path / "bridge.db")
    try:
        sp = presence.ServerPresence(store, "claude", "interactive")
        assert sp.session_id is not None
        store.connection().execute("DROP TABLE sessions")  # every later write fails (OperationalError)
        sp.on_call()
        sp.on_client({"name": "x", "version": "1"})
        sp.wake_path("hook")
        sp.close()
        assert presence.ServerPresence(store, "claude", "interactive").session_id is None  # no row, still serving
    finally:
        store.close()


def test_session_ids_are_never_reused(conn):
    """A hook or wake path holding an id must never mark a later session that got the same id."""
    first = presence.register_session(
        conn,
        "claude",
        "interactive",
        pid=11,
        start_time=1.0,
        client_pid=None,
        now=NOW,
        here=HERE,
        probe=probe_of({11: 1.0}),
    )
    assert presence.end_session(conn, first)
    second = presence.register_session(
        conn,
        "claude",
        "interactive",
        pid=11,
        start_time=1.0,
        client_pid=None,
        now=NOW,
        here=HERE,
        probe=probe_of({11: 1.0}),
    )
    assert second > first and not presence.end_session(conn, first)
    with pytest.raises(BridgeError):
        presence.record_wake_path(conn, first, "hook")


def test_session_of_ancestor_finds_the_session_of_the_cli_above_a_shell(conn, tmp_path):
    """A hook runs as CLI -> sh -> hook: its session is the one whose client is its nearest ancestor."""
    host = processes.this_host()
    conn.execute(
        "INSERT INTO sessions (agent, role, host, pid, client_pid, started_at) VALUES"
        " ('claude', 'interactive', ?, 50, ?, 1), ('claude', 'interactive', ?, 51, 1, 2)",
        (host, os.getpid(), host),
    )
    hook = (
        "import sys; from dispatcher.bridge import presence; from dispatcher.store import open_store;"
        "c = open_store(sys.argv[1]); print(presence.session_of_ancestor(c, sys.argv[2])); c.close()"
    )
    from harness import PROJECT

    for agent, expected in (("claude", "1"), ("kimi", "None")):
        done = subprocess.run(
            ["sh", "-c", f'"{sys.executable}" -c "$0" "$1" "$2"; true', hook, str(tmp_path / "bridge.db"), agent],
            capture_output=True,
            text=True,
            cwd=PROJECT,
            timeout=60,
        )
        assert done.stdout.strip() == expected, done.stderr
    assert presence.session_of_ancestor(conn, "claude", 2**22 + 12345) is None  # no such process
