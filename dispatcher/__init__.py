"""Agent Bridge: a local MCP/SQLite message bridge and headless dispatcher for AI coding agents.

Layers, bottom up; each imports only from the layers below it (import-linter checks this in
the suite, tests/test_layers.py):

- ``core``: errors, clocks, process identity, settings, paths, config, private files, logs;
- ``store``: the SQLite file, its migrations and every SQL statement (query modules per aggregate);
- ``bridge``: the domain (messages, claims, conversations, broadcast, presence, inbox);
- ``mcp``, ``wake``, ``dispatch``: the adapters (the MCP server; the hooks and the Monitor line;
  the listener, supervisor and their status);
- ``ops``: the operator commands (``agent-bridge``, doctor, register, init, prune, top, show, demo).
"""

__version__ = "0.1.0"
