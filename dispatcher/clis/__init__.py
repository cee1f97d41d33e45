"""One package per agent CLI (AgentCli in base.py), found by registry.py; nothing outside names a CLI.
Each holds discovery, login, registration, permission and launch plans, result reader, wake path.
It imports only the core: wake, dispatch and ops ask the registry (see pyproject's layers)."""
