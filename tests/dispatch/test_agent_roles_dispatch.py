"""The listener, its supervisors and their workers' servers under per-agent PostgreSQL roles: the
end-to-end tests of ``test_listener.py`` run again here with claude's listener (and so every
supervisor and worker it starts) on claude's role and the claude and kimi servers on theirs.
Failure notices go from claude to the task's sender, which claude's role may write; the tests'
own checks use the owner's URL."""

from pathlib import Path

import pytest
import roles_fixtures
from dispatch_harness import make_launcher, start_listener, status, wait_until, write_config_atomic
from harness import collected_again, sql

# The module's fixtures: a PostgreSQL store, a role per agent, the servers on them.
backend, role_urls, pair = roles_fixtures.backend, roles_fixtures.role_urls, roles_fixtures.pair


@pytest.fixture(scope="module")
def listener(env, config_path, launchers, role_urls):
    """test_listener's listener, on claude's role."""
    write_config_atomic(config_path, make_launcher(launchers, "succeed"))
    proc = start_listener({**env, "AGENT_BRIDGE_DB": role_urls["claude"]})
    wait_until(lambda: status(env)["stage"] == "idle", what="listener idle")
    yield proc
    if proc.poll() is None:
        proc.terminate()
    proc.communicate(timeout=30)


globals().update(collected_again(Path(__file__).with_name("test_listener.py")))


def test_a_listener_on_another_agents_role_refuses_to_start(listener, env, role_urls, db_path):
    """kimi's listener started with claude's role: one line naming the fix, exit 2, no lease row
    (every write as kimi would be refused by the row policies), as a server does."""
    proc = start_listener({**env, "AGENT_BRIDGE_DB": role_urls["claude"]}, agent="kimi")
    out, err = proc.communicate(timeout=120)
    assert (proc.returncode, out) == (2, "")
    line = err.splitlines()[-1]
    assert line.startswith("agent-bridge: wrong_agent_role: AGENT_ID is kimi, but the role") and "db-role kimi" in line
    assert sql(db_path, "SELECT count(*) FROM listeners WHERE agent = 'kimi'") == [(0,)]
