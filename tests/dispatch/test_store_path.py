"""One store, whatever the path. The store is resolved to its real path once, at start; the
sidecar checks, the default runtime directory and the listener's lock are keyed on it.

Before: reached through a symlinked directory, a listener held the agent's lock but could not
open the store (``unsafe_path``, forever), so no task was ever launched; reached through a link
to the file, a server looked for ``-wal``/``-shm`` next to the link and exited ``store_missing``
while another session had the store open. A path that must be refused is refused at start,
with one line, before any lock is taken."""

import os
from pathlib import Path

import pytest
from dispatch_harness import (
    cli,
    make_launcher,
    post_task,
    start_listener,
    status,
    stop_listener,
    wait_finished,
    wait_until,
    write_config_atomic,
)
from harness import McpAgent, bridge_env

from dispatcher.core.locations import Locations
from dispatcher.core.settings import BridgeSettings

NOBODY = 65534


def _linked_env(env: dict, link: Path) -> dict:
    return {**env, "AGENT_BRIDGE_DB": str(link)}


def test_settings_resolve_the_store_to_its_real_file(tmp_path, monkeypatch):
    real_dir = tmp_path / "real"
    real_dir.mkdir(mode=0o700)
    (tmp_path / "dir-link").symlink_to(real_dir)
    (tmp_path / "file-link.db").symlink_to(real_dir / "bridge.db")
    for given in (tmp_path / "dir-link" / "bridge.db", tmp_path / "file-link.db"):
        monkeypatch.setenv("AGENT_BRIDGE_DB", str(given))
        monkeypatch.delenv("AGENT_BRIDGE_RUNTIME_DIR", raising=False)
        assert BridgeSettings().db == Locations.from_env().db == real_dir / "bridge.db"
        assert BridgeSettings().private_dir() == real_dir / "runtime"  # the lock's directory too


def test_a_listener_through_a_symlinked_directory_dispatches(env, config_path, launchers, db_path, tmp_path):
    link = tmp_path / "state-link"
    link.symlink_to(db_path.parent)
    write_config_atomic(config_path, make_launcher(launchers, "succeed"))
    listener = start_listener(_linked_env(env, link / db_path.name))
    try:
        task = post_task(db_path, "reach me through a linked directory")
        assert wait_finished(db_path, task)["outcome"] == "succeeded"
    finally:
        stop_listener(listener)
    write_config_atomic(config_path, make_launcher(launchers, "succeed"), auto=False)


@pytest.mark.parametrize("first_through", ["link", "real path"])
def test_two_listeners_through_a_link_to_the_file_and_the_real_path_are_one(
    env, config_path, launchers, db_path, tmp_path, first_through
):
    """A link to the store *file* and its real path name one store: whichever listener starts
    second exits "already running" (the lock is keyed on the real file), and the one that runs
    dispatches."""
    link = tmp_path / f"bridge-link-{first_through.replace(' ', '-')}.db"
    link.symlink_to(db_path)
    linked, direct = _linked_env(env, link), env
    first_env, second_env = (linked, direct) if first_through == "link" else (direct, linked)
    write_config_atomic(config_path, make_launcher(launchers, "succeed"))
    first = start_listener(first_env)
    try:
        wait_until(lambda: status(env)["stage"] == "idle", what="the first listener idle")
        second = start_listener(second_env)
        assert second.wait(60) == 0
        assert f"already running (pid {first.pid})" in second.stderr.read()
        assert first.poll() is None
        task = post_task(db_path, f"one listener, first through the {first_through}")
        assert wait_finished(db_path, task)["outcome"] == "succeeded"
    finally:
        stop_listener(first)
    write_config_atomic(config_path, make_launcher(launchers, "succeed"), auto=False)


def test_a_server_through_a_link_to_the_file_shares_the_open_store(env, db_path, tmp_path):
    link = tmp_path / "bridge-link.db"
    link.symlink_to(db_path)
    direct = McpAgent("claude", env, stderr_path=tmp_path / "direct.err")
    linked = None
    try:
        direct.ok("receive_messages", limit=1)  # the store is open (and its -wal/-shm in use) first
        linked = McpAgent("kimi", _linked_env(env, link), stderr_path=tmp_path / "linked.err")
        sent = linked.ok("send_message", recipient="claude", text="through the link")
        got = direct.ok("receive_messages", limit=100)["messages"]
        assert sent["id"] in [m["id"] for m in got]
        direct.ok("mark_read", message_ids=[sent["id"]])
        assert not Path(f"{link}-wal").exists() and not Path(f"{link}-shm").exists()
    finally:
        if linked is not None:
            linked.close()
        direct.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
def test_a_refused_store_path_is_refused_at_start_before_any_lock(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, NOBODY, NOBODY)
    env = bridge_env(tmp_path, tmp_path / "config.json")
    env["AGENT_BRIDGE_DB"] = str(theirs / "bridge.db")
    write_config_atomic(tmp_path / "config.json", "launchers/claude_headless.sh", auto=False)
    done = cli(env, "listener", "run", "--agent", "claude", timeout=60)
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.startswith("agent-bridge:")]
    assert len(errors) == 1 and "unsafe_path" in errors[0] and str(theirs) in errors[0], done.stderr
    assert not (tmp_path / "runtime").exists()  # no lock (nor its directory) was taken
