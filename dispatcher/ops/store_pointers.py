"""Which store each of our registrations, hooks, status line and unit settings points at.

``register`` writes ``AGENT_BRIDGE_DB`` into every CLI's MCP server entry, hook command and
the status line, and a user writes it into the systemd unit's environment files. A session
of a CLI whose entry names another store talks to that store while the listener works on this
one: doctor names every such entry (``check_store_pointers``)."""

import json
import re
import shlex
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from dispatcher.clis import registry
from dispatcher.clis.config_files import SERVER_NAME, is_our_hook, is_our_statusline
from dispatcher.core.locations import StoreLocation, default_db, store_location, store_path


@dataclass(frozen=True)
class Pointer:
    """One entry of ours: where it is (file and what), and the store it names as written."""

    path: Path
    what: str
    store: str | None  # None: the entry names none, so its process uses the default store


def registration_files() -> list[Path]:
    """Every file ``register`` writes."""
    return [path for cli in registry.CLIS for path in cli.registration_files()]


def _command_store(command: str) -> str | None:
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    return next((w.split("=", 1)[1] for w in words if w.startswith("AGENT_BRIDGE_DB=")), None)


def _our_command(command: object) -> bool:
    return isinstance(command, str) and (
        is_our_statusline(command) or any(is_our_hook(command, cli.name) for cli in registry.CLIS)
    )


_HOOK_EVENT = re.compile(r"\shook\s+\S+\s+(\S+)")


def _walk(path: Path, value: object, where: str) -> Iterator[Pointer]:
    if isinstance(value, dict):
        for key, item in value.items():
            if key == SERVER_NAME and where.endswith(("mcpServers", "mcp_servers")) and isinstance(item, dict):
                env = item.get("env")
                named = env.get("AGENT_BRIDGE_DB") if isinstance(env, dict) else None
                yield Pointer(path, "MCP server entry", named if isinstance(named, str) else None)
            else:
                yield from _walk(path, item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, list):
        for item in value:
            yield from _walk(path, item, where)
    elif _our_command(value):
        event = _HOOK_EVENT.search(str(value))
        what = "status line" if is_our_statusline(value) else f"hook {event.group(1) if event else ''}".strip()
        yield Pointer(path, what, _command_store(str(value)))


def file_pointers(path: Path) -> list[Pointer]:
    """Our entries in one CLI file (none when it is missing or unreadable: other checks say so)."""
    try:
        text = path.read_text(encoding="utf-8")
        document = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (OSError, UnicodeDecodeError, ValueError):
        return []
    return list(_walk(path, document, ""))


def unit_pointers(agents: list[str]) -> list[Pointer]:
    """``AGENT_BRIDGE_DB=`` in the systemd unit's environment files (the per-agent file wins)."""
    from dispatcher.dispatch.systemd_unit import env_file_paths

    found = []
    for path in dict.fromkeys(p for agent in agents for p in env_file_paths(agent)):
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        for line in lines:
            name, _, value = line.strip().partition("=")
            if name.strip() == "AGENT_BRIDGE_DB":
                found.append(Pointer(path, "unit environment", value.strip().strip("'\"")))
    return found


def points_at(pointer: Pointer, store: StoreLocation) -> bool:
    """Whether the entry's process opens ``store`` (a path is compared with its links resolved)."""
    if pointer.store is None:
        return store == store_path(default_db())
    try:
        return store_location(pointer.store) == store
    except ValueError:  # a relative path: resolved against whichever folder the CLI runs in
        return False
