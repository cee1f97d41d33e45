"""Every path that waits or reads on PostgreSQL survives its sessions being ended (issue 28, item
13): ``pg_terminate_backend`` (a restart or a failover does the same) costs one
``store_unavailable``, then a reconnect. The idle listener (its store connection, its LISTEN
connection, both), a ``receive_messages`` waiting in a real server over stdio, and a supervisor
renewing its worker's leases. On a private server (``private_postgres``): the sessions ended are
only ever this test's own."""

from pathlib import Path

import pytest
from dispatch_harness import (
    DEADLINE,
    attempt,
    log_events,
    post_task,
    start_listener,
    status,
    stop_listener,
    wait_finished,
    wait_until,
    write_config_atomic,
)
from harness import McpAgent, bridge_env, write_config
from pg_server import end_sessions

from dispatcher.core.host_lease import HOST_LEASE_ENV
from dispatcher.dispatch.faults import RENEW_ENV


def _env(tmp_path: Path, url: str, launcher_body: str = "exit 0") -> dict:
    launcher = tmp_path / "worker.sh"
    launcher.write_text(f"#!/bin/sh\n{launcher_body}\n")
    launcher.chmod(0o755)
    env = {**bridge_env(tmp_path, write_config(tmp_path / "config.json")), "AGENT_BRIDGE_DB": url}
    write_config_atomic(Path(env["AGENT_BRIDGE_CONFIG"]), launcher)
    return env


def _unavailable(env: dict, event: str) -> list[dict]:
    return [e for e in log_events(env, event) if e.get("code", "store_unavailable") == "store_unavailable"]


@pytest.mark.parametrize("ended", ["store", "listen", "both"])
def test_an_idle_listener_whose_sessions_are_ended_dispatches_the_next_task(tmp_path, private_postgres_url, ended):
    url = private_postgres_url
    env = _env(tmp_path, url)
    proc = start_listener(env)
    try:
        wait_until(lambda: (status(env)["progress"] or {}).get("stage") == "idle", what="listener idle")
        listening = {"store": False, "listen": True, "both": None}[ended]
        assert end_sessions(url, listening=listening), "no session of the listener's to end"
        task = post_task(url, "after the sessions ended")
        assert wait_finished(url, task)["state"] == "finished"
        assert proc.poll() is None, proc.stderr.read()
        # One line for the store connection that was ended (a LISTEN connection is opened again quietly).
        assert len(_unavailable(env, "store_error")) == (0 if ended == "listen" else 1)
        following = post_task(url, "the one after")
        assert wait_finished(url, following)["state"] == "finished"
    finally:
        stop_listener(proc)
    assert proc.returncode == 0


def test_a_waiting_receive_whose_sessions_are_ended_answers_once_then_reconnects(tmp_path, private_postgres_url):
    url = private_postgres_url
    env = {
        **bridge_env(tmp_path, write_config(tmp_path / "config.json")),
        "AGENT_BRIDGE_DB": url,
        HOST_LEASE_ENV: "3600",  # no session renewal on a connection of its own meanwhile
    }
    claude = McpAgent("claude", env, stderr_path=tmp_path / "claude.err").wait_ready()
    try:
        waiting = claude.call_async("receive_messages", wait_seconds=30)
        wait_until(lambda: _waiting(url), what="the receive to sleep in its wait")
        # The server's store connection and its LISTEN one; on a loaded machine also the backend of
        # a connection just closed (the readiness probe's) that has not exited yet.
        assert len(end_sessions(url)) >= 2
        ended = McpAgent._convert(waiting.result(DEADLINE))
        assert ended.code == "store_unavailable", ended.text
        task = post_task(url, "after the sessions ended")
        received = claude.ok("receive_messages", wait_seconds=30)
        assert [m["id"] for m in received["messages"]] == [task]
    finally:
        claude.close()
    lines = (tmp_path / "claude.err").read_text()
    assert lines.count('"store_error"') == 1, lines
    assert "internal_error" not in lines, lines


def _waiting(url: str) -> bool:
    import psycopg

    with psycopg.connect(url, autocommit=True) as admin:
        return (
            admin.execute(
                "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND state = 'idle' AND query LIKE '%pg_current_snapshot()%'"  # data_version's read
            ).fetchone()
            is not None
        )


def test_a_supervisor_whose_sessions_are_ended_renews_its_leases_again_and_settles(tmp_path, private_postgres_url):
    url = private_postgres_url
    done = tmp_path / "done"
    env = {
        **_env(tmp_path, url, f"while [ ! -e {done} ]; do sleep 0.1; done"),
        RENEW_ENV: "0.5",
    }
    proc = start_listener(env)
    try:
        task = post_task(url, "a long task")
        wait_until(lambda: (a := attempt(url, task)) and a["state"] == "spawned", what="the worker running")
        end_sessions(url)
        after = attempt(url, task)["lease_expires_at"]
        wait_until(lambda: attempt(url, task)["lease_expires_at"] > after, what="a renewal after the sessions ended")
        done.touch()
        assert wait_finished(url, task)["state"] == "finished"
        assert proc.poll() is None, proc.stderr.read()
    finally:
        stop_listener(proc)
    assert len(log_events(env, "claim_renewal_failed")) == 1  # the renewal that met the ended session
