"""What no worker may write (dispatcher/core/protected.py): the workspace rule, the git
directories of a repository, the write rule, and the git configuration a worker's git runs with."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from dispatcher.core import protected
from dispatcher.core.locations import Locations, StoreUrl
from dispatcher.core.protected import Place, git_dirs, workspace_problem, write_refused


@pytest.fixture
def home(tmp_path) -> Path:
    home = tmp_path / "home"
    (home / ".config" / "agent-bridge").mkdir(parents=True)
    (home / ".config" / "agent-bridge" / "config.json").write_text("{}")
    (home / "project").mkdir()
    return home


def places(home: Path) -> tuple[Place, ...]:
    state = home / ".local" / "state" / "agent-bridge"
    return (
        Place("the bridge's config", home / ".config" / "agent-bridge" / "config.json"),
        Place("the store", state / "bridge.db"),
        Place("the runtime directory", state / "runtime"),
        Place("a launcher", home / "bin" / "launch.sh"),
    )


@pytest.mark.parametrize(
    ("workspace", "why"),
    [
        ("", "{h} is the home directory {h}"),
        (".config", "{h}/.config contains the bridge's config {h}/.config/agent-bridge/config.json"),
        (".local/state", "{h}/.local/state contains the store {h}/.local/state/agent-bridge/bridge.db"),
        (
            ".local/state/agent-bridge/runtime/attempts",
            "{h}/.local/state/agent-bridge/runtime/attempts is inside the runtime directory "
            "{h}/.local/state/agent-bridge/runtime",
        ),
        ("bin", "{h}/bin contains a launcher {h}/bin/launch.sh"),
        ("..", "{p} contains the home directory {h}"),
        ("project", None),
        (".local/state/other", None),  # beside the store, not holding it
    ],
)
def test_a_workspace_may_hold_none_of_the_bridges_places_nor_be_or_hold_home(home, workspace, why):
    found = workspace_problem(home / workspace, places(home), home)
    assert found == (why and why.format(h=home, p=home.parent))


def test_a_link_to_an_unsafe_directory_is_as_unsafe(home, tmp_path):
    (tmp_path / "innocent").symlink_to(home, target_is_directory=True)
    assert workspace_problem(tmp_path / "innocent", places(home), home) == f"{home} is the home directory {home}"
    (home / "project" / "cfg").symlink_to(home / ".config", target_is_directory=True)
    assert "contains the bridge's config" in workspace_problem(home / "project" / "cfg", places(home), home)


def test_bridge_places_name_config_store_runtime_launchers_and_the_code(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    locations = Locations(tmp_path / "db" / "bridge.db", tmp_path / "c.json", tmp_path / "run")
    found = {(p.what, p.path) for p in protected.bridge_places(locations, [tmp_path / "l.sh"])}
    real = tmp_path.resolve()
    assert {
        ("the bridge's config", real / "c.json"),
        ("the bridge's config directory", real / "xdg" / "agent-bridge"),
        ("the bridge's state directory", real / "state" / "agent-bridge"),
        ("the store", real / "db" / "bridge.db"),
        ("the runtime directory", real / "run"),
        ("a launcher", real / "l.sh"),
        ("the installed code", Path(protected.__file__).resolve().parents[1]),
    } <= found
    on_postgres = Locations(StoreUrl("postgresql://h/db"), tmp_path / "c.json", tmp_path / "run")
    assert "the store" not in {p.what for p in protected.bridge_places(on_postgres, [])}


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)  # noqa: S607 - git from PATH


def test_git_dirs_of_a_repository_a_subdirectory_a_linked_worktree_and_none(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git("init", "-q", cwd=repo)
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "x", cwd=repo)
    (repo / "sub").mkdir()
    assert git_dirs(repo) == git_dirs(repo / "sub") == (repo.resolve() / ".git",)
    _git("worktree", "add", "-q", str(tmp_path / "wt"), cwd=repo)
    assert git_dirs(tmp_path / "wt") == (repo.resolve() / ".git" / "worktrees" / "wt", repo.resolve() / ".git")
    assert git_dirs(tmp_path / "elsewhere") == () or tmp_path.anchor in str(git_dirs(tmp_path / "elsewhere"))


def test_protected_paths_add_the_git_dirs_of_every_writable_directory(tmp_path):
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    found = protected.protected_paths((Place("a launcher", tmp_path / "l.sh"),), [repo])
    assert found == (str(tmp_path / "l.sh"), str(repo.resolve() / ".git"))


@pytest.mark.parametrize(
    ("path", "refused"),
    [
        ("ws/notes.txt", False),
        ("ws/.git/config", True),
        ("ws/.git/hooks/pre-commit", True),
        ("ws/.git", True),  # a .git file (gitdir: ...) the worker would point elsewhere
        ("ws/sub/.git/config", True),  # a repository nested in the workspace, or a new one
        ("ws/cfg-link/config.json", True),  # through a link into a protected place
        ("elsewhere/config.json", True),
        ("ws/.gitignore", False),
    ],
)
def test_write_refused(tmp_path, path, refused):
    (tmp_path / "ws").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "ws" / "cfg-link").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    assert (write_refused(tmp_path / path, [str(tmp_path / "elsewhere")]) is not None) == refused


def test_protected_from_env_refuses_anything_but_a_list_of_absolute_paths():
    assert protected.protected_from_env({}) == ()
    assert protected.protected_from_env({protected.PROTECTED_ENV: json.dumps(["/a"])}) == ("/a",)
    for bad in ('["rel"]', '{"a": 1}', "[1]"):
        with pytest.raises(ValueError, match="AGENT_BRIDGE_PROTECTED"):
            protected.protected_from_env({protected.PROTECTED_ENV: bad})


def test_a_planted_fsmonitor_hooks_dir_and_pager_do_not_run_under_the_workers_git_environment(tmp_path):
    """The real git: a repository whose config a worker (or anyone) made hostile. Plain git runs
    the planted programs; with ``git_environment`` git status and git log run none of them."""
    repo, marker = tmp_path / "repo", tmp_path / "ran"
    repo.mkdir()
    _git("init", "-q", cwd=repo)
    (repo / "a.txt").write_text("a\n")
    _git("add", "a.txt", cwd=repo)
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "x", cwd=repo)
    evil = tmp_path / "evil.sh"
    evil.write_text(f'#!/bin/sh\necho "$0 $*" >> {marker}\ncat >/dev/null\n')
    evil.chmod(0o755)
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "post-checkout").symlink_to(evil)
    with (repo / ".git" / "config").open("a") as config:
        config.write(f"[core]\n\tfsmonitor = {evil}\n\thooksPath = {hooks}\n\tpager = {evil}\n")

    def run(env: dict[str, str]) -> None:
        for args in (["status"], ["-p", "log", "-1"], ["checkout", "-q", "-b", f"b{len(env)}"]):
            subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, check=False)  # noqa: S607

    base = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "GIT_PAGER": ""}
    run(base)
    assert marker.exists()  # the hostile config does run programs: the test can see it
    marker.unlink()
    run({**base, **protected.git_environment()})
    assert not marker.exists()


def test_a_directory_made_to_look_like_a_bare_repository_is_not_taken_for_one(tmp_path):
    bare = tmp_path / "looks-bare"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)  # noqa: S607
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "GIT_CEILING_DIRECTORIES": str(tmp_path)}
    plain = subprocess.run(["git", "rev-parse", "--git-dir"], cwd=bare, env=env, capture_output=True, check=False)  # noqa: S607
    assert plain.returncode == 0
    safe = subprocess.run(  # noqa: S603
        ["git", "rev-parse", "--git-dir"],  # noqa: S607
        cwd=bare,
        env={**env, **protected.git_environment()},
        capture_output=True,
        check=False,
    )
    assert safe.returncode != 0


def test_a_worktree_in_the_runtime_directory_stays_writable_and_nothing_beside_it(tmp_path):
    """An attempt's worktree lies in the runtime directory (docs/worktrees.md): it is the worker's
    workspace, so it is left out of what is protected, and every other entry of the runtime
    directory on the way down to it stays protected."""
    from dispatcher.core.protected import Place, protected_paths, write_refused

    runtime = tmp_path / "runtime"
    worktree = runtime / "worktrees" / "claude" / "7"
    worktree.mkdir(parents=True)
    (runtime / "worktrees" / "claude" / "6").mkdir()
    (runtime / "attempts" / "7").mkdir(parents=True)
    (runtime / "claude.progress.json").write_text("{}")
    protected = protected_paths([Place("the runtime directory", runtime)], [worktree])
    assert write_refused(worktree / "app.py", protected) is None
    for other in ("worktrees/claude/6/app.py", "attempts/7/claude-result.json", "claude.progress.json"):
        assert write_refused(runtime / other, protected) is not None, other
    assert write_refused(runtime / "attempts" / "7" / "x", protected_paths([Place("r", runtime)], [])) is not None


def test_the_worktree_pool_is_never_writable_by_a_worker(tmp_path):
    """The pool's ready worktrees (docs/worktrees.md) lie in the runtime directory beside the
    attempts' worktrees: only the attempt's own worktree is carved out, so a worker can write no
    entry of the pool, not even one made after it started (the pool's directory exists before
    any worker starts: ``isolation.open_worktree`` makes it)."""
    from dispatcher.core.protected import Place, protected_paths, write_refused

    runtime = tmp_path / "runtime"
    worktree = runtime / "worktrees" / "claude" / "7"
    worktree.mkdir(parents=True)
    entry = runtime / "worktree-pool" / "0123456789abcdef" / "ready" / "p1"
    entry.mkdir(parents=True)
    protected = protected_paths([Place("the runtime directory", runtime)], [worktree])
    assert write_refused(worktree / "app.py", protected) is None
    later = runtime / "worktree-pool" / "fedcba9876543210" / "ready" / "p2"  # made once the worker ran
    for path in (entry / "app.py", entry / ".git", later / "app.py", runtime / "worktree-pool" / "x"):
        assert write_refused(path, protected) is not None, path
    # A link the worker plants in its own worktree, pointing into the pool, is refused too.
    (worktree / "into-pool").symlink_to(entry)
    assert write_refused(worktree / "into-pool" / "app.py", protected) is not None
