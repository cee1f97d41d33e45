"""A host whose clock is 5 minutes ahead, on one PostgreSQL store with another host.

Leases, renewals and claims are written and judged by the store's clock (``store_clock.store_now``:
the database server's ``clock_timestamp()`` on PostgreSQL), never by the host's own: a host a
lease ahead used to judge every other host's live lease expired, take over its agent's listener,
settle its running attempt as ``host_lost`` and dispatch its claimed task a second time.

The step is what ``clock.now``, the one reader of the wall clock, returns (as in
``test_stepped_clock``): a host's own clock, moved without touching the machine's. Host ids come
from ``AGENT_BRIDGE_HOST_ID``, so that each host judges the other's rows by renewal alone."""

import os
import subprocess
import sys

import pytest
from dispatch_harness import DEADLINE, STARTED, post_task, query, start_listener, wait_until, write_config_atomic
from harness import PROJECT, bridge_env, write_config

from dispatcher.bridge import claims, messages, presence
from dispatcher.core import clock
from dispatcher.core.locations import Locations, StoreUrl
from dispatcher.core.processes import HOST_ID_ENV
from dispatcher.dispatch.paths import AgentPaths
from dispatcher.dispatch.reconcile import reconcile
from dispatcher.store import open_handle, open_store
from dispatcher.store.attempts import insert_attempt
from dispatcher.store.store_clock import store_now

AHEAD = 300.0
AGENTS = frozenset({"claude", "kimi"})

# The listener (what ``listener run`` execs) on a host whose clock is AHEAD seconds ahead.
LISTENER_AHEAD = f"""
import sys
from dispatcher.core import clock

real = clock.now
clock.now = lambda: real() + {AHEAD}
from dispatcher.dispatch.listener_main import listen
sys.exit(listen(sys.argv[1]))
"""


@pytest.fixture
def ahead(monkeypatch):
    """This process as a host whose own clock is AHEAD seconds ahead."""
    real = clock.now
    monkeypatch.setattr(clock, "now", lambda: real() + AHEAD)


def test_a_listener_5_minutes_ahead_leaves_another_hosts_live_lease(tmp_path, postgres_url):
    config = write_config(tmp_path / "config.json")
    write_config_atomic(config, tmp_path / "never-launched.sh")
    env_a = {**bridge_env(tmp_path / "a", config), "AGENT_BRIDGE_DB": postgres_url, HOST_ID_ENV: "host-a"}
    env_b = {**bridge_env(tmp_path / "b", config), "AGENT_BRIDGE_DB": postgres_url, HOST_ID_ENV: "host-b"}

    def holders() -> list:
        return query(postgres_url, "SELECT host FROM listeners")

    a = start_listener(env_a)
    wait_until(lambda: holders() == [("host-a",)], what="A holds the lease")
    b = subprocess.Popen(
        [sys.executable, "-c", LISTENER_AHEAD, "claude"],
        cwd=PROJECT,
        env={**os.environ, **env_b},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    STARTED.append(b)
    try:
        wait_until(lambda: b.poll() is not None or holders() != [("host-a",)], what="B stops or takes over")
        assert holders() == [("host-a",)]  # B judged A's lease by the server's clock: still live
        _, err = b.communicate(timeout=DEADLINE)
        assert b.returncode == 0, err
        assert f"the claude listener is already running (pid {a.pid} on host host-a)" in err, err
    finally:
        for listener in (b, a):
            if listener.poll() is None:
                listener.terminate()
            listener.communicate(timeout=DEADLINE)


def test_a_host_5_minutes_ahead_leaves_another_hosts_running_attempt(tmp_path, postgres_url, monkeypatch):
    """Host A's supervisor wrote its attempt's lease (2 minutes) by the store's clock; host B's
    reconciliation, 5 minutes ahead, sees it running."""
    conn = open_store(postgres_url)
    try:
        task = post_task(postgres_url, "runs on host A")
        started = store_now(conn)
        insert_attempt(
            conn,
            message_id=task,
            agent="claude",
            started_at=started,
            supervisor_pid=1,
            supervisor_start_time=None,
            deadline=started + 1800,
            worker_token="t",
            max_cost_usd=None,
            permission_level="bridge",
            host="host-a",
            lease_expires_at=started + 120,
        )
        real = clock.now
        monkeypatch.setattr(clock, "now", lambda: real() + AHEAD)  # now host B, 5 minutes ahead
        monkeypatch.setenv(HOST_ID_ENV, "host-b")
        where = Locations(db=StoreUrl(postgres_url), config=tmp_path / "config.json", runtime_dir=tmp_path / "runtime")
        paths = AgentPaths.of(where, "claude").ensure()
        assert len(reconcile(conn, paths)) == 1  # busy: A's attempt still runs
        assert query(postgres_url, "SELECT state FROM dispatch_attempts") == [("recorded",)]
    finally:
        conn.close()


def test_a_host_5_minutes_ahead_sees_another_hosts_session_alive_and_its_claim_held(postgres_url, monkeypatch):
    monkeypatch.setenv(HOST_ID_ENV, "host-a")
    store = open_handle(postgres_url)
    try:
        server = presence.ServerPresence(store, "claude", "interactive")  # registered by the store's clock
        conn = store.connection()
        task = messages.send_message(conn, sender="kimi", recipient="claude", text="t", agents=AGENTS, kind="task")
        claims.claim_message(conn, agent="claude", worker_id="session-on-a", message_id=task["id"], lease_seconds=60)

        real = clock.now
        monkeypatch.setattr(clock, "now", lambda: real() + AHEAD)  # now host B, 5 minutes ahead
        monkeypatch.setenv(HOST_ID_ENV, "host-b")
        [session] = presence.sessions(conn, "claude")
        assert (session.id, session.record.host, session.liveness) == (server.session_id, "host-a", "alive")
        seen = messages.receive_messages(conn, agent="claude", worker_id="worker-on-b")
        assert seen["messages"] == []  # claimed on A for another minute: hidden from B
    finally:
        store.close()


def test_the_store_clock_is_the_servers_on_postgresql_and_the_hosts_on_sqlite(tmp_path, postgres_url, ahead):
    pg = open_store(postgres_url)
    sqlite = open_store(tmp_path / "bridge.db")
    try:
        server_now = query(postgres_url, "SELECT extract(epoch FROM clock_timestamp())::double precision")[0][0]
        assert abs(store_now(pg) - server_now) < 60  # the server's clock: the step is not seen
        assert abs(store_now(sqlite) - clock.now()) < 60  # one host's file: its own (stepped) clock
        assert store_now(sqlite) - server_now > AHEAD - 60
    finally:
        pg.close()
        sqlite.close()
