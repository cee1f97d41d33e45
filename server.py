"""Per-agent MCP stdio server: ``AGENT_ID=claude uv run python server.py``."""

import sys

from dispatcher.mcp.serve import run_server

if __name__ == "__main__":
    sys.exit(run_server())
