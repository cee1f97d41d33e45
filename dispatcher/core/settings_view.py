"""The settings as a process that must stay light keeps them: a frozen view, without pydantic.

``BridgeSettings`` (``settings``, pydantic-settings) is the one definition of valid settings; the
listener has them validated by a ``BridgeSettings`` in a forked child (``dispatch.checked``) and
keeps this view of what it and the supervisors it forks read.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from dispatcher.core.locations import StoreLocation, StoreUrl, is_postgres_url, private_dir, resolve_config

if TYPE_CHECKING:  # (only a type: this module stays without pydantic)
    from dispatcher.core.settings import BridgeSettings


class ListenerSettings(Protocol):
    """What the listener and its supervisors read of the settings: a ``BridgeSettings`` or a
    ``SettingsView``."""

    @property
    def db(self) -> StoreLocation: ...
    @property
    def max_body_bytes(self) -> int: ...
    @property
    def workspace(self) -> Path: ...
    @property
    def log_level(self) -> str: ...

    def private_dir(self) -> Path: ...

    def config_path(self) -> Path: ...


def _path(value: str | None) -> Path | None:
    return None if value is None else Path(value)


@dataclass(frozen=True)
class SettingsView:
    db: StoreLocation
    config: Path | None
    runtime_dir: Path | None
    max_body_bytes: int
    workspace: Path
    log_level: str

    @staticmethod
    def document(settings: "BridgeSettings") -> dict[str, Any]:
        """The validated settings as JSON data (what ``of`` reads back)."""
        return {
            "db": str(settings.db),
            "config": None if settings.config is None else str(settings.config),
            "runtime_dir": None if settings.runtime_dir is None else str(settings.runtime_dir),
            "max_body_bytes": settings.max_body_bytes,
            "workspace": str(settings.workspace),
            "log_level": settings.log_level,
        }

    @classmethod
    def of(cls, document: dict[str, Any]) -> "SettingsView":
        db = document["db"]
        return cls(
            db=StoreUrl(db) if is_postgres_url(db) else Path(db),
            config=_path(document["config"]),
            runtime_dir=_path(document["runtime_dir"]),
            max_body_bytes=document["max_body_bytes"],
            workspace=Path(document["workspace"]),
            log_level=document["log_level"],
        )

    def private_dir(self) -> Path:
        return private_dir(self.db, self.runtime_dir)

    def config_path(self) -> Path:
        return resolve_config(self.config)
