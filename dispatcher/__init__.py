"""Agent Bridge: a local MCP/SQLite message bridge and headless dispatcher for AI coding agents.

Layers, bottom up (each imports only from the ones above it in this list):

- ``errors``, ``clock``, ``validation``: shared vocabulary.
- ``settings``, ``config``: where things live and which agents exist.
- ``store``: the SQLite file, its connection recipe and its migrations (the only DDL).
- ``messages``, ``claims``, ``conversations``: domain functions over a connection.
- ``mcp_server``: the thin MCP layer (the only module importing the MCP SDK).
- ``dispatch``: listener, supervisor, progress and status (never imports the SDK).
- ``cli``: the ``agent-bridge`` command.
"""

__version__ = "0.1.0"
