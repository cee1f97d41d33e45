"""Process settings from the environment (pydantic-settings), documented in the README.

Only locations and limits live here; which agents exist and what they automate is
config.json's job (see ``config``).
"""

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from .locations import PROJECT_DIR, default_db, private_dir, resolve_config

__all__ = ["PROJECT_DIR", "BridgeSettings"]


class BridgeSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AGENT_BRIDGE_", extra="ignore")

    db: Path = Field(default_factory=default_db)
    config: Path | None = None
    max_body_bytes: int = Field(default=262144, ge=1, le=16 * 1024 * 1024)
    # Where workers run: the project the agents work on. Default: the checkout's parent.
    workspace: Path = Field(default_factory=lambda: PROJECT_DIR.parent)
    # Private directory for locks, progress documents, request files and logs.
    runtime_dir: Path | None = None
    # What reaches stderr; the private log files always take INFO (dispatcher) or WARNING (server).
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "WARNING"
    # "worker": a server started for a headless worker offers only the tools a worker needs.
    role: Literal["session", "worker"] = "session"
    # The MCP server's identity; read here so that AGENT_ID is documented with the rest.
    agent_id: str | None = Field(default=None, validation_alias="AGENT_ID")

    def private_dir(self) -> Path:
        return private_dir(self.db, self.runtime_dir)

    def config_path(self) -> Path:
        return resolve_config(self.config)
