"""Presence through real servers: each server process registers its row with the client from the
handshake, the who tool and `agent-bridge who` report it, a worker's server is a worker (and has no
who tool), tool calls touch the row without a write per call, a clean exit removes the row, and
kill -9 or SIGTERM leave a row that is never shown alive and is cleaned lazily."""

import json
import os
import signal
import time

import pytest
from dispatch_harness import cli, wait_until
from harness import McpAgent, sql

from dispatcher.bridge import presence
from dispatcher.core import processes
from dispatcher.core.host_lease import HOST_LEASE_ENV

# The session rows name the server's parent (the client): here this test process, not a zygote.
FRESH_INTERPRETER_SERVERS = True
from dispatcher.store import open_store

pytestmark = pytest.mark.both_backends


def _rows(db, agent=None) -> list[dict]:
    where = "" if agent is None else f" WHERE agent = '{agent}'"
    cols = [
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
    return [
        dict(zip(cols, r, strict=True)) for r in sql(db, f"SELECT {', '.join(cols)} FROM sessions{where} ORDER BY id")
    ]


def _who_cli(env, *args) -> dict:
    done = cli(env, "who", "--json", *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def worker(env):
    agent = McpAgent("kimi", {**env, "AGENT_BRIDGE_ROLE": "worker"})
    yield agent.wait_ready()
    agent.close()


def test_a_session_registers_with_its_client_and_who_shows_it(claude, kimi, worker, env, db_path):
    claude.ok("receive_messages")
    mine = _rows(db_path, "claude")
    assert len(mine) == 1
    row = mine[0]
    assert (row["role"], row["host"], row["client_pid"]) == ("interactive", processes.this_host(), os.getpid())
    assert (row["client_name"], row["client_version"]) == ("mcp", "0.1.0")  # the SDK client's clientInfo
    assert (
        processes.liveness(
            row["host"],
            row["start_time"],
            here=processes.this_host(),
            observed_start=processes.start_time(row["pid"]),
        )
        == "alive"
    )
    report = claude.ok("who")
    by_agent = {a["agent"]: a for a in report["agents"]}
    assert [s["id"] for s in by_agent["claude"]["sessions"]] == [row["id"]]
    assert by_agent["kimi"]["workers"] == 1 and len(by_agent["kimi"]["sessions"]) == 1
    assert claude.ok("who", agent="kimi")["agents"][0]["agent"] == "kimi"
    refused = claude.call("who", agent="nobody")
    assert refused.is_error and refused.text.startswith("unknown_agent: ")
    refused = claude.call("who", agent=True)
    assert refused.is_error and refused.text.startswith("invalid_arguments: ")
    assert _who_cli(env, "--agent", "claude")["agents"][0]["sessions"][0]["id"] == row["id"]
    text = cli(env, "who").stdout
    assert f"session #{row['id']} mcp 0.1.0" in text and "listener stopped" in text


def test_a_workers_server_is_a_worker_without_the_who_tool(worker, claude, db_path):
    names = {t.name for t in worker.list_tools()}
    assert "who" not in names and "listener" not in names and len(names) == 8
    assert [r["role"] for r in _rows(db_path, "kimi") if r["role"] == "worker"] == ["worker"]
    assert {"who", "listener"} <= {t.name for t in claude.list_tools()}


def test_tool_calls_touch_the_row_at_most_once_per_interval(claude, db_path):
    time.sleep(presence.TOUCH_EVERY_SECONDS)
    before = _rows(db_path, "claude")[0]["last_call_at"]
    assert claude.call("get_message", message_id=10**9).is_error
    assert _rows(db_path, "claude")[0]["last_call_at"] == before  # a refusal changes nothing, this row included
    claude.ok("receive_messages")
    first = _rows(db_path, "claude")[0]["last_call_at"]
    for _ in range(5):
        claude.ok("receive_messages")
    assert _rows(db_path, "claude")[0]["last_call_at"] == first or (
        time.time() - first >= presence.TOUCH_EVERY_SECONDS
    )  # unless the interval passed meanwhile
    time.sleep(presence.TOUCH_EVERY_SECONDS)
    claude.ok("receive_messages")
    assert _rows(db_path, "claude")[0]["last_call_at"] > first


def test_a_clean_exit_removes_the_row(env, db_path):
    agent = McpAgent("claude", env).wait_ready()
    agent.ok("receive_messages")
    pid = _rows(db_path, "claude")[-1]["pid"]
    agent.close()  # stdin closes: the server ends cleanly
    wait_until(lambda: pid not in [r["pid"] for r in _rows(db_path)], what="the row of the closed session to go")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_killed_session_is_never_shown_alive_and_is_cleaned_lazily(sig, claude, env, db_path):
    agent = McpAgent("claude", env).wait_ready()
    try:
        agent.ok("receive_messages")
        victim = _rows(db_path, "claude")[-1]
        os.kill(victim["pid"], sig)
        wait_until(lambda: processes.start_time(victim["pid"]) is None, what="the server to die")
        assert victim["id"] in [r["id"] for r in _rows(db_path)]  # nobody removed it: the process was killed
        shown = [s["id"] for s in _who_cli(env, "--agent", "claude")["agents"][0]["sessions"]]
        assert victim["id"] not in shown and shown  # the read-only CLI leaves it out, keeps the live one
        assert victim["id"] in [r["id"] for r in _rows(db_path)]  # ... and writes nothing
        shown = [s["id"] for s in claude.ok("who", agent="claude")["agents"][0]["sessions"]]
        assert victim["id"] not in shown
        assert victim["id"] not in [r["id"] for r in _rows(db_path)]  # the tool cleaned it
    finally:
        agent.close()


def test_who_cli_without_a_store_or_with_an_undeclared_agent(env, tmp_path):
    missing = tmp_path / "none" / "bridge.db"
    report = _who_cli({**env, "AGENT_BRIDGE_DB": str(missing)})
    assert {a["agent"] for a in report["agents"]} == {"claude", "kimi"} and not missing.parent.exists()
    assert all(a["sessions"] == [] and a["unread"] == 0 for a in report["agents"])
    done = cli(env, "who", "--agent", "nobody")
    assert done.returncode == 2 and done.stderr.startswith("agent-bridge: unknown_agent: ")
    done = cli(env, "who", "--agent", "Bad Id")
    assert done.returncode == 2 and done.stderr.startswith("agent-bridge: usage_error: ")


def _renewals(db, session_id) -> tuple[float, float | None]:
    return tuple(sql(db, "SELECT started_at, renewed_at FROM sessions WHERE id = ?", (session_id,))[0])


def test_another_host_sees_a_session_alive_while_its_server_renews_it(env, db_path, backend, monkeypatch):
    """On a store that spans hosts the server renews its row (lease shortened to 4 s, renewed
    every 1 s), so a host that cannot see its process counts it alive, and ``unknown`` once
    renewals stop (kill -9); a SQLite file is one host's, and its server never renews."""
    lease = 4.0
    agent = McpAgent("claude", {**env, HOST_LEASE_ENV: str(lease), "AGENT_BRIDGE_HOST_ID": "host-a"}).wait_ready()
    try:
        agent.ok("receive_messages")
        row = next(r for r in _rows(db_path, "claude") if r["host"] == "host-a")
        conn = open_store(db_path)
        try:

            def seen_from_b(now: float | None = None) -> str:
                found = presence.sessions(conn, "claude", here="host-b", now=now)
                return next(s.liveness for s in found if s.id == row["id"])

            started_at, renewed_at = _renewals(db_path, row["id"])
            assert renewed_at == started_at  # registered: its first renewal
            monkeypatch.setenv(HOST_LEASE_ENV, str(lease))  # this process judges with the same lease
            if backend == "sqlite":
                # Calls for more than two renewal intervals, then: never renewed.
                until = time.monotonic() + lease / 2 + 0.5
                while time.monotonic() < until:
                    agent.ok("receive_messages")
                assert _renewals(db_path, row["id"]) == (started_at, started_at)
                assert seen_from_b(now=started_at + lease) == "unknown"
                return
            wait_until(lambda: _renewals(db_path, row["id"])[1] > started_at, what="the server to renew its row")
            assert seen_from_b() == "alive"
            os.kill(row["pid"], signal.SIGKILL)
            wait_until(lambda: processes.start_time(row["pid"]) is None, what="the server to die")
            last = _renewals(db_path, row["id"])[1]
            assert seen_from_b(now=last + lease - 0.5) == "alive"  # its last renewal still counts
            assert seen_from_b(now=last + lease) == "unknown"  # then it cannot be told: never dead
            assert presence.sessions(conn, "claude", here="host-a")[-1].liveness == "dead"  # its own host sees it
        finally:
            conn.close()
    finally:
        agent.close()
