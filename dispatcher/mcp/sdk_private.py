"""Every private name of the MCP SDK this project uses, in one place.

The SDK has no public way to do these few things: claim fd 0 and fd 1 as its own stdio transport
does (so a tool's stray output cannot corrupt the stream), reach the low-level server to run it on
our own streams and add handlers, read a registered tool's schema, and share its resource
subscriptions. ``mcp`` is pinned to its minor version in pyproject.toml; when an upgrade moves one
of these, importing this module fails with a message naming the name and this file, and
tests/mcp/test_sdk_private.py says which one.
"""

from __future__ import annotations

from typing import Any

from mcp.server import stdio as _sdk_stdio
from mcp.server.mcpserver import MCPServer


class SdkMoved(ImportError):
    """The installed MCP SDK lacks a private name this project relies on."""


def _private(owner: object, name: str, where: str) -> Any:
    """``owner``'s private ``name``, or SdkMoved naming it (``where``: the module or class)."""
    try:
        return getattr(owner, name)
    except AttributeError:
        raise SdkMoved(
            f"the installed mcp SDK has no {where}.{name}, which dispatcher/mcp/sdk_private.py relies on: "
            "use the mcp version pinned in pyproject.toml, or port that module"
        ) from None


# The stdio transport's own fd claim, and the diversions it opens for fd 0 and fd 1.
claim_fd = _private(_sdk_stdio, "_claim_fd", "mcp.server.stdio")
open_stdin_diversion = _private(_sdk_stdio, "_open_stdin_diversion", "mcp.server.stdio")
open_stdout_diversion = _private(_sdk_stdio, "_open_stdout_diversion", "mcp.server.stdio")

# The MCPServer attributes read through the functions below.
SERVER_ATTRIBUTES = ("_lowlevel_server", "_tool_manager", "_subscriptions")


def lowlevel_server(server: MCPServer) -> Any:
    """The low-level server: run on our own streams, and given the handlers MCPServer lacks."""
    return _private(server, "_lowlevel_server", "MCPServer")


def registered_tool(server: MCPServer, name: str) -> Any:
    """The tool registered under ``name`` (its ``parameters`` are the published input schema)."""
    return _private(server, "_tool_manager", "MCPServer").get_tool(name)


def resource_subscriptions(server: MCPServer) -> Any:
    """The server's resource subscriptions, which the inbox wake notifies."""
    return _private(server, "_subscriptions", "MCPServer")
