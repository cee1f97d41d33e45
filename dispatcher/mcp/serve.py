"""Start the per-agent MCP stdio server (``server.py`` and ``agent-bridge serve``).

Anything that stops it before the MCP handshake (a bad setting, an unset or undeclared
AGENT_ID, an invalid config.json, an unusable store) ends it with one line
``agent-bridge: <code>: <what to do>`` on stderr and exit status 2; stdout, the
protocol stream, stays empty.
"""

import logging

from dispatcher.core.errors import BridgeError
from dispatcher.core.exits import EXIT_USAGE, report
from dispatcher.store import BACKEND_ERRORS


def _prepare():
    """Settings, config, identity and an open store, or the first reason there are none."""
    from dispatcher.core.config import load_config, require_agent
    from dispatcher.core.logs import configure_logging
    from dispatcher.core.settings import BridgeSettings

    settings = BridgeSettings()
    config_path = settings.config_path()
    config = load_config(config_path)
    if not settings.agent_id:
        raise BridgeError(
            "unknown_agent",
            f"AGENT_ID is not set; set it to one of the agents declared in {config_path}: "
            f"{', '.join(sorted(config.agents))}.",
        )
    require_agent(config, settings.agent_id, config_path, source="AGENT_ID")
    configure_logging(
        stderr_level=logging.getLevelName(settings.log_level),
        log_file=settings.private_dir() / "errors.log",
        file_level=logging.WARNING,
    )

    from dispatcher.core.locations import shown
    from dispatcher.store import open_handle
    from dispatcher.store.roles import refuse_another_agents_role

    store = open_handle(settings.db)
    conn = store.connection()  # fail before the handshake on an unusable or too-new store
    refuse_another_agents_role(conn, settings.agent_id, shown(settings.db))  # else every write would fail
    return settings, config, store


def run_server() -> int:
    try:
        settings, config, store = _prepare()
    except Exception as exc:  # noqa: BLE001 - before the handshake every failure is one line and an exit status (exits.report)
        report(exc, BACKEND_ERRORS)
        return EXIT_USAGE
    from dispatcher.bridge.presence import ServerPresence, role_of
    from dispatcher.mcp.mcp_server import build_server  # the SDK import is the slow part of start-up
    from dispatcher.mcp.mcp_stdio import run_stdio

    presence = ServerPresence(store, settings.agent_id, role_of(settings.role))
    try:
        run_stdio(build_server(settings.agent_id, store, config, settings, presence=presence))
    except Exception as exc:  # noqa: BLE001 - a failing server ends with one line and an exit status (exits.report)
        return report(exc, BACKEND_ERRORS)
    finally:
        presence.close()  # a clean exit removes the row; a killed server's row is cleaned lazily
    return 0
