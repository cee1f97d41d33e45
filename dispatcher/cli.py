"""The ``agent-bridge`` command. Keeps the MCP SDK out of every path except ``serve``."""

import sys

import click


@click.group()
def main() -> None:
    """Agent Bridge: local message bridge and headless dispatcher for AI coding agents."""


@main.command()
def serve() -> None:
    """Run the MCP stdio server for AGENT_ID (what server.py does)."""
    from .serve import run_server

    sys.exit(run_server())
