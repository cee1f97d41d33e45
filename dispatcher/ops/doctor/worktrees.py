"""Doctor's checks of the git worktrees attempts run in (docs/worktrees.md): that an agent whose
workers need one has a workspace one can be made from, and that no worktree or ``agent-bridge/``
branch of ours is left that no attempt owns."""

import shlex

from dispatcher.core.findings import Finding, finding
from dispatcher.ops.doctor.context import Context


def check_isolation(ctx: Context) -> list[Finding]:
    """An agent whose workers need a worktree has a workspace one can be made from."""
    from dispatcher.core.settings import BridgeSettings
    from dispatcher.dispatch import git_worktree as g
    from dispatcher.dispatch.isolation import ISOLATION_TEXT, use_worktree

    config, default = ctx.valid_config(), BridgeSettings().workspace
    found = []
    for agent in sorted(config.agents):
        declared, writes = config.agents[agent].isolation, config.permissions(agent).writes
        workspace = config.workspace(agent, default)
        if not use_worktree(declared, writes, True) or not workspace.is_dir():
            continue
        try:
            repo = g.find_repo(workspace)
            why = "workspace_not_git" if repo is None and declared == "worktree" else repo and g.repo_refusal(repo)
        except g.GitFailed as exc:
            why = exc.kind
        if why:
            text = f"{why}: {ISOLATION_TEXT.get(why, why)} ({workspace}); its tasks fail"
            found.append(finding("isolation_refused", text, agent, config=ctx.locations.config or "config.json"))
        elif repo is not None:
            found.append(finding("isolation_ok", f"workers of {agent} get a worktree of {repo.toplevel}", agent))
    return found


def check_worktrees(ctx: Context) -> list[Finding]:
    """Worktrees and ``agent-bridge/`` branches of ours that no attempt owns, with their size."""
    from dispatcher.core.settings import BridgeSettings
    from dispatcher.ops.branches import known_repositories, orphans

    conn = ctx.store()
    workspaces = []
    if ctx.config is not None:
        default = BridgeSettings().workspace
        workspaces = [ctx.config.workspace(agent, default) for agent in ctx.config.agents]
    left = orphans(conn, ctx.locations.private_dir(), known_repositories(conn, workspaces))
    found = [
        finding(
            "orphan_worktree",
            f"worktree {w['path']} ({w['bytes'] // 1024} KiB) belongs to no attempt",
            path=shlex.quote(str(w["path"])),
        )
        for w in left["worktrees"]
    ]
    found += [
        finding(
            "orphan_branch",
            f"branch {b['branch']} of {b['repository']} (at {b['commit'][:12]}) belongs to no attempt",
            repository=shlex.quote(str(b["repository"])),
            branch=shlex.quote(str(b["branch"])),
        )
        for b in left["branches"]
    ]
    return found
