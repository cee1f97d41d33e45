"""The headless dispatcher: listener, supervisor, reconciliation, progress, status and the who view.
It imports the bridge domain, the store and the core (and the wake and MCP layers never).

Nothing here imports the MCP SDK: these paths must start fast (the status line runs on
a timer inside Claude Code).
"""
