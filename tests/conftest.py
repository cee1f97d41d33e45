import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cli_harness import require_cli  # noqa: E402
from harness import bridge_env, start_agents, write_config  # noqa: E402


@pytest.fixture(scope="module")
def bridge_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("bridge")


@pytest.fixture(scope="module")
def env(bridge_root) -> dict[str, str]:
    return bridge_env(bridge_root, write_config(bridge_root / "config.json"))


@pytest.fixture(scope="module")
def config_path(env) -> Path:
    return Path(env["AGENT_BRIDGE_CONFIG"])


@pytest.fixture(scope="module")
def launchers(bridge_root) -> Path:
    """Where a dispatcher test module writes its fake launchers."""
    directory = bridge_root / "launchers"
    directory.mkdir()
    return directory


@pytest.fixture(scope="module")
def db_path(env) -> Path:
    return Path(env["AGENT_BRIDGE_DB"])


@pytest.fixture(scope="module")
def pair(env):
    """One claude and one kimi server on one store, shared by a module's tests."""
    agents = start_agents(["claude", "kimi"], env)
    yield agents
    for agent in agents:
        agent.close()


@pytest.fixture(scope="module")
def claude(pair):
    return pair[0]


@pytest.fixture(scope="module")
def kimi(pair):
    return pair[1]


@pytest.fixture(autouse=True)
def _end_listeners_started_by_the_test():
    import dispatch_harness

    before = len(dispatch_harness.STARTED)
    yield
    started = dispatch_harness.STARTED[before:]
    del dispatch_harness.STARTED[before:]
    dispatch_harness.end_listeners(started)


# The pinned agent CLIs (tests/cli_harness.py): the path, or a loud skip (a failure under CI=true).
@pytest.fixture(scope="module")
def claude_bin() -> Path:
    return require_cli("claude")


@pytest.fixture(scope="module")
def codex_bin() -> Path:
    return require_cli("codex")


@pytest.fixture(scope="module")
def gemini_bin() -> Path:
    return require_cli("gemini")
