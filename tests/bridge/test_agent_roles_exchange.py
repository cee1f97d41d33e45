"""The MCP exchange under per-agent PostgreSQL roles: the message, claim and conversation tests
of this folder run again here with each real server connecting as its own agent's role (set up
by ``agent-bridge db-role``), so the row policies admit everything an agent's server does as
itself. The tests' own checks (``sql``, ``db_path``) use the owner's URL."""

from pathlib import Path

import pytest
import roles_fixtures
from harness import McpAgent, collected_again, servers_on_roles, sql

SOURCES = ("test_messages", "test_claims_across_processes", "test_conversations")
RACERS = 8  # as test_claims_across_processes races them


# The module's fixtures: a PostgreSQL store, a role per agent, the servers on them.
backend, role_urls, pair = roles_fixtures.backend, roles_fixtures.role_urls, roles_fixtures.pair


@pytest.fixture(scope="module")
def racers(env, role_urls):
    """test_claims_across_processes's racers, on their agents' roles."""
    agents = servers_on_roles(["claude"] + ["kimi"] * RACERS, env, role_urls)
    yield agents[0], agents[1:]
    for agent in agents:
        agent.close()


for _source in SOURCES:
    globals().update(collected_again(Path(__file__).with_name(f"{_source}.py")))


def test_each_server_connects_as_its_own_agents_role(claude, kimi, db_path, role_urls):
    claude.ok("receive_messages"), kimi.ok("receive_messages")
    roles = {url.split("//")[1].split("@")[0] for url in role_urls.values()}
    connected = {
        row[0] for row in sql(db_path, "SELECT usename FROM pg_stat_activity WHERE datname = current_database()")
    }
    assert roles <= connected, connected


def test_a_server_claiming_another_agents_id_cannot_write_as_it(env, role_urls, db_path):
    """AGENT_ID says kimi, the role is claude's: the server refuses a write as kimi, and says why."""
    impostor = McpAgent("kimi", {**env, "AGENT_BRIDGE_DB": role_urls["claude"]})
    try:
        before = sql(db_path, "SELECT count(*) FROM messages")
        refused = impostor.call("send_message", recipient="claude", text="as kimi", kind="task")
        assert refused.code == "store_permission_denied", refused
        assert "row-level security" in refused.text and "agent-bridge db-role" in refused.text
        assert sql(db_path, "SELECT count(*) FROM messages") == before
    finally:
        impostor.close()
