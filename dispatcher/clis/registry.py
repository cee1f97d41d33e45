"""The agent CLIs the bridge drives, found by looking: every package under ``dispatcher/clis/``
that exports ``CLI`` is one, listed by its package name in alphabetical order (``init`` declares
them in that order). Adding a CLI adds its package; nothing here changes. An agent names its CLI
in config.json (``"cli": "codex"``); older configs name the CLI's launcher instead
(``launchers/codex_headless.sh``), and ``agent_cli`` reads either."""

import importlib
import pkgutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dispatcher.clis.base import AgentCli, Channel

PACKAGE = "dispatcher.clis"
# The bridge's own launchers/<name>_headless.sh that run no CLI of this name: a CLI package so named
# would make their file names say it (``agent_cli`` reads an older config's launcher by its name).
RESERVED = ("agent", "command", "declared", "scripted")


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
        if info.name in RESERVED:
            raise ValueError(
                f"{package}.{info.name}: {info.name!r} names a launcher of the bridge's own; rename the package"
            )
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


def unknown(name: str) -> str:
    """What is wrong with a ``cli`` that names no CLI the registry lists, and the fix."""
    return (
        f"{name!r} is not a CLI the bridge has (registered: {', '.join(NAMES)}): name one of them, "
        "or declare your own as an object (docs/agent-clis.md)"
    )


def agent_cli(cli: object, launcher: object) -> str | None:
    """The registered CLI an agent's entry runs: the one its ``cli`` names, else (an older config)
    the one its launcher's file name says (``codex_headless.sh`` -> codex); None: none the registry
    lists (a CLI the agent declares, a command or scripted launcher, an unknown name)."""
    if isinstance(cli, str):
        return cli if cli in BY_NAME else None
    if not isinstance(launcher, str):
        return None
    name = Path(launcher).name.split("_", 1)[0].split(".", 1)[0]
    return name if name in BY_NAME else None


def config_problem(agents: Mapping[str, Any]) -> str | None:
    """Why a config.json the core found valid (``BridgeConfig.agents``) still cannot run, with the
    fix: an agent's ``cli`` names no registered CLI, or its ``launcher`` runs another CLI than its
    ``cli`` names. None: each runs what it names. (The core checks the shape; only here are the
    registered names known: the listener and doctor ask this after ``load_config``.)"""
    for agent in sorted(agents):
        cli, launcher = agents[agent].cli, agents[agent].launcher
        if not isinstance(cli, str):
            continue
        if cli not in BY_NAME:
            return f"agents.{agent}.cli: {unknown(cli)}"
        if (runs := agent_cli(None, launcher)) is not None and runs != cli:
            return (
                f"agents.{agent}: its launcher {Path(launcher).name} runs {runs}, not the {cli} its cli names: "
                'drop "launcher" (the CLI that cli names then runs)'
            )
    return None
