"""The headless dispatcher: listener, supervisor, reconciliation, progress and status.

Nothing here imports the MCP SDK: these paths must start fast (the status line runs on
a timer inside Claude Code).
"""
