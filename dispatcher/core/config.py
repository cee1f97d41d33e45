"""config.json: the declared agents and the automation gate.

Agents are data: declaring ``codex`` is one more entry. A malformed file raises
``ConfigError`` with the reason; callers decide what failing closed means for them
(the server refuses to start, the listener dispatches nothing and keeps running).
An agent id that a valid file does not declare raises ``UnknownAgent`` (``unknown_agent``).
"""

import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    StringConstraints,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)

# ConfigError, UnknownAgent and require_agent are part of this module's interface (callers import
# them from here; the last two live with the pydantic-free view): explicit re-exports.
from dispatcher.core.config_view import ConfigPlaces, budget_zone
from dispatcher.core.config_view import UnknownAgent as UnknownAgent
from dispatcher.core.config_view import require_agent as require_agent
from dispatcher.core.errors import ConfigError as ConfigError
from dispatcher.core.launchers import AGENT_LAUNCHER
from dispatcher.core.locations import InvalidSetting, Locations
from dispatcher.core.permissions import BRIDGE_ONLY, PermissionProfile
from dispatcher.core.private_files import writable_by_others
from dispatcher.core.profile_rules import MAX_APPROVAL_TIMEOUT_SECONDS
from dispatcher.core.protected import unsafe_fix
from dispatcher.core.spend import has_daily_cap
from dispatcher.core.validation import AGENT_ID_PATTERN

AgentId = Annotated[str, StringConstraints(pattern=f"^{AGENT_ID_PATTERN}$")]
# A command as its argv (no shell): the program, then its arguments (docs/notices.md).
NotifyCommand = Annotated[
    list[Annotated[str, StringConstraints(min_length=1, max_length=4096)]], Field(min_length=1, max_length=64)
]


class Prices(BaseModel):
    """US dollars per million tokens of each kind, as the agent's provider bills them. No default
    is shipped: an agent without a ``prices`` block has a cost only where its CLI reports one."""

    model_config = ConfigDict(extra="forbid", strict=True)

    input: float = Field(ge=0, le=100000, allow_inf_nan=False)
    output: float = Field(ge=0, le=100000, allow_inf_nan=False)
    cache_read: float = Field(default=0.0, ge=0, le=100000, allow_inf_nan=False)
    cache_write: float = Field(default=0.0, ge=0, le=100000, allow_inf_nan=False)


DECLARED_PLACEHOLDERS = ("{request_file}", "{mcp_config}", "{attempt_dir}", "{workspace}", "{agent}", "{message_id}")
BRIDGE_SERVER_PLACEHOLDER = "{bridge_server}"


class DeclaredMcpConfig(BaseModel):
    """The MCP config file a declared CLI reads: written into the attempt directory as ``file``
    from ``template``, a JSON object in which the string ``"{bridge_server}"`` stands for the
    bridge's own server entry (``command``, ``args``, ``env``)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    file: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    template: dict[str, Any]


class DeclaredCli(BaseModel):
    """An agent CLI the user declares instead of one the bridge knows (docs/agent-clis.md, "Add
    your own CLI"). ``argv``: the command, with placeholders (``DECLARED_PLACEHOLDERS``); ``prompt``:
    how the task reaches it (``stdin``, or ``file``: its path through ``{request_file}``);
    ``max_level``: the highest permission level it enforces, at most ``bridge`` unless ``sandbox``
    names what confines its tools (the user's word: the bridge cannot check it)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    argv: list[Annotated[str, StringConstraints(min_length=1)]] = Field(min_length=1)
    prompt: Literal["stdin", "file"] = "stdin"
    mcp_config: DeclaredMcpConfig | None = None
    max_level: Literal["bridge", "read", "edit", "shell", "project"] = "bridge"
    sandbox: str | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> "DeclaredCli":
        words = " ".join(self.argv)
        if self.max_level != "bridge" and self.sandbox is None:
            raise ValueError(
                f"max_level {self.max_level} needs sandbox: name what confines this CLI's tools, or use max_level bridge"
            )
        if self.prompt == "file" and "{request_file}" not in words:
            raise ValueError('prompt "file" needs {request_file} in argv, where the CLI takes the task file')
        if self.mcp_config is not None and "{mcp_config}" not in words:
            raise ValueError("mcp_config needs {mcp_config} in argv, where the CLI takes its MCP config file")
        return self


CLI_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")  # a package's name under dispatcher/clis/


def _cli_name(value: str) -> str:
    """A registered CLI's name by its shape (which ones exist, the registry says: ``registry.config_problem``)."""
    if not CLI_NAME.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a CLI's name: name one the bridge has, in lower case (such as claude, as "
            "`agent-bridge init` writes it), or declare your own as an object (docs/agent-clis.md)"
        )
    return value


# ``cli``: a string names a registered CLI (a package under dispatcher/clis/), an object declares
# the user's own (DeclaredCli); either way the generic launcher runs it (no ``launcher`` needed).
CliChoice = Annotated[
    Annotated[Annotated[str, AfterValidator(_cli_name)], Tag("name")] | Annotated[DeclaredCli, Tag("declared")],
    Discriminator(lambda value: "name" if isinstance(value, str) else "declared"),
]


class AgentConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    # The CLI its workers run: a registered CLI's name ("codex"), or an object declaring one of
    # the user's own (DeclaredCli). Run by launchers/agent_headless.sh unless ``launcher`` is given.
    cli: CliChoice | None = None
    # The program that runs one worker (a path, relative to the checkout or the package): only for
    # a worker that is no CLI's (launchers/command_headless.sh), or as older configs name their
    # CLI's (launchers/codex_headless.sh, which still work). Absent: launchers/agent_headless.sh.
    launcher: str | None = Field(default=None, min_length=1)
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
    # Once the attempts started since midnight (in budget_time_zone) reach either, the listener
    # holds this agent's tasks (held_budget) until the next midnight there.
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
    # How many of this agent's tasks its listener runs at once (absent: 2 with isolation
    # ``worktree``, else 1; docs/workers.md). The machine-wide ``max_workers_total`` caps them all.
    max_workers: int | None = Field(default=None, ge=1, le=64)
    # Where its workers edit (docs/worktrees.md): ``worktree`` (a git worktree and branch of their
    # own per attempt), ``none`` (the workspace itself), ``auto``: worktree when the workspace is
    # in a git repository and the level writes files.
    isolation: Literal["auto", "worktree", "none"] = "auto"
    # Run on the events a person should hear of (docs/notices.md), instead of the global
    # ``notify_command``: its argv, given payload-free fields only, never task text or tool input.
    notify_command: NotifyCommand | None = None
    # How long a worker's request for approval (its profile's ``ask``) waits for a person; then it
    # is denied. Never past the worker's own timeout (docs/approvals.md).
    approval_timeout_seconds: int = Field(default=600, ge=1, le=MAX_APPROVAL_TIMEOUT_SECONDS)

    @field_validator("workspace")
    @classmethod
    def _absolute_workspace(cls, value: str | None) -> str | None:
        if value is not None and not Path(value).expanduser().is_absolute():
            raise ValueError("workspace must be an absolute path (~ is expanded)")
        return value

    @model_validator(mode="after")
    def _runs_something(self) -> "AgentConfig":
        if self.cli is None and self.launcher is None:
            raise ValueError(
                'name the CLI its workers run ("cli": "claude", say; `agent-bridge init` writes the ones found '
                'on PATH) or give its "launcher"'
            )
        if self.cli is None and Path(str(self.launcher)).name == Path(AGENT_LAUNCHER).name:
            raise ValueError(f'{AGENT_LAUNCHER} runs the CLI that "cli" names: add "cli" (such as "claude")')
        return self


class BridgeConfig(ConfigPlaces, BaseModel):
    """A valid config.json; where its agents' launchers and workspaces are: ``ConfigPlaces``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    agents: dict[AgentId, AgentConfig] = Field(min_length=1)
    dispatch_max_age_seconds: int = Field(default=86400, ge=60, le=30 * 86400)
    # Finished attempt directories (worker.log, diagnostics, the CLI's raw output and
    # private home) older than this are removed by the agent's listener when idle.
    attempt_retention_days: int = Field(default=7, ge=0, le=3650)
    # The time zone whose days the daily budgets count (an IANA name: "Europe/Berlin", "UTC"), so
    # that every host of a shared store means the same day. Required once an agent has a daily budget.
    budget_time_zone: str | None = Field(default=None, min_length=1)

    @field_validator("budget_time_zone")
    @classmethod
    def _known_zone(cls, value: str | None) -> str | None:
        if value is not None:
            budget_zone(value)  # raises ValueError, naming the fix, for a name tzdata does not know
        return value

    @model_validator(mode="after")
    def _zone_for_daily_budgets(self) -> "BridgeConfig":
        capped = [agent for agent, entry in self.agents.items() if has_daily_cap(entry)]
        if capped and self.budget_time_zone is None:
            raise ValueError(
                f"agents {', '.join(capped)} have a daily budget, so budget_time_zone must name the time zone "
                'whose day it counts (an IANA name such as "UTC" or "Europe/Berlin"): each host\'s own zone '
                "could mean another day"
            )
        return self

    # Workers of all agents running at once on this machine (per runtime directory); a task
    # beyond it is held (``max_workers_total``) until one ends (docs/workers.md).
    max_workers_total: int = Field(default=4, ge=1, le=256)
    # Kept worktrees (of failed or crashed attempts, kept for inspection until retention) may use
    # this much disk in all; past it, the oldest go first (their branches stay).
    kept_worktrees_max_mb: int = Field(default=2048, ge=0, le=10**7)
    # Ready worktrees kept checked out per repository, so that an attempt's worktree is a switch of
    # the files that differ rather than a checkout of every file (docs/worktrees.md); 0: none.
    worktree_pool_size: int = Field(default=1, ge=0, le=8)
    # Run on the events a person should hear of (an attempt failed, timed out or crashed, a budget
    # was reached, a listener stopped on an error): its argv, with payload-free fields only, in the
    # background, ended after ``notify_timeout_seconds`` (docs/notices.md). An agent's own wins.
    notify_command: NotifyCommand | None = None
    # How long a notify_command may run; then its process group is killed and the notice logged failed.
    notify_timeout_seconds: int = Field(default=10, ge=1, le=600)
    # Prometheus metrics (docs/metrics.md): each agent's listener writes its figures to
    # ``<dir>/agent_bridge_<agent>.prom`` for the node exporter's textfile collector. Absent: off.
    metrics_textfile_dir: str | None = Field(default=None, min_length=1)

    @field_validator("metrics_textfile_dir")
    @classmethod
    def _absolute_metrics_dir(cls, value: str | None) -> str | None:
        if value is not None and not Path(value).is_absolute():
            raise ValueError(
                "metrics_textfile_dir must be an absolute path to the directory the node exporter's "
                "--collector.textfile.directory names"
            )
        return value

    def permissions(self, agent: str) -> PermissionProfile:
        """The agent's permission profile; ``bridge`` when it declares none."""
        return self.agents[agent].permissions or BRIDGE_ONLY

    def permission_level(self, agent: str) -> str:
        return self.permissions(agent).level


def did_you_mean(error: Any) -> str:
    """`` (did you mean 'auto'?)`` for an unknown key close to a known one (``atuo``), else empty."""
    import difflib

    if error.get("type") != "extra_forbidden" or not error.get("loc"):
        return ""
    known = {
        name
        for model in (BridgeConfig, AgentConfig, Prices, PermissionProfile, DeclaredCli, DeclaredMcpConfig)
        for name in model.model_fields
    }
    close = difflib.get_close_matches(str(error["loc"][-1]), sorted(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


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
        config = BridgeConfig.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}{did_you_mean(err)}"
            for err in exc.errors()
        )
        raise ConfigError(path, problems) from None
    if (problem := _unsafe_workspaces(config, Path(path))) is not None:
        raise ConfigError(path, problem)
    return config


def _unsafe_workspaces(config: BridgeConfig, path: Path) -> str | None:
    """Why the first declared workspace (or writable ``extra_dirs`` entry) that holds or lies in the
    bridge's own files (``protected``) is refused, with the fix. An agent without a declared
    workspace gets the settings' default, which the listener, the supervisor and doctor check."""
    try:
        here = Locations.from_env()
    except InvalidSetting:
        return None  # refused, with its own message, wherever the settings are read
    locations = Locations(here.db, path, here.runtime_dir)
    for agent in config.agents:
        if (why := config.unsafe_workspace(agent, None, locations)) is not None:
            return f"{why}; {unsafe_fix(agent, path)}"
    return None
