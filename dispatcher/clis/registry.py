"""The agent CLIs the bridge drives, found by looking: every package under ``dispatcher/clis/``
that exports ``CLI`` is one, listed by its package name in alphabetical order (``init`` declares
them in that order). Adding a CLI adds its package; nothing here changes."""

import importlib
import pkgutil
from pathlib import Path
from typing import Any

from dispatcher.clis.base import AgentCli, Channel

PACKAGE = "dispatcher.clis"


def discover(package: str = PACKAGE) -> tuple[AgentCli, ...]:
    """The ``CLI`` objects of ``package``'s sub-packages, by package name; a sub-package without
    one (a helper package) is no CLI. Raises ValueError when two share a name or a CLI's ``name``
    is not its package's, so that the config's ``cli`` word always finds its package."""
    root = importlib.import_module(package)
    found: list[AgentCli] = []
    for info in sorted(pkgutil.iter_modules(root.__path__), key=lambda info: info.name):
        if not info.ispkg:
            continue
        cli = getattr(importlib.import_module(f"{package}.{info.name}"), "CLI", None)
        if cli is None:
            continue
        if getattr(cli, "name", None) != info.name:
            raise ValueError(
                f"{package}.{info.name}.CLI is named {getattr(cli, 'name', None)!r}: "
                f"name it {info.name!r}, its package's name (the config's `cli` word)"
            )
        found.append(cli)
    return tuple(found)


CLIS: tuple[AgentCli, ...] = discover()
BY_NAME: dict[str, AgentCli] = {cli.name: cli for cli in CLIS}
NAMES: tuple[str, ...] = tuple(BY_NAME)


def channel() -> Channel | None:
    """The MCP channel wake path (``wake_mcp.py``): the one a CLI declares; None when none does.
    Raises ValueError when two CLIs declare one (the server offers one channel)."""
    found = [cli.channel for cli in CLIS if cli.channel is not None]
    if len(found) > 1:
        raise ValueError(f"{len(found)} CLIs declare an MCP channel; the bridge's server offers one")
    return found[0] if found else None


def get(name: str) -> AgentCli | None:
    """The CLI called ``name``, or None."""
    return BY_NAME.get(name)


def diagnostics(attempt_dir: Path, exit_code: int | None) -> dict[str, Any] | None:
    """The diagnostics of the CLI whose output file the launch left, or None (no known CLI ran)."""
    for cli in CLIS:
        output = attempt_dir / cli.output_file
        if output.exists() or output.is_symlink():
            return cli.diagnostics(attempt_dir, exit_code)
    return None
