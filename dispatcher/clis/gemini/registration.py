"""Gemini CLI's registration: the MCP server and the hooks, both in ~/.gemini/settings.json."""

import os
from pathlib import Path

from dispatcher.clis import gemini
from dispatcher.clis.config_files import (
    HOOK_TIMEOUT_SECONDS,
    SERVER_NAME,
    Registration,
    apply_edit,
    home,
    hook_command,
    json_entry_transform,
    json_hooks_removal,
    json_hooks_transform,
    json_server_removal,
    removal_line,
)

HOOK_EVENTS = gemini.CLI.hook_events


def settings_file() -> Path:
    base = os.environ.get("GEMINI_CLI_HOME")
    return (Path(base) if base else home()) / ".gemini" / "settings.json"


def files() -> list[Path]:
    return [settings_file()]


def register(reg: Registration, dry_run: bool, force: bool) -> list[str]:
    path = settings_file()
    wanted = {**reg.stdio(), "trust": True}
    transform = json_entry_transform(
        "gemini", path, ["mcpServers", SERVER_NAME], wanted, ("command", "args", "env", "trust"), force
    )
    return [
        apply_edit(path, transform, dry_run).line("gemini", f"MCP server {SERVER_NAME} (agent {reg.agent})", dry_run)
    ]


def register_hooks(agent: str, dry_run: bool, force: bool) -> list[str]:
    path = settings_file()
    wanted = {
        event: {
            "type": "command",
            "command": hook_command("gemini", event, agent),
            "timeout": HOOK_TIMEOUT_SECONDS * 1000,  # Gemini: milliseconds
        }
        for event in HOOK_EVENTS
    }
    transform = json_hooks_transform("gemini", path, force, wanted)
    what = f"hooks {', '.join(HOOK_EVENTS)} (agent {agent})"
    return [apply_edit(path, transform, dry_run).line("gemini", what, dry_run)]


def unregister(agent: str | None) -> list[str]:
    path = settings_file()
    return [
        removal_line("gemini", path, json_server_removal("gemini", path, agent), f"MCP server {SERVER_NAME}"),
        removal_line("gemini", path, json_hooks_removal("gemini", path, agent), "hooks"),
    ]
