"""The floor: a bare ``MCPServer`` with one no-op tool, over the SDK's own stdio transport.

``python bench/noop_server.py``. No store, no config, no validation beyond the SDK's: what
any MCP stdio tool call costs with this SDK and client on this machine.
"""

from mcp.server.mcpserver import MCPServer

mcp = MCPServer(name="noop")


@mcp.tool()
def noop() -> dict:
    """Do nothing and return an empty object."""
    return {}


if __name__ == "__main__":
    mcp.run()
