"""Fixtures for the tests under per-agent PostgreSQL roles. Module fixtures for the test modules
that run other modules' tests again under such roles (``harness.collected_again``): the store is
PostgreSQL, claude and kimi each get a role of their own (``agent-bridge db-role``, the
conftest's ``agent_role``), and the module's claude and kimi servers connect with them; and
``owner_and_alice``, a store of a test's own as its owner and as alice's role. A module imports
these names to use them."""

import pytest
from harness import start_agents

from dispatcher.store import open_store


@pytest.fixture(scope="module")
def backend() -> str:
    return "postgres"


@pytest.fixture(scope="module")
def role_urls(env, agent_role) -> dict[str, str]:
    return {name: agent_role(env["AGENT_BRIDGE_DB"], name) for name in ("claude", "kimi")}


@pytest.fixture(scope="module")
def pair(env, role_urls):
    """The claude and kimi servers, each on its own agent's role."""
    agents = start_agents(["claude", "kimi"], env, role_urls)
    yield agents
    for agent in agents:
        agent.close()


@pytest.fixture
def owner_and_alice(postgres_url, agent_role):
    """A PostgreSQL store of the test's own: a connection as its owner, and one as alice's role
    (``agent-bridge db-role alice``)."""
    alice_url = agent_role(postgres_url, "alice")
    owner = open_store(postgres_url)
    alice = open_store(alice_url)
    yield owner, alice
    alice.close()
    owner.close()
