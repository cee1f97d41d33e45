"""The headless dispatcher: listener, supervisor, reconciliation, progress, status and the who view.
It imports the bridge domain, the store and the core; never the wake or MCP layers, nor the MCP SDK
(its paths must start fast: the status line runs on a timer inside Claude Code)."""
