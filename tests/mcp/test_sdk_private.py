"""The MCP SDK's private names live in dispatcher/mcp/sdk_private.py alone, and each still exists in
the installed SDK: an upgrade that moves one fails here, naming it, not deep inside a server."""

import re

from harness import PROJECT
from mcp.server.mcpserver import MCPServer

from dispatcher.mcp import sdk_private

PRIVATE = re.compile(r"\b_(?:claim_fd|open_std(?:in|out)_diversion|lowlevel_server|tool_manager|subscriptions)\b")


def test_each_private_name_is_in_the_installed_sdk():
    server = MCPServer(name="probe")
    missing = [name for name in sdk_private.SERVER_ATTRIBUTES if not hasattr(server, name)]
    assert not missing, f"the installed mcp SDK's MCPServer lacks {missing}: port dispatcher/mcp/sdk_private.py"
    assert callable(sdk_private.claim_fd) and callable(sdk_private.open_stdin_diversion)
    assert sdk_private.lowlevel_server(server) is not None
    assert sdk_private.resource_subscriptions(server) is not None


def test_a_moved_name_fails_with_a_message_naming_it_and_the_module():
    class Moved:
        pass

    try:
        sdk_private._private(Moved(), "_claim_fd", "mcp.server.stdio")
    except sdk_private.SdkMoved as exc:
        assert "mcp.server.stdio._claim_fd" in str(exc) and "sdk_private.py" in str(exc)
    else:
        raise AssertionError("a missing private name was not reported")


def test_no_other_module_uses_a_private_sdk_name():
    users = [
        f"{path.relative_to(PROJECT)}:{number}"
        for path in sorted((PROJECT / "dispatcher").rglob("*.py"))
        if path.name != "sdk_private.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if PRIVATE.search(line) and "self._subscriptions" not in line
    ]
    assert not users, f"private MCP SDK names outside dispatcher/mcp/sdk_private.py: {users}"
