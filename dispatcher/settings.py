"""Process settings from the environment (pydantic-settings), documented in the README.

Only locations and limits live here; which agents exist and what they automate is
config.json's job (see ``config``).
"""

import os
from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

PROJECT_DIR = Path(__file__).resolve().parent.parent


def _xdg(var: str, fallback: str) -> Path:
    return Path(os.environ.get(var) or Path.home() / fallback)


def default_state_dir() -> Path:
    return _xdg("XDG_STATE_HOME", ".local/state") / "agent-bridge"


class BridgeSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AGENT_BRIDGE_", extra="ignore")

    db: Path = Field(default_factory=lambda: default_state_dir() / "bridge.db")
    config: Path | None = None
    max_body_bytes: int = Field(default=262144, ge=1, le=16 * 1024 * 1024)
    # Where workers run: the project the agents work on. Default: the checkout's parent.
    workspace: Path = Field(default_factory=lambda: PROJECT_DIR.parent)
    # What reaches stderr; the private log files always take INFO (dispatcher) or WARNING (server).
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "WARNING"
    # Private directory for locks, progress documents, request files and logs.
    runtime_dir: Path | None = None

    # The MCP server's identity; read here so that AGENT_ID is documented with the rest.
    agent_id: str | None = Field(default=None, validation_alias="AGENT_ID")

    def private_dir(self) -> Path:
        return self.runtime_dir or self.db.parent / "runtime"

    def config_path(self) -> Path:
        """Explicit AGENT_BRIDGE_CONFIG, then the user's config, then the project's own."""
        if self.config is not None:
            return self.config
        user = _xdg("XDG_CONFIG_HOME", ".config") / "agent-bridge" / "config.json"
        return user if user.exists() else PROJECT_DIR / "config.json"
