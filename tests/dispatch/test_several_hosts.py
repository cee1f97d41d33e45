"""Two hosts on one PostgreSQL store, on one machine: each host's processes run in a PID
namespace of their own (``unshare --pid --fork --mount-proc``), so that neither's /proc shows
the other's, with a host id of their own (``AGENT_BRIDGE_HOST_ID``).

An agent's listener started on both hosts runs on one. Host A is killed (every process, -9)
in mid-dispatch; host B then takes the agent over once A's listener lease has run out, settles
A's attempt as ``crashed`` (``host_lost``) with one notice once its lease has run out too,
launches nothing twice, and dispatches the next task itself. The leases are shortened
(``AGENT_BRIDGE_TEST_HOST_LEASE_SECONDS``); the rules themselves have unit tests
(``test_step_decisions``)."""

import shutil
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from dispatch_harness import (
    DEADLINE,
    attempt,
    notices_for,
    post_task,
    query,
    start_listener,
    wait_until,
    write_config_atomic,
)
from harness import bridge_env, sql, write_config

from dispatcher.core.host_lease import HOST_LEASE_ENV
from dispatcher.dispatch.faults import NO_CGROUP_ENV, RENEW_ENV

LEASE_SECONDS = 6.0
pytestmark = pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux)")

# Records each launch, then the first task's worker hangs (it is mid-dispatch when its host
# dies); any later one ends at once.
LAUNCHER = """#!/bin/sh
echo "$AGENT_BRIDGE_MESSAGE_ID" >> {launches}
[ "$(wc -l < {launches})" -gt 1 ] || exec sleep 3600
"""


def host(tmp_path: Path, name: str, url: str, config: Path) -> dict:
    root = tmp_path / name
    return {
        **bridge_env(root, config),
        "AGENT_BRIDGE_DB": url,
        "AGENT_BRIDGE_HOST_ID": name,
        HOST_LEASE_ENV: str(LEASE_SECONDS),
        RENEW_ENV: "0.5",
        NO_CGROUP_ENV: "1",
    }


def start_on(env: dict) -> subprocess.Popen:
    """``listener run`` as pid 1 of a PID namespace of its own: killing it kills its host (and
    ``unshare`` ended by the suite's clean-up kills it)."""
    return start_listener(env, wrapper=("unshare", "--pid", "--fork", "--mount-proc", "--kill-child"))


def listener_of(namespace: subprocess.Popen) -> psutil.Process:
    [init] = psutil.Process(namespace.pid).children()
    return init


def holder(url: str) -> tuple | None:
    rows = query(url, "SELECT host, renewed_at FROM listeners WHERE agent = 'claude'")
    return tuple(rows[0]) if rows else None


def test_one_listener_across_hosts_and_a_lost_hosts_attempt_is_settled_once_by_another(tmp_path, postgres_url):
    launches = tmp_path / "launches.txt"
    launcher = tmp_path / "launcher.sh"
    launcher.write_text(LAUNCHER.format(launches=launches))
    launcher.chmod(0o755)
    config = write_config(tmp_path / "config.json")
    write_config_atomic(config, launcher, timeout=3600)
    env_a, env_b = host(tmp_path, "host-a", postgres_url, config), host(tmp_path, "host-b", postgres_url, config)

    a = start_on(env_a)
    wait_until(lambda: (h := holder(postgres_url)) and h[0] == "host-a", what="host A's listener holds the lease")
    # Started on host B too, while A's listener renews its lease: B's says so and stops.
    refused = start_on(env_b)
    _, err = refused.communicate(timeout=DEADLINE)
    assert refused.returncode == 0
    assert "the claude listener is already running (pid 1 on host host-a)" in err, err

    task = post_task(postgres_url, "a task whose host dies")
    running = wait_until(
        lambda: (r := attempt(postgres_url, task)) and r["state"] == "spawned" and r, what="A's worker running"
    )
    assert running["host"] == "host-a"
    first_lease = running["lease_expires_at"]
    wait_until(lambda: attempt(postgres_url, task)["lease_expires_at"] > first_lease, what="A renews the lease")

    # Every process of host A, at once: its listener is the namespace's pid 1.
    listener_of(a).send_signal(signal.SIGKILL)
    a.communicate(timeout=DEADLINE)
    assert attempt(postgres_url, task)["state"] == "spawned"  # nobody is left on A to settle it

    # B's listener starts once A's listener lease has run out (its last renewal a lease ago).
    last_renewal = holder(postgres_url)[1]
    wait_until(lambda: time.time() > last_renewal + LEASE_SECONDS + 0.5, what="A's listener lease runs out")
    b = start_on(env_b)
    try:
        wait_until(lambda: (h := holder(postgres_url)) and h[0] == "host-b", what="host B's listener holds the lease")
        done = wait_until(
            lambda: (r := attempt(postgres_url, task)) and r["state"] == "finished" and r,
            what="B settles A's attempt once its lease has run out",
        )
        assert (done["outcome"], done["error_kind"]) == ("crashed", "host_lost")
        assert done["finished_at"] >= done["lease_expires_at"]
        assert len(notices_for(postgres_url, task)) == 1

        following = post_task(postgres_url, "the next task")
        ran = wait_until(
            lambda: (r := attempt(postgres_url, following)) and r["state"] == "finished" and r,
            what="B dispatches the next task",
        )
        assert ran["host"] == "host-b"
        # A's task was launched once, on A, and never again; the next one on B.
        assert launches.read_text().split() == [str(task), str(following)]
        assert len(notices_for(postgres_url, task)) == 1
    finally:
        listener_of(b).terminate()
        b.communicate(timeout=DEADLINE)


def test_a_listener_whose_lease_another_host_took_over_stops(tmp_path, postgres_url):
    """A listener that could not renew in time (cut off, stopped) and finds its row taken by a
    live listener of another host stops at its next renewal, saying who holds it."""
    config = write_config(tmp_path / "config.json")
    write_config_atomic(config, tmp_path / "never-launched.sh")
    a = start_on(host(tmp_path, "host-a", postgres_url, config))
    try:
        wait_until(lambda: (h := holder(postgres_url)) and h[0] == "host-a", what="host A's listener holds the lease")
        sql(
            postgres_url,
            "UPDATE listeners SET host = 'host-c', pid = 7, renewed_at = ? WHERE agent = 'claude'",
            (time.time() + 3600,),
        )
        _, err = a.communicate(timeout=DEADLINE)
    finally:
        if a.poll() is None:
            listener_of(a).kill()
    assert a.returncode == 0
    assert "the claude listener is already running (pid 7 on host host-c)" in err, err
    assert holder(postgres_url)[0] == "host-c"  # left to its holder
