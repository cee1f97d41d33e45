"""The MCP adapter: the stdio server, its tools and resources, the stdin guard and start-up.
The only place that imports the MCP SDK.
It imports the bridge domain, the dispatch and wake adapters, the store and the core."""
