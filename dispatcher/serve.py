"""Start the per-agent MCP stdio server (``server.py`` and ``agent-bridge serve``)."""

import logging
import sqlite3
import sys

from .config import ConfigError, load_config
from .errors import BridgeError
from .logs import configure_logging
from .settings import BridgeSettings


def run_server() -> int:
    settings = BridgeSettings()
    config_path = settings.config_path()
    try:
        config = load_config(config_path)
    except ConfigError as exc:
        print(f"agent-bridge: {exc}", file=sys.stderr)
        return 2
    declared = ", ".join(sorted(config.agents))
    if not settings.agent_id:
        print(f"agent-bridge: set AGENT_ID to one of the declared agents: {declared} ({config_path}).", file=sys.stderr)
        return 2
    if settings.agent_id not in config.agents:
        print(
            f"agent-bridge: AGENT_ID={settings.agent_id!r} is not a declared agent; declared agents: "
            f"{declared} ({config_path}).",
            file=sys.stderr,
        )
        return 2
    configure_logging(
        stderr_level=logging.getLevelName(settings.log_level),
        log_file=settings.private_dir() / "errors.log",
        file_level=logging.WARNING,
    )

    from .store import Store

    store = Store(settings.db)
    try:
        store.connection()  # fail before the handshake on an unusable or too-new store
    except BridgeError as exc:
        print(f"agent-bridge: {exc}", file=sys.stderr)
        return 2
    except (OSError, sqlite3.Error) as exc:  # e.g. a read-only file system, a full disk
        print(
            f"agent-bridge: store_unavailable: cannot open the store {settings.db} ({exc}); nothing was "
            "changed. Check its disk and permissions.",
            file=sys.stderr,
        )
        return 2

    from .mcp_server import build_server  # the SDK import is the slow part of start-up
    from .mcp_stdio import run_stdio

    run_stdio(build_server(settings.agent_id, store, config, settings))
    return 0
