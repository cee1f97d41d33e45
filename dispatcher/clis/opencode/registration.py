"""opencode's registration: the MCP server in its global opencode.json (``mcp.agent_bridge``, a
``local`` server: one ``command`` list and an ``environment``). It has no hook the bridge can
write (its hooks are JavaScript plugins) and no status line."""

import os
from pathlib import Path

from dispatcher.clis.config_files import (
    SERVER_NAME,
    Registration,
    Transform,
    apply_edit,
    check_agent,
    home,
    json_dump,
    json_entry_transform,
    load_json_object,
    removal_line,
)
from dispatcher.core.errors import BridgeError

KEY = "mcp"


def config_file() -> Path:
    """``$XDG_CONFIG_HOME/opencode/opencode.json`` (default ``~/.config``)."""
    base = os.environ.get("XDG_CONFIG_HOME")
    return (Path(base) if base else home() / ".config") / "opencode" / "opencode.json"


def files() -> list[Path]:
    return [config_file()]


def entry(reg: Registration) -> dict:
    return {"type": "local", "command": [reg.command, *reg.args], "environment": dict(reg.env), "enabled": True}


def register(reg: Registration, dry_run: bool, force: bool) -> list[str]:
    path = config_file()
    transform = json_entry_transform(
        "opencode", path, [KEY, SERVER_NAME], entry(reg), ("type", "command", "environment"), force
    )
    return [
        apply_edit(path, transform, dry_run).line("opencode", f"MCP server {SERVER_NAME} (agent {reg.agent})", dry_run)
    ]


def register_hooks(agent: str, dry_run: bool, force: bool) -> list[str]:
    raise BridgeError(
        "usage_error",
        "--hooks: opencode has no hook the bridge can write (its hooks are JavaScript plugins); drop it.",
    )


def register_statusline(dry_run: bool, force: bool) -> list[str]:
    raise BridgeError("usage_error", "--statusline: opencode has no status line; drop it.")


def server_removal(path: Path, agent: str | None) -> Transform:
    """Take ``mcp.agent_bridge`` out (refused when it is another agent's)."""

    def transform(text: str | None) -> str | None:
        data = load_json_object(path, text)
        servers = data.get(KEY)
        if not isinstance(servers, dict) or SERVER_NAME not in servers:
            return None
        ours = servers[SERVER_NAME]
        check_agent("opencode", path, {"env": ours.get("environment")} if isinstance(ours, dict) else ours, agent)
        del servers[SERVER_NAME]
        return json_dump(data)

    return transform


def unregister(agent: str | None) -> list[str]:
    path = config_file()
    return [removal_line("opencode", path, server_removal(path, agent), f"MCP server {SERVER_NAME}")]
