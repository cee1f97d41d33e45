"""config.json as a process that must stay light keeps it: a frozen view of the validated file.

``BridgeConfig`` (``config``, pydantic) is the one definition of what a valid file is; loading
pydantic was most of the listener's resident memory. The listener keeps only this view, built
from the document a ``BridgeConfig`` validated and dumped in a forked child (``dispatch.checked``),
and hands it to each supervisor it forks, which records its attempt and launches its worker from
the view alone: each agent's permission profile (``ProfileView``), prices and caps.
``ConfigPlaces`` holds the rules on a validated file that both share (where an agent's launcher
and workspace are), ``ProfileRules`` those on a profile; ``DispatchConfig`` is what the dispatch
rule (``dispatch.queue``) reads of either.
"""

import functools
import zoneinfo
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from datetime import tzinfo
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from dispatcher.core import clock, protected
from dispatcher.core.errors import BridgeError, ConfigError
from dispatcher.core.launchers import agent_launcher, cli_word, launcher_path
from dispatcher.core.locations import PROJECT_DIR, LocationsLike
from dispatcher.core.profile_rules import ProfileRules, ProfileView


class AgentRules(Protocol):
    """What the dispatch rule and the listener read of one agent's entry."""

    @property
    def launcher(self) -> str | None: ...
    @property
    def auto(self) -> bool: ...
    @property
    def worker_timeout_seconds(self) -> int: ...
    @property
    def max_cost_usd_per_task(self) -> float | None: ...
    @property
    def max_tokens_per_task(self) -> int | None: ...
    @property
    def interactive_grace_seconds(self) -> int: ...
    @property
    def max_cost_usd_per_day(self) -> float | None: ...
    @property
    def max_tokens_per_day(self) -> int | None: ...
    @property
    def workspace(self) -> str | None: ...
    @property
    def max_workers(self) -> int | None: ...


class DispatchConfig(Protocol):
    """What the dispatch rule reads of config.json: a ``BridgeConfig`` or a ``ConfigView``."""

    @property
    def agents(self) -> Mapping[str, AgentRules]: ...
    @property
    def dispatch_max_age_seconds(self) -> int: ...
    @property
    def budget_time_zone(self) -> str | None: ...


class AttemptConfig(DispatchConfig, Protocol):
    """What the barrier (``dispatch.attempts.begin_attempt``) reads of config.json."""

    def permission_level(self, agent: str) -> str: ...
    def permissions(self, agent: str) -> Any: ...


class ConfigPlaces:
    """Where an agent's launcher and workspace are, on a validated config.json."""

    agents: Mapping[str, Any]
    notify_command: Any

    def notify_command_of(self, agent: str) -> list[str] | None:
        """The command that tells a person of ``agent``'s events (docs/notices.md): the agent's
        own ``notify_command``, else the global one; None: no one is told."""
        own = self.agents[agent].notify_command
        chosen = own if own is not None else self.notify_command
        return list(chosen) if chosen is not None else None

    if TYPE_CHECKING:  # a method of both (not an annotation: pydantic would make it a field)

        def permissions(self, agent: str) -> ProfileRules:
            raise NotImplementedError

    def launcher_path(self, agent: str, project_dir: Path) -> Path:
        """Where ``launchers.launcher_path`` finds the agent's launcher (``agent_launcher``: the
        generic one when the agent names its CLI and no launcher)."""
        entry = self.agents[agent]
        return launcher_path(str(agent_launcher(entry.launcher, entry.cli)), project_dir)

    def workspace(self, agent: str, default: Path) -> Path:
        """The agent's declared workspace, else ``default`` (AGENT_BRIDGE_WORKSPACE or its default)."""
        declared = self.agents[agent].workspace
        return Path(declared).expanduser() if declared is not None else default

    def bridge_places(self, locations: LocationsLike) -> tuple[protected.Place, ...]:
        """What no workspace may hold or lie in: the bridge's places and every agent's launcher."""
        return protected.bridge_places(locations, (self.launcher_path(a, PROJECT_DIR) for a in self.agents))

    def unsafe_workspace(self, agent: str, default: Path | None, locations: LocationsLike) -> str | None:
        """Why the agent's workspace, or one of its writable ``extra_dirs``, may not be given to
        a worker (``protected.workspace_problem``); None when all are fine. ``default`` None:
        only a declared workspace is checked (config validation: the default is the settings')."""
        places = self.bridge_places(locations)
        profile = self.permissions(agent)
        declared = self.agents[agent].workspace
        workspace = () if default is None and declared is None else (self.workspace(agent, default or Path()),)
        for directory in (*workspace, *(profile.resolved_extra_dirs() if profile.writes else ())):
            if (why := protected.workspace_problem(directory, places)) is not None:
                return protected.unsafe_reason(agent, why)
        return None

    def workspace_problem(self, agent: str, default: Path, locations: LocationsLike) -> tuple[str, str] | None:
        """(code, why with the fix) when nothing can be dispatched into the agent's workspace: it is
        not an existing directory (``workspace_missing``) or it is unsafe (``workspace_unsafe``);
        None when it is fine. The listener refuses to dispatch then."""
        workspace = self.workspace(agent, default)
        if not workspace.is_dir():
            return (
                "workspace_missing",
                f"the workspace {workspace} of agent {agent!r} is not an existing directory: nothing is "
                f"dispatched until it is; mkdir -p {workspace}, or set agents.{agent}.workspace in "
                f"{locations.config_path()}",
            )
        if (why := self.unsafe_workspace(agent, default, locations)) is not None:
            return (
                protected.CODE,
                f"{why}: nothing is dispatched; {protected.unsafe_fix(agent, locations.config_path())}",
            )
        return None


@dataclass(frozen=True)
class PricesView:
    """An agent's ``prices`` (``Prices``): US dollars per million tokens of each kind."""

    input: float
    output: float
    cache_read: float
    cache_write: float


@dataclass(frozen=True)
class AgentView:
    """An agent's entry, as the listener and a supervisor read it (``AgentRules``)."""

    launcher: str | None
    auto: bool
    worker_timeout_seconds: int
    max_cost_usd_per_task: float | None
    max_tokens_per_task: int | None
    interactive_grace_seconds: int
    max_cost_usd_per_day: float | None
    max_tokens_per_day: int | None
    workspace: str | None
    prices: PricesView | None
    max_workers: int | None
    isolation: str = "auto"
    notify_command: tuple[str, ...] | None = None
    cli: str | None = None  # ``launchers.cli_word`` of its ``cli``: what the supervisor tells the launcher

    @classmethod
    def of(cls, entry: Mapping[str, Any]) -> "AgentView":
        """``entry``: an agent's, in what ``BridgeConfig.model_dump()`` gave."""
        kept = {k: v for k, v in entry.items() if k in _AGENT_FIELDS}
        kept["cli"] = cli_word(entry.get("cli"))
        if kept.get("notify_command") is not None:
            kept["notify_command"] = tuple(kept["notify_command"])
        return cls(**{**kept, "prices": PricesView(**entry["prices"]) if entry["prices"] is not None else None})


_AGENT_FIELDS = frozenset(f.name for f in fields(AgentView))


@dataclass(frozen=True)
class ConfigView(ConfigPlaces):
    """A validated config.json: what the listener and a supervisor read of it."""

    agents: Mapping[str, AgentView]
    dispatch_max_age_seconds: int
    attempt_retention_days: int
    budget_time_zone: str | None

    kept_worktrees_max_mb: int
    worktree_pool_size: int
    profiles: Mapping[str, ProfileView]  # each agent's, as BridgeConfig.permissions gave it
    max_workers_total: int
    notify_command: tuple[str, ...] | None = None
    notify_timeout_seconds: int = 10
    metrics_textfile_dir: str | None = None  # docs/metrics.md

    def permissions(self, agent: str) -> ProfileView:
        return self.profiles[agent]

    def permission_level(self, agent: str) -> str:
        return self.profiles[agent].level

    @classmethod
    def of(cls, document: Mapping[str, Any], profiles: Mapping[str, Mapping[str, Any]]) -> "ConfigView":
        """``document``: what ``BridgeConfig.model_dump()`` gave for a valid file; ``profiles``:
        each agent's ``BridgeConfig.permissions``, dumped the same way."""
        return cls(
            agents={agent: AgentView.of(entry) for agent, entry in document["agents"].items()},
            dispatch_max_age_seconds=document["dispatch_max_age_seconds"],
            attempt_retention_days=document["attempt_retention_days"],
            budget_time_zone=document["budget_time_zone"],
            max_workers_total=document["max_workers_total"],
            kept_worktrees_max_mb=document["kept_worktrees_max_mb"],
            worktree_pool_size=document["worktree_pool_size"],
            notify_command=tuple(document["notify_command"]) if document.get("notify_command") else None,
            notify_timeout_seconds=document.get("notify_timeout_seconds", 10),
            metrics_textfile_dir=document.get("metrics_textfile_dir"),
            profiles={agent: ProfileView.of(profile) for agent, profile in profiles.items()},
        )


@functools.lru_cache(maxsize=16)
def budget_zone(name: str | None) -> tzinfo | None:
    """The zone whose days the daily budgets count (``budget_time_zone``); None (this host's zone)
    only where no agent has a daily budget. ValueError, with the fix, for a name tzdata lacks."""
    if name is None:
        return None
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f'{name!r} is not a time zone this host knows; use an IANA name such as "UTC" or "Europe/Berlin"'
        ) from None


def budget_day_start(config: DispatchConfig, now: float) -> float:
    """The midnight, in the budget's zone, that began the day the daily budgets count at ``now``."""
    return clock.local_day_start(now, budget_zone(config.budget_time_zone))


def budget_day_end(config: DispatchConfig, now: float) -> float:
    """The next midnight in the budget's zone: when a reached daily budget resets."""
    return clock.next_local_day_start(now, budget_zone(config.budget_time_zone))


def use_worktree(declared: str, writes: bool, in_repo: bool) -> bool | None:
    """Whether an attempt gets a worktree (pure): ``worktree`` always (None: refused, not a
    repository), ``none`` never, ``auto`` when the workspace is in a repository and the level writes."""
    if declared == "none":
        return False
    if declared == "worktree":
        return True if in_repo else None
    return in_repo and writes


def max_workers(agent: AgentRules, isolated: bool) -> int:
    """How many of ``agent``'s tasks may run at once: its ``max_workers``, else 2 when its attempts
    each get a worktree (``isolated``: ``use_worktree`` said yes) and 1 otherwise (workers sharing
    one checkout would write over each other)."""
    if agent.max_workers is not None:
        return agent.max_workers
    return 2 if isolated else 1


class UnknownAgent(BridgeError):
    """An agent id (``--agent`` or ``AGENT_ID``) that config.json does not declare."""

    def __init__(self, agent: str, declared: list[str], path: Path, source: str = "--agent") -> None:
        super().__init__(
            "unknown_agent",
            f"{source} {agent!r} is not declared in {path}; declared agents: {', '.join(sorted(declared))}. "
            "Use one of them, or declare it in that file.",
        )
        self.agent = agent


def require_agent(config: DispatchConfig, agent: str, path: Path, source: str = "--agent") -> None:
    if agent not in config.agents:
        raise UnknownAgent(agent, list(config.agents), path, source)


Config = TypeVar("Config", bound=DispatchConfig)


def declared(path: Path, agent: str, load: Callable[[Path], Config], *, config_required: bool = True) -> Config | None:
    """config.json as ``load`` reads it, refusing an agent a valid file does not declare (``unknown_agent``).

    An invalid file is refused too (``config_invalid``), except where ``config_required`` is False:
    then None (a listener started then reports stage ``error`` and picks up the fixed file, and
    status, progress and disable must keep working)."""
    try:
        config = load(path)
    except ConfigError:
        if config_required:
            raise
        return None
    require_agent(config, agent, path)
    return config
