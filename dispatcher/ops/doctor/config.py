"""Doctor's checks of config.json, each agent's launcher and each agent's workspace."""

from pathlib import Path

from dispatcher.core.findings import Finding, finding
from dispatcher.core.launchers import launcher_problem
from dispatcher.core.private_files import writable_by_others
from dispatcher.ops.doctor.context import Context, one_line


def check_config(ctx: Context) -> list[Finding]:
    from dispatcher.core.config import ConfigError, load_config

    path = ctx.locations.config_path()
    if (why := writable_by_others(path)) is not None:  # the rule load_config (every command) refuses by
        return [finding("config_writable_by_others", f"{path} could be changed by someone else: {why}", what=path)]
    try:
        ctx.config = load_config(path)
    except ConfigError as exc:
        return [finding("config_invalid", f"{path} is invalid: {one_line(exc.reason)}", path=path)]
    return [finding("config_ok", f"{path}: agents {', '.join(sorted(ctx.config.agents))}")]


def check_launchers(ctx: Context) -> list[Finding]:
    from dispatcher.core.locations import PROJECT_DIR

    config, found = ctx.valid_config(), []
    for agent in sorted(config.agents):
        path = config.launcher_path(agent, PROJECT_DIR)
        found.append(launcher_finding(agent, path, launcher_problem(path)))
    return found


def launcher_finding(agent: str, path: Path, problem: tuple[str, str] | None) -> Finding:
    if problem is None:
        return finding("launcher_ok", f"launcher {path}", agent)
    code, why = problem
    said = {
        "launcher_missing": "does not exist",
        "launcher_not_executable": "is not executable",
        "launcher_writable_by_others": f"could be changed by someone else: {why}",
    }[code]
    return finding(code, f"launcher {path} {said}", agent, path=path, what=path)


def check_workspaces(ctx: Context) -> list[Finding]:
    """Each agent's workspace is an existing directory that holds none of the bridge's own files
    (a listener refuses to dispatch otherwise), whether or not its listener runs."""
    from dispatcher.core.settings import BridgeSettings

    config, default = ctx.valid_config(), BridgeSettings().workspace
    found = []
    for agent in sorted(config.agents):
        workspace = config.workspace(agent, default)
        if (unsafe := config.unsafe_workspace(agent, default, ctx.locations)) is not None:
            found.append(
                finding(
                    "workspace_unsafe", f"{unsafe}: nothing is dispatched", agent, config=ctx.locations.config_path()
                )
            )
        elif config.workspace_problem(agent, default, ctx.locations) is None:
            found.append(finding("workspace_ok", f"workers of {agent} run in {workspace}", agent))
        else:
            found.append(
                finding(
                    "workspace_missing",
                    f"the workspace {workspace} of {agent} is not an existing directory: nothing is dispatched",
                    agent,
                    workspace=workspace,
                    config=ctx.locations.config or "config.json",
                )
            )
    return found


def check_launcher_variables(ctx: Context) -> list[Finding]:
    """Each auto agent's launcher has the variables it needs in the listener's environment: the
    running listener's (the names it recorded), else this shell's, which `listener enable` passes on."""
    import os

    from dispatcher.core.locations import PROJECT_DIR
    from dispatcher.dispatch.control import listener_status
    from dispatcher.dispatch.environment import taken, unset_for, unset_problem

    config, found = ctx.valid_config(), []
    for agent in sorted(config.agents):
        launcher = config.launcher_path(agent, PROJECT_DIR)
        if not config.agents[agent].auto or not launcher.is_file():
            continue
        recorded = listener_status(ctx.locations, agent, check_config=False, late_results=False, totals=False)[
            "environment"
        ]
        names, whose = (recorded, "its running listener") if recorded is not None else (taken(os.environ), "this shell")
        if missing := unset_for(launcher, names):
            what, _ = unset_problem(agent, launcher, missing, whose)
            found.append(finding("launcher_variable_unset", what, agent, variable=missing[0]))
    return found
