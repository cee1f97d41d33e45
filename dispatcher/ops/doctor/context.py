"""What doctor's checks share: the locations, the config and the store (opened read-only once,
by whichever check asks first), the findings reported so far, and facts read once per run."""

import stat
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from dispatcher.core.findings import Finding
from dispatcher.core.locations import Locations
from dispatcher.ops import init
from dispatcher.store import Connection

if TYPE_CHECKING:  # imported where used: pydantic is slow to import
    from dispatcher.core.config import BridgeConfig

# Each CLI and the version the launchers were proven with, end to end (see README, "Real launchers"):
# init's table, and init's reader of its version (one rule for both commands).
CLIS = {cli.agent: cli for cli in init.CLIS}

T = TypeVar("T")


@dataclass(frozen=True)
class _Failed:
    exc: Exception


@dataclass
class Context:
    """What the checks share: the locations, the config (None when invalid), the store (None when
    unusable), what the checks before reported (``found``), and facts several checks ask about."""

    locations: Locations
    config: "BridgeConfig | None" = None
    conn: Connection | None = None
    schema_current: bool = False
    found: list[Finding] = field(default_factory=list)
    facts: dict[Hashable, Any] = field(default_factory=dict)

    def fact(self, key: Hashable, compute: Callable[[], T]) -> T:
        """``compute()``, once per run: a CLI's version, a listener's status, systemctl's answers
        (an exception too: each check that asks again gets the same one)."""
        if key not in self.facts:
            try:
                self.facts[key] = compute()
            except Exception as exc:  # noqa: BLE001 - kept for the next check that asks, then raised
                self.facts[key] = _Failed(exc)
        value = self.facts[key]
        if isinstance(value, _Failed):
            raise value.exc
        return value

    def reported(self, *codes: str) -> bool:
        """Whether a check before this one reported any of ``codes``."""
        return any(f.code in codes for f in self.found)

    def valid_config(self) -> "BridgeConfig":
        """For the checks the runner runs only once config.json was read valid."""
        if self.config is None:
            raise RuntimeError("this check needs the valid config.json that the config checks read first")
        return self.config

    def store(self) -> Connection:
        """For the checks the runner runs only once the store was opened."""
        if self.conn is None:
            raise RuntimeError("this check needs the store that the store checks open first")
        return self.conn


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def one_line(text: object) -> str:
    return " ".join(str(text).split())


def cli_of(config: "BridgeConfig", agent: str) -> str | None:
    """Which CLI the agent runs: the one its ``cli`` names, else its launcher's file name's
    (older configs: ``claude_headless.sh`` -> ``claude``); None: not one doctor knows."""
    from dispatcher.clis import registry

    entry = config.agents[agent]
    cli = registry.agent_cli(entry.cli, entry.launcher)
    return cli if cli in CLIS else None


def agent_clis(ctx: Context) -> list[tuple[str, str | None]]:
    """Each declared agent, sorted, with the CLI it runs (None: not one doctor knows)."""
    config = ctx.valid_config()
    return [(agent, cli_of(config, agent)) for agent in sorted(config.agents)]


def listener_state(ctx: Context, agent: str, *, check_config: bool = True) -> dict:
    """The agent's listener as ``listener status`` reads it (no late results, no totals), once per run."""
    from dispatcher.dispatch.control import listener_status

    return ctx.fact(
        ("listener", agent, check_config),
        lambda: listener_status(ctx.locations, agent, check_config=check_config, late_results=False, totals=False),
    )
