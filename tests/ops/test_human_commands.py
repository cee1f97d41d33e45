"""A person's command line to the bridge: `send`, `inbox --agent`, `conversation start|status|cancel`.

Before these commands a person could reach the bridge only by typing JSON-RPC into
`agent-bridge serve`. They go through the same domain functions as the tools, with the same
identity rule (the sender must be a declared agent), a refusal ends with one line and exit 2,
and `send --wait` follows a task through a real listener and worker to its outcome and reply.
"""

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from dispatch_harness import cli, make_launcher, start_listener, stop_listener
from harness import PROJECT, bridge_env, sql, write_config


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    agents = {
        "claude": {"auto": True, "launcher": "launchers/command_headless.sh", "worker_timeout_seconds": 120},
        "kimi": {"auto": False, "launcher": "launchers/kimi_headless.sh"},
    }
    return bridge_env(tmp_path, write_config(tmp_path / "config.json", agents))


def _one_line(done: subprocess.CompletedProcess) -> str:
    (line,) = done.stderr.splitlines()
    return line


def test_send_writes_a_task_from_the_declared_sender_and_prints_its_id(env):
    done = cli(env, "send", "--from", "kimi", "--to", "claude", "--task", "rename the widget")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "sent task #1 from kimi to claude"
    assert sql(env["AGENT_BRIDGE_DB"], "SELECT sender, recipient, kind, text, origin FROM messages") == [
        ("kimi", "claude", "task", "rename the widget", "agent")
    ]


def test_send_reads_the_text_from_stdin_and_a_note_has_no_kind(env):
    done = subprocess.run(
        [sys.executable, "-m", "dispatcher", "send", "--from", "kimi", "--to", "claude", "--note", "-", "--json"],
        cwd=PROJECT,
        env={**env, "PATH": "/usr/bin:/bin"},
        input="line one\nline two\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    sent = json.loads(done.stdout)
    assert (sent["id"], sent["kind"], sent["duplicate"]) == (1, None, False)
    assert sql(env["AGENT_BRIDGE_DB"], "SELECT kind, text FROM messages") == [(None, "line one\nline two\n")]


def test_a_repeated_dedup_key_sends_nothing_new(env):
    first = cli(env, "send", "--from", "kimi", "--to", "claude", "--task", "x", "--dedup-key", "k1")
    again = cli(env, "send", "--from", "kimi", "--to", "claude", "--task", "x", "--dedup-key", "k1")
    assert first.returncode == again.returncode == 0
    assert "nothing new was sent" in again.stdout
    assert sql(env["AGENT_BRIDGE_DB"], "SELECT COUNT(*) FROM messages") == [(1,)]


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (("--from", "bob", "--to", "claude", "--task", "x"), "unknown_agent"),
        (("--from", "kimi", "--to", "bob", "--task", "x"), "unknown_recipient"),
        (("--from", "kimi", "--to", "claude", "--task", "x", "--note", "y"), "usage_error"),
        (("--from", "kimi", "--to", "claude"), "usage_error"),
        (("--from", "kimi", "--to", "claude", "--note", "x", "--wait"), "usage_error"),
        (("--from", "kimi", "--to", "claude", "--task", "   "), "empty_text"),
    ],
)
def test_a_refused_send_writes_nothing_and_ends_with_one_line_and_status_2(env, args, code):
    done = cli(env, "send", *args)
    assert done.returncode == 2, done.stderr
    assert _one_line(done).startswith(f"agent-bridge: {code}: ")
    db = Path(env["AGENT_BRIDGE_DB"])
    assert not db.exists() or sql(db, "SELECT COUNT(*) FROM messages") == [(0,)]


def test_inbox_lists_an_agents_messages_and_unread_hides_the_acknowledged(env):
    for text in ("first task", "second task"):
        assert cli(env, "send", "--from", "kimi", "--to", "claude", "--task", text).returncode == 0
    sql(env["AGENT_BRIDGE_DB"], "UPDATE messages SET acknowledged_at = created_at WHERE id = 1")
    every = cli(env, "inbox", "--agent", "claude")
    assert every.returncode == 0, every.stderr
    lines = every.stdout.splitlines()
    assert lines[0].startswith("#1 task from kimi ") and lines[0].endswith(" read: first task")
    assert lines[1].startswith("#2 task from kimi ") and lines[1].endswith(" unread: second task")
    unread = json.loads(cli(env, "inbox", "--agent", "claude", "--unread", "--json").stdout)
    assert [m["id"] for m in unread] == [2]
    assert cli(env, "inbox", "--agent", "kimi").stdout.strip() == "no messages for kimi"
    assert sql(env["AGENT_BRIDGE_DB"], "SELECT id FROM messages WHERE acknowledged_at IS NULL") == [(2,)]


def test_inbox_needs_a_declared_agent(env):
    bare = cli(env, "inbox")
    assert bare.returncode == 2 and _one_line(bare).startswith("agent-bridge: usage_error: --agent is required")
    other = cli(env, "inbox", "--agent", "bob")
    assert other.returncode == 2 and _one_line(other).startswith("agent-bridge: unknown_agent: ")


def test_conversation_start_status_cancel(env):
    started = cli(
        env, "conversation", "start", "--from", "kimi", "--to", "claude", "--goal", "name it", "--max-turns", "4"
    )
    assert started.returncode == 0, started.stderr
    conv = json.loads(started.stdout)
    cid = str(conv["conversation_id"])
    status = json.loads(cli(env, "conversation", "status", cid, "--agent", "claude").stdout)
    assert (status["state"], status["turn_count"], status["in_flight"]["kind"]) == ("active", 1, "task")
    outsider = cli(env, "conversation", "status", cid, "--agent", "bob")
    assert outsider.returncode == 2 and _one_line(outsider).startswith("agent-bridge: unknown_agent: ")
    cancelled = json.loads(cli(env, "conversation", "cancel", cid, "--agent", "kimi").stdout)
    assert cancelled["state"] == "cancelled"
    refused = cli(env, "conversation", "start", "--from", "kimi", "--to", "kimi", "--goal", "x")
    assert refused.returncode == 2 and _one_line(refused).startswith("agent-bridge: unknown_recipient: "), (
        refused.stderr
    )


def test_send_wait_prints_the_outcome_and_the_reply_of_a_dispatched_worker(env):
    """The scripted demo worker through the command launcher stands in for the model."""
    worker = f"{shlex.quote(sys.executable)} -m dispatcher.ops.demo_worker"
    env = {**env, "AGENT_BRIDGE_WORKER_COMMAND": worker, "PYTHONPATH": str(PROJECT)}
    listener = start_listener(env)
    try:
        done = cli(env, "send", "--from", "kimi", "--to", "claude", "--task", "count these words", "--wait")
    finally:
        stop_listener(listener)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "sent task #1 from kimi to claude"
    assert lines[1].startswith("task #1: succeeded, cli_status ")
    assert lines[3] == "result #2 from claude:"
    assert lines[4].startswith("done: read your 3-word task (message #1)")


def test_send_wait_on_a_failed_attempt_exits_4_and_says_where_to_look(env, tmp_path):
    launcher = make_launcher(tmp_path, "noop")
    write_config(
        tmp_path / "config.json",
        {
            "claude": {"auto": True, "launcher": str(launcher), "worker_timeout_seconds": 60},
            "kimi": {"auto": False, "launcher": "launchers/kimi_headless.sh"},
        },
    )
    listener = start_listener(env)
    try:
        done = cli(env, "send", "--from", "kimi", "--to", "claude", "--task", "do nothing", "--wait")
    finally:
        stop_listener(listener)
    assert done.returncode == 4, done.stderr
    assert done.stdout.splitlines()[1].startswith("task #1: failed (no_evidence)")
    assert _one_line(done).startswith("agent-bridge: attempt_failed: task #1 ended failed (no_evidence)")
    assert "agent-bridge show 1" in done.stderr


def test_send_wait_gives_up_after_its_timeout_and_the_task_stays_queued(env):
    done = cli(env, "send", "--from", "kimi", "--to", "claude", "--task", "nobody listens", "--wait", "--timeout", "1")
    assert done.returncode == 1
    assert _one_line(done).startswith("agent-bridge: wait_timeout: task #1 has not settled after 1 s")
    assert sql(env["AGENT_BRIDGE_DB"], "SELECT acknowledged_at FROM messages") == [(None,)]


def test_send_dash_reads_at_most_the_limit_from_an_endless_stdin_and_refuses(env):
    """Issue 30, item 7: `send -` read all of stdin before checking the size: 200 MB took 420 MiB,
    and an endless `yes |` grew without bound. It reads the limit and one byte more, then refuses."""
    import os
    import threading

    yes = subprocess.Popen(["yes"], stdout=subprocess.PIPE)
    try:
        send = subprocess.Popen(
            # /usr/bin/time reports the sender's own peak: a child forked from this (large) test
            # process would start its ru_maxrss at this process's size.
            ["/usr/bin/time", "-f", "maxrss_kb=%M", sys.executable, "-m", "dispatcher", "send", "--from", "kimi"]
            + ["--to", "claude", "--note", "-"],
            cwd=PROJECT,
            env={**os.environ, **env, "AGENT_BRIDGE_MAX_BODY_BYTES": "65536"},
            stdin=yes.stdout,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        yes.stdout.close()  # only the sender reads it: `yes` ends on SIGPIPE once it stops
        watchdog = threading.Timer(120, send.kill)  # a sender that reads on without end is killed: a failure
        watchdog.start()
        send.wait()
        watchdog.cancel()
        stderr, _, peak = send.stderr.read().decode().rpartition("maxrss_kb=")
        send.stdout.close()
        send.stderr.close()
    finally:
        yes.kill()
        yes.wait()
    assert send.returncode == 2, stderr
    assert stderr.startswith("agent-bridge: text_too_large: standard input holds more than 65536 bytes"), stderr
    assert int(peak) * 1024 < 150 * 2**20, peak  # what importing the command takes, not the input
    if Path(env["AGENT_BRIDGE_DB"]).exists():
        assert sql(env["AGENT_BRIDGE_DB"], "SELECT count(*) FROM messages") == [(0,)]
