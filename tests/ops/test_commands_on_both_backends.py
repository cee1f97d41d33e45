"""Every operator command on both backends (issue 28: ``costs`` failed on every PostgreSQL store
while its tests ran on SQLite alone). Each command here runs through the command line's own entry
point, in this process, on a real SQLite file and on a real PostgreSQL server. The commands with
a both-backends test elsewhere: ``doctor`` (tests/ops/test_doctor.py, its PostgreSQL store
checks), ``top`` (test_top.py), ``costs`` (test_costs.py), ``prune`` (test_prune.py), ``db-role``
(tests/store/test_agent_roles.py: refused on SQLite, run on PostgreSQL), and ``listener status``
with ``listener progress`` (tests/dispatch/test_listener_status.py, a listener of another host).
``listener run`` runs on both in tests/dispatch/test_listener.py, ``serve`` in tests/mcp (``metrics serve``
here, its server in this process). Not on
PostgreSQL yet: ``dispatch`` and ``listener enable|disable|recover|watch`` (TODO.md); ``demo`` makes
its own SQLite store."""

import json
import shlex
from pathlib import Path

import pytest
from harness import command_here, on_backend
from register_harness import entry, register_env, target

from dispatcher.core.locations import is_postgres_url
from dispatcher.store import open_store

pytestmark = pytest.mark.both_backends


@pytest.fixture
def env(tmp_path, backend, request) -> dict[str, str]:
    """A store of the test's own on ``backend``; HOME, every CLI's files, the config and runtime
    directories inside ``tmp_path``."""
    return on_backend(
        {
            **register_env(tmp_path),
            "XDG_CONFIG_HOME": str(tmp_path / "xdg-config"),
            "XDG_STATE_HOME": str(tmp_path / "xdg-state"),
            "XDG_RUNTIME_DIR": str(tmp_path / "xdg-runtime"),
            "AGENT_BRIDGE_RUNTIME_DIR": str(tmp_path / "runtime"),
        },
        backend,
        request,
    )


def ok(env: dict[str, str], *args: str) -> str:
    done = command_here(env, *args)
    assert done.returncode == 0, (args, done.stderr)
    return done.stdout


def test_init_then_send_show_inbox_pending_and_the_status_line(env, tmp_path):
    """The quick start's commands, each reading back what the one before it wrote."""
    env = {k: v for k, v in env.items() if k != "AGENT_BRIDGE_CONFIG"}  # init writes the XDG one
    (tmp_path / "ws").mkdir()
    ok(env, "init", "--scripted", "--workspace", str(tmp_path / "ws"))
    assert "claude" in json.loads((tmp_path / "xdg-config" / "agent-bridge" / "config.json").read_text())["agents"]
    sent = json.loads(ok(env, "send", "--from", "me", "--to", "claude", "--task", "rename the widget", "--json"))
    report = json.loads(ok(env, "show", str(sent["id"]), "--json"))
    assert (report["text"], report["sender"]) == ("rename the widget", "me")
    inbox = json.loads(ok(env, "inbox", "--agent", "claude", "--json"))
    assert [m["id"] for m in inbox] == [sent["id"]]
    pending = json.loads(ok(env, "listener", "pending", "--agent", "claude"))
    assert [m["id"] for m in pending["dispatchable"]] == [sent["id"]]
    assert "1 unread" in ok(env, "statusline", "--agent", "claude")


def test_register_names_the_store_in_use_and_unregister_takes_it_out(env):
    """The server, the hooks and the status line get the store as it is: a PostgreSQL URL once
    became a path below the working directory (and a new SQLite store there)."""
    ok(env, "register", "claude", "--agent", "claude", "--hooks", "--statusline")
    assert entry("claude", target(env, "claude"))["env"]["AGENT_BRIDGE_DB"] == env["AGENT_BRIDGE_DB"]
    settings = json.loads((Path(env["CLAUDE_CONFIG_DIR"]) / "settings.json").read_text())
    commands = [settings["statusLine"]["command"]] + [
        hook["command"] for event in settings["hooks"].values() for group in event for hook in group["hooks"]
    ]
    store_word = f"AGENT_BRIDGE_DB={env['AGENT_BRIDGE_DB']}"
    assert len(commands) > 1 and all(store_word in shlex.split(c) for c in commands), commands
    ok(env, "unregister", "claude", "--agent", "claude")
    assert "agent_bridge" not in json.loads(target(env, "claude").read_text()).get("mcpServers", {})


def test_uninstall_purge_deletes_a_sqlite_store_and_keeps_a_postgresql_one(env, backend):
    db = env["AGENT_BRIDGE_DB"]
    ok(env, "send", "--from", "kimi", "--to", "claude", "--note", "kept?")
    said = ok(env, "uninstall", "--purge")
    if backend == "sqlite":
        assert not Path(db).exists() and "purged" in said
        return
    assert is_postgres_url(db) and "kept the PostgreSQL store" in said
    conn = open_store(db)
    try:
        assert conn.execute("SELECT text FROM messages").fetchall() == [("kept?",)]
    finally:
        conn.close()


def test_a_conversation_started_read_and_cancelled_and_who(env):
    conv = json.loads(
        ok(env, "conversation", "start", "--from", "kimi", "--to", "claude", "--goal", "name it", "--max-turns", "4")
    )
    cid = str(conv["conversation_id"])
    status = json.loads(ok(env, "conversation", "status", cid, "--agent", "claude"))
    assert (status["state"], status["turn_count"]) == ("active", 1)
    assert json.loads(ok(env, "conversation", "cancel", cid, "--agent", "kimi"))["state"] == "cancelled"
    who = json.loads(ok(env, "who", "--json"))
    assert {a["agent"] for a in who["agents"]} >= {"claude", "kimi"}


def test_metrics_serve_answers_a_scrape_with_the_stores_figures(env):
    """``metrics serve``'s server, in this process: one scrape over HTTP on loopback, read through
    the read-only connection each scrape opens (docs/metrics.md)."""
    import threading
    import urllib.request

    from harness import environment

    from dispatcher.core.settings import BridgeSettings
    from dispatcher.ops.metrics_serve import metrics_server

    ok(env, "send", "--from", "kimi", "--to", "claude", "--task", "canary-ab12 a private task")
    with environment(env):
        server = metrics_server(BridgeSettings(), "127.0.0.1", 0)
    try:
        answering = threading.Thread(target=server.handle_request)
        answering.start()
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=60) as response:
            text = response.read().decode()
        answering.join(timeout=60)
    finally:
        server.server_close()
    assert 'agent_bridge_messages_sent_total{agent="claude",kind="task"} 1.0' in text, text
    # register_env's agents have auto off: the task is held for it, not dispatchable.
    assert 'agent_bridge_pending_tasks{agent="claude",state="auto_off"} 1.0' in text, text
    assert 'agent_bridge_listener_up{agent="claude",host="none"} 0.0' in text, text
    assert "canary" not in text
