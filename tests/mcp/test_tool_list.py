"""What ``tools/list`` offers, for a session's and a worker's server, against a snapshot.

tests/fixtures/tools_list.json holds every tool's name, description, input and output schema
as the MCP client receives them over stdio. A deliberate change to a tool rewrites it:
``AGENT_BRIDGE_WRITE_SNAPSHOT=1 uv run pytest tests/mcp/test_tool_list.py``, then review the diff.
"""

import json
import os
from pathlib import Path

import pytest
from harness import McpAgent

from dispatcher.core.permissions import NON_WORKER_BRIDGE_TOOLS, WORKER_BRIDGE_TOOLS
from dispatcher.mcp.mcp_server import TOOLS

SNAPSHOT = Path(__file__).parents[1] / "fixtures" / "tools_list.json"


def _listed(env, bridge_root, role: str) -> list[dict]:
    server = McpAgent("claude", {**env, "AGENT_BRIDGE_ROLE": role}, bridge_root / f"{role}.stderr")
    try:
        return [tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in server.list_tools()]
    finally:
        server.close()


def test_tools_list_matches_the_snapshot_for_both_roles(env, bridge_root):
    listed = {role: _listed(env, bridge_root, role) for role in ("session", "worker")}
    if os.environ.get("AGENT_BRIDGE_WRITE_SNAPSHOT") == "1":
        SNAPSHOT.write_text(json.dumps(listed, indent=2, sort_keys=True) + "\n")
        pytest.skip(f"rewrote {SNAPSHOT}; review its diff")
    assert listed == json.loads(SNAPSHOT.read_text())


def test_every_tool_a_workers_server_has_is_offered_to_its_model_or_denied_by_name():
    """The server's role column (mcp_server.TOOLS) and what the launchers offer a worker's model
    (core.permissions) agree: a new worker tool must be put on one of the two lists."""
    served = {spec.method.__name__ for spec in TOOLS if "worker" in spec.roles}
    assert set(WORKER_BRIDGE_TOOLS) <= served
    assert served - set(WORKER_BRIDGE_TOOLS) <= set(NON_WORKER_BRIDGE_TOOLS)
    assert set(NON_WORKER_BRIDGE_TOOLS) <= {spec.method.__name__ for spec in TOOLS}
