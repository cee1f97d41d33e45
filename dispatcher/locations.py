"""Where the bridge's files live, resolved from the environment without pydantic.

``BridgeSettings`` (pydantic-settings) is the documented settings object; it uses these
functions for its defaults. The status line reads the same three variables through
``Locations.from_env`` because it must answer well within 200 ms, and importing
pydantic-settings alone costs a good part of that.
"""

import os
from dataclasses import dataclass
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parent.parent


def _xdg(var: str, fallback: str) -> Path:
    return Path(os.environ.get(var) or Path.home() / fallback)


def default_db() -> Path:
    return _xdg("XDG_STATE_HOME", ".local/state") / "agent-bridge" / "bridge.db"


def resolve_config(explicit: Path | None) -> Path:
    """Explicit AGENT_BRIDGE_CONFIG, then the user's config, then the project's own."""
    if explicit is not None:
        return explicit
    user = _xdg("XDG_CONFIG_HOME", ".config") / "agent-bridge" / "config.json"
    return user if user.exists() else PROJECT_DIR / "config.json"


def private_dir(db: Path, explicit: Path | None) -> Path:
    return explicit or db.parent / "runtime"


@dataclass(frozen=True)
class Locations:
    db: Path
    config: Path | None = None
    runtime_dir: Path | None = None

    @classmethod
    def from_env(cls) -> "Locations":
        env = os.environ.get
        return cls(
            db=Path(env("AGENT_BRIDGE_DB") or default_db()),
            config=Path(p) if (p := env("AGENT_BRIDGE_CONFIG")) else None,
            runtime_dir=Path(p) if (p := env("AGENT_BRIDGE_RUNTIME_DIR")) else None,
        )

    def private_dir(self) -> Path:
        return private_dir(self.db, self.runtime_dir)

    def config_path(self) -> Path:
        return resolve_config(self.config)
