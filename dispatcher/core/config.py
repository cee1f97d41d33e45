"""config.json: the declared agents and the automation gate.

Agents are data: declaring ``codex`` is one more entry. A malformed file raises
``ConfigError`` with the reason; callers decide what failing closed means for them
(the server refuses to start, the listener dispatches nothing and keeps running).
An agent id that a valid file does not declare raises ``UnknownAgent`` (``unknown_agent``).
"""

import json
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator

# ConfigError is part of this module's interface (callers import it from here): an explicit re-export.
from dispatcher.core.errors import BridgeError
from dispatcher.core.errors import ConfigError as ConfigError
from dispatcher.core.locations import PACKAGE_DATA
from dispatcher.core.permissions import BRIDGE_ONLY, PermissionProfile
from dispatcher.core.private_files import writable_by_others
from dispatcher.core.validation import AGENT_ID_PATTERN

AgentId = Annotated[str, StringConstraints(pattern=f"^{AGENT_ID_PATTERN}$")]


class Prices(BaseModel):
    """US dollars per million tokens of each kind, as the agent's provider bills them. No default
    is shipped: an agent without a ``prices`` block has a cost only where its CLI reports one."""

    model_config = ConfigDict(extra="forbid", strict=True)

    input: float = Field(ge=0, le=100000, allow_inf_nan=False)
    output: float = Field(ge=0, le=100000, allow_inf_nan=False)
    cache_read: float = Field(default=0.0, ge=0, le=100000, allow_inf_nan=False)
    cache_write: float = Field(default=0.0, ge=0, le=100000, allow_inf_nan=False)


class AgentConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    launcher: str = Field(min_length=1)
    auto: bool = False
    worker_timeout_seconds: int = Field(default=1800, ge=1, le=86400)
    # Passed to the launcher as AGENT_BRIDGE_MAX_COST_USD (Claude: --max-budget-usd). Claude
    # checks it between turns, so an attempt can overshoot it; the ledger records by how much.
    max_cost_usd_per_task: float | None = Field(default=None, ge=0.000001, le=10000, allow_inf_nan=False)
    # Turns the tokens a CLI reports into a cost where the CLI reports none (dispatcher/core/spend.py).
    prices: Prices | None = None
    # The supervisor follows the worker's own usage reports and ends it past this many tokens
    # (input + output + cache read + cache write), as budget_exceeded.
    max_tokens_per_task: int | None = Field(default=None, ge=1, le=10**12)
    # Once the attempts started since local midnight reach either, the listener holds this
    # agent's tasks (held_budget) until the next local midnight.
    max_cost_usd_per_day: float | None = Field(default=None, ge=0.000001, le=1000000, allow_inf_nan=False)
    max_tokens_per_day: int | None = Field(default=None, ge=1, le=10**13)
    # A task for this agent while it has a live, wakeable interactive session waits this long
    # for that session to claim it before a headless worker is started (0: no wait).
    interactive_grace_seconds: int = Field(default=0, ge=0, le=3600)
    # Where this agent's workers run (absolute). Absent: AGENT_BRIDGE_WORKSPACE or its default.
    workspace: str | None = Field(default=None, min_length=1)
    # What this agent's headless workers may do in their workspace (dispatcher/core/permissions.py).
    # Absent: level ``bridge``, the bridge tools only, as before profiles existed.
    permissions: PermissionProfile | None = None

    @field_validator("workspace")
    @classmethod
    def _absolute_workspace(cls, value: str | None) -> str | None:
        if value is not None and not Path(value).expanduser().is_absolute():
            raise ValueError("workspace must be an absolute path (~ is expanded)")
        return value


class BridgeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    agents: dict[AgentId, AgentConfig] = Field(min_length=1)
    dispatch_max_age_seconds: int = Field(default=86400, ge=60, le=30 * 86400)
    # Finished attempt directories (worker.log, diagnostics, the CLI's raw output and
    # private home) older than this are removed by the agent's listener when idle.
    attempt_retention_days: int = Field(default=7, ge=0, le=3650)

    def launcher_path(self, agent: str, project_dir: Path) -> Path:
        """Absolute as written; relative: ``project_dir`` first (the checkout), then the
        installed package's launchers; when neither exists, the project-relative path."""
        path = Path(self.agents[agent].launcher).expanduser()
        if path.is_absolute():
            return path
        for base in (project_dir, PACKAGE_DATA):
            if (base / path).is_file():
                return base / path
        return project_dir / path

    def workspace(self, agent: str, default: Path) -> Path:
        """The agent's declared workspace, else ``default`` (AGENT_BRIDGE_WORKSPACE or its default)."""
        declared = self.agents[agent].workspace
        return Path(declared).expanduser() if declared is not None else default

    def workspace_problem(self, agent: str, default: Path, config_path: Path | str) -> str | None:
        """Why nothing can be dispatched into the agent's workspace (it is not an existing
        directory), with the fix; None when it is one. The listener refuses to dispatch then."""
        workspace = self.workspace(agent, default)
        if workspace.is_dir():
            return None
        return (
            f"the workspace {workspace} of agent {agent!r} is not an existing directory: nothing is dispatched "
            f"until it is; mkdir -p {workspace}, or set agents.{agent}.workspace in {config_path}"
        )

    def permissions(self, agent: str) -> PermissionProfile:
        """The agent's permission profile; ``bridge`` when it declares none."""
        return self.agents[agent].permissions or BRIDGE_ONLY


class UnknownAgent(BridgeError):
    """An agent id (``--agent`` or ``AGENT_ID``) that config.json does not declare."""

    def __init__(self, agent: str, declared: list[str], path: Path, source: str = "--agent") -> None:
        super().__init__(
            "unknown_agent",
            f"{source} {agent!r} is not declared in {path}; declared agents: {', '.join(sorted(declared))}. "
            "Use one of them, or declare it in that file.",
        )
        self.agent = agent


def require_agent(config: BridgeConfig, agent: str, path: Path, source: str = "--agent") -> None:
    if agent not in config.agents:
        raise UnknownAgent(agent, list(config.agents), path, source)


def load_config(path: Path) -> BridgeConfig:
    if (why := writable_by_others(Path(path))) is not None:
        raise ConfigError(
            path,
            f"someone else could change it: {why}. Make the file and its directories yours (or root's) "
            "and not group- or world-writable (chown, chmod go-w), as ssh requires of authorized_keys",
        )
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(path, "file not found; set AGENT_BRIDGE_CONFIG to a config.json") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(path, f"cannot read it as JSON ({exc})") from None
    try:
        return BridgeConfig.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}" for err in exc.errors()
        )
        raise ConfigError(path, problems) from None
