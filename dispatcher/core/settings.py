"""Process settings from the environment (pydantic-settings), documented in the README.

Only locations and limits live here; which agents exist and what they automate is
config.json's job (see ``config``). An unusable value raises ``InvalidSetting`` (code
``invalid_setting``) naming the variable, never a pydantic traceback.
"""

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError

from dispatcher.core.locations import (
    PROJECT_DIR,
    InvalidSetting,
    StoreLocation,
    absolute_path,
    default_db,
    default_workspace,
    private_dir,
    resolve_config,
    store_location,
)
from dispatcher.core.processes import HOST_ID_RULE, is_host_id

__all__ = ["PROJECT_DIR", "BridgeSettings", "InvalidSetting"]

ENV_PREFIX = "AGENT_BRIDGE_"


class BridgeSettings(BaseSettings):
    # An empty variable counts as unset, as in ``Locations.from_env``.
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", env_ignore_empty=True)

    db: StoreLocation = Field(default_factory=default_db, validate_default=True)
    config: Path | None = None
    max_body_bytes: int = Field(default=262144, ge=1, le=16 * 1024 * 1024)
    # Where workers run when the agent's config.json entry names no ``workspace``.
    # Default: the checkout's parent (installed: the home directory).
    workspace: Path = Field(default_factory=default_workspace)
    # Private directory for locks, progress documents, request files and logs.
    runtime_dir: Path | None = None
    # What reaches stderr; the private log files always take INFO (dispatcher) or WARNING (server).
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "WARNING"
    # "worker": a server started for a headless worker offers only the tools a worker needs.
    role: Literal["session", "worker"] = "session"
    # A worker's server: the attempt it serves (the message id and the attempt's token, which the
    # supervisor passes); it acts only on that attempt (``bridge.worker_scope``). Ignored for sessions.
    message_id: int | None = Field(default=None, ge=1)
    worker_token: str | None = None
    # Opt-in Claude channel ping (experimental ``claude/channel``): see ``wake_mcp``.
    claude_channel: bool = False
    # How long the waiting Claude Stop hook (`hook claude Stop --wait`) watches for new mail;
    # `register claude --hooks` writes it, with Claude's hook timeout 30 s longer.
    hook_wait_seconds: int = Field(default=3600, ge=1, le=86400)
    # This host's id on a store several hosts share (``processes.this_host``, which reads it; it
    # is here so that every command and server refuses a bad one at start).
    host_id: str | None = None
    # The MCP server's identity; read here so that AGENT_ID is documented with the rest.
    agent_id: str | None = Field(default=None, validation_alias="AGENT_ID")

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise _invalid_setting(exc) from None
        except SettingsError as exc:
            raise InvalidSetting(ENV_PREFIX + "*", "?", f"cannot be read ({exc})") from None

    @field_validator("config", "workspace", "runtime_dir", mode="before")
    @classmethod
    def _absolute(cls, value: object) -> object:
        return absolute_path(value) if isinstance(value, (str, Path)) else value

    @field_validator("db", mode="plain")
    @classmethod
    def _store(cls, value: object) -> StoreLocation:
        if isinstance(value, (str, Path)):
            return store_location(value)
        raise ValueError("it must be an absolute path to the SQLite file or a postgresql:// URL")

    @field_validator("host_id")
    @classmethod
    def _host_id(cls, value: str | None) -> str | None:
        if value is not None and not is_host_id(value):
            raise ValueError(HOST_ID_RULE)
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    def private_dir(self) -> Path:
        return private_dir(self.db, self.runtime_dir)

    def config_path(self) -> Path:
        return resolve_config(self.config)


def _variable(field: object) -> str:
    info = BridgeSettings.model_fields.get(str(field))
    if info is not None and isinstance(info.validation_alias, str):
        return info.validation_alias
    return str(field) if info is None else ENV_PREFIX + str(field).upper()


def _invalid_setting(exc: ValidationError) -> InvalidSetting:
    """One ``InvalidSetting`` naming each bad variable, its value and what is allowed."""
    problems = []
    for error in exc.errors():
        variable = _variable(error["loc"][0]) if error["loc"] else ENV_PREFIX + "*"
        reason = error["msg"].removeprefix("Value error, ")
        problems.append((variable, error.get("input", "?"), f"{reason[:1].lower()}{reason[1:]}"))
    (variable, value, reason), *others = problems
    more = "".join(f"; {var}={val!r:.80} is invalid: {why}" for var, val, why in others)
    return InvalidSetting(variable, value, reason, more)
