"""Where one agent's dispatcher files live, all inside the private (0700) runtime directory."""

from dataclasses import dataclass
from pathlib import Path

from dispatcher.core.locations import LocationsLike
from dispatcher.core.private_files import ensure_private_dir


@dataclass(frozen=True)
class AgentPaths:
    root: Path
    agent: str

    @classmethod
    def of(cls, settings: LocationsLike, agent: str) -> "AgentPaths":
        """``settings``: a BridgeSettings or Locations."""
        return cls(settings.private_dir(), agent)

    @property
    def lock(self) -> Path:
        return self.root / f"{self.agent}.lock"

    @property
    def disabled_marker(self) -> Path:
        return self.root / f"{self.agent}.disabled"

    @property
    def progress(self) -> Path:
        return self.root / f"{self.agent}.progress.json"

    @property
    def log(self) -> Path:
        return self.root / "dispatcher.log"

    def attempt_dir(self, message_id: int) -> Path:
        return self.root / "attempts" / str(message_id)

    def ensure(self) -> "AgentPaths":
        ensure_private_dir(self.root, "runtime directory")
        ensure_private_dir(self.root / "attempts", "attempts directory")
        return self
