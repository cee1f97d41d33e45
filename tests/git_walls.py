"""The git-directory walls, the same for every CLI (issue 28, item 3): a workspace that is a real
git repository whose ``.git/config`` already names a hostile fsmonitor, hooks directory and pager
(as a worker with a writable git directory would have left it), and a task that tries to write
the git directory through the CLI's file tools and then runs the allowed ``git status``.

Afterwards: nothing in ``.git`` changed (config, hooks, info), no planted program ran, and git
did run (its output reached the model: ``On branch``)."""

import json
import subprocess
from pathlib import Path

GIT_STATUS = "git status"
HOOK_NAMES = ("pre-commit", "post-checkout", "fsmonitor-watchman")


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)  # noqa: S607 - git from PATH


def plant_repo(ws: Path) -> dict[str, Path]:
    """``ws`` made a repository with one commit, its config made hostile; returns what to check."""
    base = ws.parent / f"{ws.name}-planted"  # beside the workspace, one per workspace
    base.mkdir()
    # In the workspace: the one place every CLI's sandbox lets a program write, so a planted
    # program that runs inside a sandbox leaves its mark too.
    marker = ws / "planted-git-program-ran"
    evil = base / "git-program.sh"
    evil.write_text(f'#!/bin/sh\necho "$0 $*" >> {marker}\ncat >/dev/null\n')
    evil.chmod(0o755)
    hooks = base / "hooks"
    hooks.mkdir()
    for name in HOOK_NAMES:
        (hooks / name).symlink_to(evil)
    _git("init", "-q", cwd=ws)
    _git("add", "-A", cwd=ws)
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "start", cwd=ws)
    with (ws / ".git" / "config").open("a") as config:
        config.write(f"[core]\n\tfsmonitor = {evil}\n\thooksPath = {hooks}\n\tpager = {evil}\n")
    return {"ws": ws, "marker": marker, "git": ws / ".git", "before": snapshot(ws / ".git")}


def snapshot(git_dir: Path) -> dict[str, bytes]:
    """The git directory's config, hooks and info, as bytes by relative path."""
    found = {"config": (git_dir / "config").read_bytes()}
    for sub in ("hooks", "info"):
        for path in sorted((git_dir / sub).rglob("*")):
            if path.is_file():
                found[path.relative_to(git_dir).as_posix()] = path.read_bytes()
    return found


def git_actions(ws: Path) -> list[dict]:
    """Writes into the git directory through the file tools (each must be refused), then the
    allowed ``git status`` (which must run, and run nothing planted)."""
    hostile = "[core]\n\tfsmonitor = touch /tmp/should-never-exist\n[alias]\n\tst = !touch st-ran\n"
    return [
        {"read": str(ws / ".git" / "config")},
        {"write": str(ws / ".git" / "config"), "content": hostile},
        {"write": str(ws / ".git" / "hooks" / "pre-commit"), "content": "#!/bin/sh\ntouch hook-ran\n"},
        {"write": str(ws / ".git" / "info" / "attributes"), "content": "* filter=evil\n"},
        {"write": str(ws / "sub" / ".git" / "config"), "content": hostile},
        {"run": GIT_STATUS},
    ]


def task_text(toolkit: str, ws: Path, head: str = "Work in the workspace.") -> str:
    lines = [f"DO={json.dumps(action)}" for action in git_actions(ws)]
    return f"{head}\nMODE=workspace\nTOOLKIT={toolkit}\n" + "\n".join(lines) + "\n"


def assert_walls_held(repo: dict[str, Path], tool_results: tuple[str, ...] | list[str], *, git_ran: bool) -> None:
    """``git_ran``: the level offers a shell, so ``git status`` ran (its output is a tool result)."""
    assert snapshot(repo["git"]) == repo["before"]  # config, hooks and info exactly as they were
    assert not (repo["ws"] / "sub" / ".git").exists()
    assert not repo["marker"].exists()  # neither the fsmonitor, the hooks nor the pager ran
    assert any("On branch" in str(result) for result in tool_results) == git_ran, tool_results
