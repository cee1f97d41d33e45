"""What doctor's checks share: the locations, the config and the store, opened read-only by the first checks."""

import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dispatcher.core.locations import Locations
from dispatcher.ops import init
from dispatcher.store import Connection

if TYPE_CHECKING:  # imported where used: pydantic is slow to import
    from dispatcher.core.config import BridgeConfig

# Each CLI and the version the launchers were proven with, end to end (see README, "Real launchers"):
# init's table, and init's reader of its version (one rule for both commands).
CLIS = {cli.agent: cli for cli in init.CLIS}


@dataclass
class Context:
    """What the checks share: the locations, the config (None when invalid) and the store (None when unusable)."""

    locations: Locations
    config: "BridgeConfig | None" = None
    conn: Connection | None = None
    schema_current: bool = False

    def valid_config(self) -> "BridgeConfig":
        """For the checks ``run_checks`` runs only once ``check_config`` read a valid config."""
        if self.config is None:
            raise RuntimeError("this check needs the valid config.json that check_config reads first")
        return self.config

    def store(self) -> Connection:
        """For the checks ``run_checks`` runs only once ``check_store`` opened the store."""
        if self.conn is None:
            raise RuntimeError("this check needs the store that check_store opens first")
        return self.conn


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def one_line(text: object) -> str:
    return " ".join(str(text).split())


def cli_of(launcher: Path) -> str | None:
    """Which CLI a launcher runs, from its file name (``claude_headless.sh`` -> ``claude``)."""
    name = launcher.name.split("_", 1)[0].split(".", 1)[0]
    return name if name in CLIS else None


def agent_clis(ctx: Context) -> list[tuple[str, str | None]]:
    """Each declared agent, sorted, with the CLI its launcher runs (None: not one doctor knows)."""
    from dispatcher.core.locations import PROJECT_DIR

    config = ctx.valid_config()
    return [(agent, cli_of(config.launcher_path(agent, PROJECT_DIR))) for agent in sorted(config.agents)]
