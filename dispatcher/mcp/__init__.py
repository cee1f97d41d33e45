"""The MCP adapter: the stdio server, its tool table (mcp_server.TOOLS) and tools (tools.py), the inbox
resource, the stdin guard and start-up; the only place that imports the MCP SDK.
It imports the bridge domain, the dispatch and wake adapters, the store and the core."""
