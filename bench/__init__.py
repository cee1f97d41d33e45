"""Agent Bridge benchmarks: our MCP server vs the closest installable peer (dlb-mcp).

Run everything with ``uv run --group bench python -m bench``; see bench/README.md.
"""
