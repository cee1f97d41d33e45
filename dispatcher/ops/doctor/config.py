"""Doctor's checks of config.json, each agent's launcher and each agent's workspace."""

from pathlib import Path

from dispatcher.core.findings import Finding, finding
from dispatcher.ops.doctor.check import CONFIG, check
from dispatcher.ops.doctor.context import Context, one_line


def read_config(ctx: Context) -> tuple[str, str]:
    """config.json read once per run: ("config_ok", "") with ``ctx.config`` set, or the code of
    what is wrong with it and why."""

    def read() -> tuple[str, str]:
        from dispatcher.core.config import ConfigError, load_config
        from dispatcher.core.private_files import writable_by_others

        path = ctx.locations.config_path()
        if (why := writable_by_others(path)) is not None:  # the rule load_config (every command) refuses by
            return "config_writable_by_others", why
        from dispatcher.clis import registry

        try:
            config = load_config(path)
        except ConfigError as exc:
            return "config_invalid", one_line(exc.reason)
        if (problem := registry.config_problem(config.agents)) is not None:  # as the listener refuses it
            return "config_invalid", problem
        ctx.config = config
        return "config_ok", ""

    return ctx.fact("config", read)


@check()
def config_writable_by_others(ctx: Context) -> list[Finding]:
    """Could someone else change config.json?"""
    code, why = read_config(ctx)
    path = ctx.locations.config_path()
    if code != "config_writable_by_others":
        return []
    return [finding(code, f"{path} could be changed by someone else: {why}", what=path)]


@check()
def config_invalid(ctx: Context) -> list[Finding]:
    """Is config.json not one the bridge accepts?"""
    code, why = read_config(ctx)
    path = ctx.locations.config_path()
    return [finding(code, f"{path} is invalid: {why}", path=path)] if code == "config_invalid" else []


@check()
def config_ok(ctx: Context) -> list[Finding]:
    """Did config.json read valid?"""
    if read_config(ctx)[0] != "config_ok":
        return []
    config = ctx.valid_config()
    return [finding("config_ok", f"{ctx.locations.config_path()}: agents {', '.join(sorted(config.agents))}")]


# --- each agent's launcher: the one rule the status line and top judge it by (core.launchers) ---


def _launchers(ctx: Context) -> list[tuple[str, Path, tuple[str, str] | None]]:
    """Each agent, its launcher and what keeps it from running (``launcher_problem``), once per run."""
    from dispatcher.core.launchers import launcher_problem
    from dispatcher.core.locations import PROJECT_DIR

    def read() -> list[tuple[str, Path, tuple[str, str] | None]]:
        config = ctx.valid_config()
        paths = [(agent, config.launcher_path(agent, PROJECT_DIR)) for agent in sorted(config.agents)]
        return [(agent, path, launcher_problem(path)) for agent, path in paths]

    return ctx.fact("launchers", read)


@check(CONFIG, "launcher")
def launcher_ok(ctx: Context) -> list[Finding]:
    """Which agents' launchers can run?"""
    return [
        finding("launcher_ok", f"launcher {path}", agent) for agent, path, problem in _launchers(ctx) if not problem
    ]


def _launcher_problem(code: str, said: str):  # said: a template of {why}
    def run(ctx: Context) -> list[Finding]:
        return [
            finding(code, f"launcher {path} {said.format(why=problem[1])}", agent, path=path, what=path)
            for agent, path, problem in _launchers(ctx)
            if problem is not None and problem[0] == code
        ]

    run.__name__ = run.__qualname__ = code
    run.__doc__ = f"Whose launcher {said.format(why='...')} ({code}, by ``launcher_problem``)?"
    return check(CONFIG, "launcher")(run)


launcher_missing = _launcher_problem("launcher_missing", "does not exist")
launcher_not_executable = _launcher_problem("launcher_not_executable", "is not executable")
launcher_writable_by_others = _launcher_problem(
    "launcher_writable_by_others", "could be changed by someone else: {why}"
)


@check(CONFIG)
def launcher_variable_unset(ctx: Context) -> list[Finding]:
    """Does an auto agent's launcher need a variable the listener's environment lacks? The running
    listener's (the names it recorded), else this shell's, which `listener enable` passes on."""
    import os

    from dispatcher.core.locations import PROJECT_DIR
    from dispatcher.dispatch.environment import taken, unset_for, unset_problem
    from dispatcher.ops.doctor.context import listener_state

    config, found = ctx.valid_config(), []
    for agent in sorted(config.agents):
        launcher = config.launcher_path(agent, PROJECT_DIR)
        if not config.agents[agent].auto or not launcher.is_file():
            continue
        recorded = listener_state(ctx, agent, check_config=False)["environment"]
        names, whose = (recorded, "its running listener") if recorded is not None else (taken(os.environ), "this shell")
        if missing := unset_for(launcher, names):
            what, _ = unset_problem(agent, launcher, missing, whose)
            found.append(finding("launcher_variable_unset", what, agent, variable=missing[0]))
    return found


# --- each agent's workspace: an existing directory that holds none of the bridge's own files ---
# (a listener refuses to dispatch otherwise), whether or not its listener runs


def _workspaces(ctx: Context) -> list[tuple[str, Path, str | None, bool]]:
    """Each agent, its workspace, why it is unsafe (None: it is not) and whether it is an existing directory."""
    from dispatcher.core.settings import BridgeSettings

    def read() -> list[tuple[str, Path, str | None, bool]]:
        config, default = ctx.valid_config(), BridgeSettings().workspace
        return [
            (
                agent,
                config.workspace(agent, default),
                config.unsafe_workspace(agent, default, ctx.locations),
                config.workspace_problem(agent, default, ctx.locations) is None,
            )
            for agent in sorted(config.agents)
        ]

    return ctx.fact("workspaces", read)


@check(CONFIG, "workspace")
def workspace_unsafe(ctx: Context) -> list[Finding]:
    """Is an agent's workspace the home directory, or does it hold or lie in the bridge's own files?"""
    config = ctx.locations.config_path()
    return [
        finding("workspace_unsafe", f"{unsafe}: nothing is dispatched", agent, config=config)
        for agent, _, unsafe, _ in _workspaces(ctx)
        if unsafe is not None
    ]


@check(CONFIG, "workspace")
def workspace_ok(ctx: Context) -> list[Finding]:
    """Which agents' workspaces are safe, existing directories?"""
    return [
        finding("workspace_ok", f"workers of {agent} run in {workspace}", agent)
        for agent, workspace, unsafe, exists in _workspaces(ctx)
        if unsafe is None and exists
    ]


@check(CONFIG, "workspace")
def workspace_missing(ctx: Context) -> list[Finding]:
    """Is a (safe) agent's workspace not an existing directory?"""
    return [
        finding(
            "workspace_missing",
            f"the workspace {workspace} of {agent} is not an existing directory: nothing is dispatched",
            agent,
            workspace=workspace,
            config=ctx.locations.config or "config.json",
        )
        for agent, workspace, unsafe, exists in _workspaces(ctx)
        if unsafe is None and not exists
    ]
