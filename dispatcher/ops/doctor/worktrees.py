"""Doctor's checks of the git worktrees attempts run in (docs/worktrees.md): that an agent whose
workers need one has a workspace one can be made from, and that no worktree or ``agent-bridge/``
branch of ours is left that no attempt owns."""

import shlex
from typing import TYPE_CHECKING

from dispatcher.core.findings import Finding, finding
from dispatcher.ops.doctor.check import CONFIG, STORE, check
from dispatcher.ops.doctor.context import Context

if TYPE_CHECKING:
    from dispatcher.dispatch.git_worktree import Repo


def _isolation(ctx: Context) -> list[tuple[str, str | None, "Repo | None"]]:
    """Each agent whose workers need a worktree and whose workspace exists: why none can be made
    (None: one can) and the repository it is made from."""
    from dispatcher.core.settings import BridgeSettings
    from dispatcher.dispatch import git_worktree as g
    from dispatcher.dispatch.isolation import ISOLATION_TEXT, use_worktree

    def read() -> list[tuple[str, str | None, "Repo | None"]]:
        config, default, answers = ctx.valid_config(), BridgeSettings().workspace, []
        for agent in sorted(config.agents):
            declared, writes = config.agents[agent].isolation, config.permissions(agent).writes
            workspace = config.workspace(agent, default)
            if not use_worktree(declared, writes, True) or not workspace.is_dir():
                continue
            repo = None
            try:
                repo = g.find_repo(workspace)
                why = "workspace_not_git" if repo is None and declared == "worktree" else repo and g.repo_refusal(repo)
            except g.GitFailed as exc:
                why = exc.kind
            text = f"{why}: {ISOLATION_TEXT.get(why, why)} ({workspace}); its tasks fail" if why else None
            answers.append((agent, text, repo))
        return answers

    return ctx.fact("isolation", read)


@check(CONFIG, "isolation")
def isolation_refused(ctx: Context) -> list[Finding]:
    """Does an agent whose workers need a worktree have a workspace none can be made from?"""
    config = ctx.locations.config or "config.json"
    return [finding("isolation_refused", why, agent, config=config) for agent, why, _ in _isolation(ctx) if why]


@check(CONFIG, "isolation")
def isolation_ok(ctx: Context) -> list[Finding]:
    """Which agents' workers get a worktree, and of which checkout?"""
    return [
        finding("isolation_ok", f"workers of {agent} get a worktree of {repo.toplevel}", agent)
        for agent, why, repo in _isolation(ctx)
        if not why and repo is not None
    ]


def _orphans(ctx: Context) -> dict:
    """Worktrees and ``agent-bridge/`` branches of ours that no attempt owns, with their size."""
    from dispatcher.core.settings import BridgeSettings
    from dispatcher.ops.branches import known_repositories, orphans

    def read() -> dict:
        conn, workspaces = ctx.store(), []
        if ctx.config is not None:
            default = BridgeSettings().workspace
            workspaces = [ctx.config.workspace(agent, default) for agent in ctx.config.agents]
        return orphans(conn, ctx.locations.private_dir(), known_repositories(conn, workspaces))

    return ctx.fact("orphans", read)


@check(STORE)
def orphan_worktree(ctx: Context) -> list[Finding]:
    """Is a worktree of ours left that no attempt owns?"""
    return [
        finding(
            "orphan_worktree",
            f"worktree {w['path']} ({w['bytes'] // 1024} KiB) belongs to no attempt",
            path=shlex.quote(str(w["path"])),
        )
        for w in _orphans(ctx)["worktrees"]
    ]


@check(STORE)
def orphan_branch(ctx: Context) -> list[Finding]:
    """Is an ``agent-bridge/`` branch of ours left that no attempt owns?"""
    return [
        finding(
            "orphan_branch",
            f"branch {b['branch']} of {b['repository']} (at {b['commit'][:12]}) belongs to no attempt",
            repository=shlex.quote(str(b["repository"])),
            branch=shlex.quote(str(b["branch"])),
        )
        for b in _orphans(ctx)["branches"]
    ]
