"""`agent-bridge top`: snapshot and render on a real store, the missing extra, and a real terminal (tmux)."""

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dispatch_harness import (
    make_launcher,
    post_task,
    start_listener,
    status,
    wait_finished,
    wait_until,
    write_config_atomic,
)
from harness import PROJECT, bridge_env, on_backend, sql, write_config

CANARY = "CANARY-top-7f3a secret task text"


@pytest.fixture(params=["sqlite", "postgres"])
def own_store(tmp_path, monkeypatch, request):
    """A store of the test's own (the module's store is the tmux test's, with a live listener):
    a SQLite file, then a PostgreSQL store."""
    env = on_backend(bridge_env(tmp_path, write_config(tmp_path / "config.json")), request.param, request)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    from dispatcher.core.settings import BridgeSettings

    db = env["AGENT_BRIDGE_DB"]
    return BridgeSettings(), (db if request.param == "postgres" else Path(db))


def _text(renderable) -> str:
    from rich.console import Console

    console = Console(record=True, width=120, file=open(os.devnull, "w"))  # noqa: SIM115 - closed in the finally
    try:
        console.print(renderable)
        return console.export_text()
    finally:
        console.file.close()


def test_snapshot_and_render_show_attempts_conversations_and_inboxes_without_text(own_store):
    from dispatcher.ops.top import render, snapshot

    settings, db_path = own_store

    done = post_task(db_path, CANARY)
    running = post_task(db_path, CANARY + " two")
    conv = post_task(db_path, CANARY + " goal", conversation=True)
    now = time.time()
    sql(
        db_path,
        "INSERT INTO dispatch_attempts (message_id, agent, state, outcome, error_kind, started_at,"
        " finished_at, duration_seconds, cost_usd, diagnostics, cli_status) VALUES"
        " (?, 'claude', 'finished', 'failed', 'no_evidence', ?, ?, 2.5, 0.0123, '{\"num_turns\": 3}', 'auth_error')",
        (done, now - 10, now - 7.5),
    )
    sql(
        db_path,
        "INSERT INTO dispatch_attempts (message_id, agent, state, started_at, deadline) VALUES"
        " (?, 'claude', 'spawned', ?, ?)",
        (running, now - 30, now + 90),
    )
    sql(
        db_path,
        "INSERT INTO dispatch_attempts (message_id, agent, state, outcome, started_at, finished_at,"
        " duration_seconds, cost_usd) VALUES (?, 'claude', 'finished', 'succeeded', ?, ?, 1.0, 0.5)",
        (conv, now - 5, now - 4),
    )

    snap = snapshot(settings)
    assert [a["agent"] for a in snap["agents"]] == ["claude", "kimi"]
    assert [f["message_id"] for f in snap["in_flight"]] == [running]
    assert snap["in_flight"][0]["budget"] == pytest.approx(120)
    assert [(r["message_id"], r["outcome"]) for r in snap["recent"]] == [(conv, "succeeded"), (done, "failed")]
    [conversation] = snap["conversations"]
    assert conversation["cost_usd"] == pytest.approx(0.5) and conversation["max_turns"] >= 1
    assert snap["inboxes"]["claude"]["unread"] == 3
    assert snap["latest_diagnostics"]["message_id"] == conv

    screen = _text(render(snap, details=True))
    assert CANARY not in screen and "CANARY" not in screen
    assert f"#{running}" in screen and "spawned" in screen and "25%" in screen  # 30 s of a 120 s budget
    # the cause, in short: the CLI's status and the reason's code (before: only the error kind)
    assert re.search(rf"#{done}\s.*claude.*failed.*no_evidence.*auth_error.*auth_error.*2\.5s.*\$0\.0123", screen), (
        screen
    )
    assert re.search(rf"#{conversation['id']}\s.*kimi.*claude.*\d+/\d+.*\$0\.5000", screen), screen
    assert re.search(r"claude\s.*stopped.*\s3\s", screen), screen
    assert "Latest attempt's diagnostics" in screen

    kimi_only = _text(render(snap, filter_agent="kimi"))
    assert "no_evidence" not in kimi_only and "spawned" not in kimi_only  # claude's attempts
    assert f"#{conversation['id']}" in kimi_only  # kimi started it


def test_agent_filter_keys_cycle_and_pick():
    from dispatcher.ops.top import _next_filter

    names = ["claude", "kimi"]
    assert _next_filter(None, names, "a") == "claude"
    assert _next_filter("claude", names, "a") == "kimi"
    assert _next_filter("kimi", names, "a") is None
    assert _next_filter(None, names, "2") == "kimi"
    assert _next_filter("kimi", names, "0") is None
    assert _next_filter("kimi", names, "9") == "kimi"


def test_without_rich_top_prints_one_line_naming_the_extra(env):
    probe = "import sys; sys.modules['rich'] = None; from dispatcher.ops.cli import main; main(['top', '--once'])"
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=PROJECT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 1
    assert done.stderr.startswith("agent-bridge: missing_extra: ") and done.stderr.count("\n") == 1
    assert "agent-bridge[metrics,otel,postgres,top]" in done.stderr and "uv sync --all-extras" in done.stderr


def test_without_a_terminal_and_without_once_top_exits_at_once_with_one_line(env):
    """`agent-bridge top > file` (or in a pipe) used to draw a live screen that never ended."""
    done = subprocess.run(
        [sys.executable, "-m", "dispatcher", "top"],
        cwd=PROJECT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2 and done.stdout == "", done
    assert done.stderr.startswith("agent-bridge: usage_error: ") and done.stderr.count("\n") == 1, done.stderr
    assert "agent-bridge top --once" in done.stderr


def test_only_the_top_module_imports_rich():
    """The server and the status line never load it (structlog may, on its own, when rich is installed)."""
    users = [
        p.name
        for p in (PROJECT / "dispatcher").rglob("*.py")
        if re.search(r"^\s*(from|import) rich", p.read_text(), re.M)
    ]
    assert users == ["top.py"]
    probe = "import sys, dispatcher.ops.cli, dispatcher.dispatch.statusline; print('rich' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], cwd=PROJECT, capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stderr


def _tmux_missing() -> bool:
    return shutil.which("tmux") is None


@pytest.mark.skipif(
    _tmux_missing() and not os.environ.get("CI"),
    reason="tmux is not installed (apt-get install -y tmux); CI must have it",
)
def test_top_in_a_real_terminal_shows_a_dispatch_outcome(env, db_path, config_path, launchers, bridge_root):
    write_config_atomic(config_path, make_launcher(launchers, "hang"), timeout=4)
    start_listener(env)
    wait_until(lambda: status(env)["stage"] == "idle", deadline=30, what="listener idle")
    socket = bridge_root / "tmux.sock"
    tmux = ["tmux", "-S", str(socket)]
    command = shlex.join(
        [
            "env",
            "-u",
            "COLUMNS",
            "-u",
            "LINES",
            *(f"{k}={v}" for k, v in env.items()),
            "TERM=xterm-256color",
            sys.executable,
            "-m",
            "dispatcher",
            "top",
        ]
    )
    subprocess.run(
        [*tmux, "new-session", "-d", "-s", "top", "-x", "160", "-y", "50", "-c", str(PROJECT), command],
        check=True,
        timeout=30,
        capture_output=True,
    )
    try:

        def screen() -> str:
            return subprocess.run(
                [*tmux, "capture-pane", "-p", "-t", "top"], capture_output=True, text=True, timeout=30
            ).stdout

        def until(predicate, what: str, deadline: float = 10) -> str:
            """Poll the screen (a capture may catch a frame half redrawn); on timeout, show the last one."""
            last = ""
            end = time.monotonic() + deadline
            while time.monotonic() < end:
                last = screen()
                if predicate(last):
                    assert "CANARY" not in last, last
                    return last
                time.sleep(0.2)
            raise AssertionError(f"timed out after {deadline}s waiting for {what}; the screen:\n{last}")

        until(lambda s: "Recent outcomes" in s, "top's first frame", deadline=20)
        hung = post_task(db_path, CANARY + " hang")
        print(
            until(
                lambda s: re.search(rf"#{hung}\s.*claude\s.*spawned.*\s4\.0s\s", s),
                f"#{hung} in flight against its 4 s budget",
            )
        )
        until(
            lambda s: re.search(rf"#{hung}\s.*claude\s.*timeout\s.*timeout", s), f"the timeout of #{hung}", deadline=20
        )
        write_config_atomic(config_path, make_launcher(launchers, "succeed"))
        task = post_task(db_path, CANARY)
        wait_finished(db_path, task, deadline=30)
        shown = until(
            lambda s: re.search(rf"#{task}\s.*claude.*succeeded", s) and re.search(r"claude\s.*idle", s),
            f"the outcome of #{task} and an idle listener",
        )
        Path(bridge_root / "top-screen.txt").write_text(shown)
        print(shown)
        subprocess.run([*tmux, "send-keys", "-t", "top", "d"], check=True, timeout=30)
        until(
            lambda s: "Latest attempt's diagnostics" in s and f"attempt on message #{task} (claude)" in s,
            "the diagnostics panel after d",
        )
        subprocess.run([*tmux, "send-keys", "-t", "top", "2"], check=True, timeout=30)
        until(
            lambda s: "filter: kimi" in s and not re.search(rf"#{task}\s.*claude.*succeeded", s),
            "the kimi filter after 2, without claude's outcome",
        )
        subprocess.run([*tmux, "send-keys", "-t", "top", "q"], check=True, timeout=30)
        wait_until(
            lambda: (
                subprocess.run([*tmux, "has-session", "-t", "top"], capture_output=True, timeout=30).returncode != 0
            ),
            deadline=10,
            what="top to quit on q",
        )
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True, timeout=30)


def test_once_prints_one_frame_and_refuses_an_undeclared_agent(env):
    from dispatch_harness import cli

    frame = cli(env, "top", "--once", "--agent", "kimi", timeout=60)
    assert frame.returncode == 0, frame.stderr
    assert "filter: kimi" in frame.stdout and "Recent outcomes" in frame.stdout
    unknown = cli(env, "top", "--once", "--agent", "nobody", timeout=60)
    assert unknown.returncode == 2 and unknown.stderr.startswith("agent-bridge: unknown_agent: ")


def test_snapshot_and_render_show_live_interactive_sessions_only(own_store):
    """The sessions section: live interactive sessions (client, since, idle, wake paths), not a killed
    one, not a worker's server; names and numbers only."""
    from dispatcher.bridge import presence
    from dispatcher.core import processes
    from dispatcher.core.processes import start_time
    from dispatcher.ops.top import render, snapshot
    from dispatcher.store import open_store

    settings, db_path = own_store
    conn = open_store(db_path)
    try:
        me = os.getpid()
        live = presence.register_session(
            conn, "claude", "interactive", pid=me, start_time=start_time(me), client_pid=None, now=time.time() - 300
        )
        presence.set_client(conn, live, "claude-code", "2.1.332")
        presence.record_wake_path(conn, live, "hook")
        dead = conn.execute(
            "INSERT INTO sessions (agent, role, host, pid, start_time, client_name, started_at)"
            " VALUES ('kimi', 'interactive', ?, ?, 1.0, 'ghost-client', 0) RETURNING id",
            (processes.this_host(), me),
        ).fetchone()[0]  # our pid, another start: recycled
        conn.execute(
            "INSERT INTO sessions (agent, role, host, pid, start_time, client_name, started_at)"
            " VALUES ('kimi', 'worker', ?, ?, ?, 'worker-client', 0)",
            (processes.this_host(), me, start_time(me)),
        )
    finally:
        conn.close()
    post_task(db_path, CANARY)

    snap = snapshot(settings)
    assert [(s["id"], s["agent"], s["client"], s["wake_paths"]) for s in snap["sessions"]] == [
        (live, "claude", "claude-code", ["hook"])
    ]
    assert snap["sessions"][0]["since_seconds"] >= 300
    screen = _text(render(snap))
    assert "Interactive sessions" in screen and "CANARY" not in screen
    assert re.search(rf"#{live}\s.*claude.*claude-code 2\.1\.332.*\s5m\s.*hook.*alive", screen), screen
    assert "ghost-client" not in screen and "worker-client" not in screen and f"#{dead} " not in screen
    assert "claude-code" not in _text(render(snap, filter_agent="kimi"))


def test_the_agents_table_shows_every_running_attempt_and_the_hold():
    from dispatcher.ops.top import _workers, _workers_text

    progress = {
        "running": [{"message_id": 44, "sender": "kimi"}, {"message_id": 45, "sender": None}],
        "max_workers": 2,
        "held": "max_workers",
    }
    assert _workers_text(_workers(progress)) == "2/2 #44 #45 held: max_workers"
    assert _workers_text(_workers({"running": [], "max_workers": 1, "held": None})) == "0/1"
    assert _workers_text(_workers(None)) == _workers_text(_workers({"running": "junk"})) == "-"


@pytest.mark.parametrize(
    ("key", "agent", "answer"),
    [
        ("y", None, (3, "allow_once")),
        ("Y", None, (3, "allow_attempt")),
        ("n", None, (3, "deny")),
        ("n", "kimi", (5, "deny")),  # the oldest of the agent shown
        ("n", "codex", None),  # nothing shown: nothing answered
        ("q", None, None),
        (None, None, None),
    ],
)
def test_a_key_answers_the_oldest_approval_shown(key, agent, answer):
    """Issue 33: y allows the oldest waiting request once, Y for its attempt, n denies it."""
    from dispatcher.ops.top import approval_action

    waiting = [{"id": 3, "agent": "claude"}, {"id": 5, "agent": "kimi"}]
    assert approval_action(key, waiting, agent) == answer


def test_top_shows_the_waiting_approvals_never_their_input_and_a_key_decides(own_store):
    from dispatcher.ops.top import approval_action, render, snapshot
    from dispatcher.store import approvals as rows
    from dispatcher.store import open_store

    settings, db = own_store
    conn = open_store(db)
    try:
        now = time.time()
        waiting = rows.insert_request(
            conn,
            message_id=7,
            agent="claude",
            tool="Bash",
            tool_input='{"command": "secret-input"}',
            now=now,
            expires_at=now + 600,
        )
    finally:
        conn.close()
    snap = snapshot(settings)
    assert [(a["id"], a["tool"], a["task_id"]) for a in snap["approvals"]] == [(waiting, "Bash", 7)]
    text = _text(render(snap))
    assert "Approvals waiting" in text and f"#{waiting}" in text and "secret-input" not in text
    from dispatcher.ops.approvals import decide

    decide(settings, *approval_action("n", snap["approvals"], None))
    assert snapshot(settings)["approvals"] == []
