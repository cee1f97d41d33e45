"""The worktree rules, one case each: when an attempt gets a worktree, which repositories are
refused, how git is run, which kept worktrees retention removes, and the diffstat's wording."""

import os
import subprocess
from pathlib import Path

import pytest

from dispatcher.core.config_view import use_worktree
from dispatcher.core.diffstat import diffstat_text
from dispatcher.dispatch import git_worktree as g
from dispatcher.dispatch.worktree_retention import KeptWorktree, worktrees_to_remove


@pytest.mark.parametrize(
    ("declared", "writes", "in_repo", "expected"),
    [
        ("none", True, True, False),
        ("worktree", False, True, True),
        ("worktree", True, False, None),  # refused: workspace_not_git, nothing runs
        ("auto", True, True, True),
        ("auto", False, True, False),  # read or bridge: nothing to isolate
        ("auto", True, False, False),  # not a repository: the workspace itself, as before
    ],
)
def test_when_an_attempt_gets_a_worktree(declared, writes, in_repo, expected):
    assert use_worktree(declared, writes, in_repo) is expected


def _repo(**changes) -> g.Repo:
    base = {
        "toplevel": Path("/r"),
        "git_dir": Path("/r/.git"),
        "common_dir": Path("/r/.git"),
        "branch": "main",
        "head": "a" * 40,
        "in_progress": None,
    }
    return g.Repo(**{**base, **changes})


@pytest.mark.parametrize(
    ("changes", "kind"),
    [
        ({}, None),
        ({"head": None}, "workspace_no_commits"),
        ({"in_progress": "MERGE_HEAD"}, "workspace_mid_operation"),
        ({"in_progress": "rebase-merge"}, "workspace_mid_operation"),
        ({"branch": None}, "workspace_detached_head"),
    ],
)
def test_which_repositories_a_worktree_cannot_start_from(changes, kind):
    assert g.repo_refusal(_repo(**changes)) == kind


def test_every_git_command_runs_without_hooks_fsmonitor_or_foreign_config(monkeypatch):
    monkeypatch.setenv("GIT_DIR", "/elsewhere")
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", "'core.fsmonitor=/evil'")
    argv, env = g.git_command(("add", "-A"), git_dir="/g", work_tree="/w")
    assert argv[:2] == ["git", "--no-pager"] and argv[-4:] == ["--git-dir=/g", "--work-tree=/w", "add", "-A"]
    settings = [argv[i + 1] for i, word in enumerate(argv) if word == "-c"]
    assert {"core.hooksPath=/dev/null", "core.fsmonitor=false", "gc.auto=0"} <= set(settings)
    assert env["GIT_CONFIG_NOSYSTEM"] == "1" and env["GIT_CONFIG_GLOBAL"] == "/dev/null"
    assert env["GIT_TERMINAL_PROMPT"] == "0"
    assert "GIT_DIR" not in env and "GIT_CONFIG_PARAMETERS" not in env


def test_a_repository_fsmonitor_and_hooks_never_run(tmp_path):
    """The user's own config names an fsmonitor and a pre-commit hook: the bridge's git runs neither."""
    repo = tmp_path / "repo"
    marker = tmp_path / "ran"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    run = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True, env=clean)  # noqa: E731
    subprocess.run(["git", "init", "-q", str(repo)], check=True, env=clean)
    script = tmp_path / "hook.sh"
    script.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    script.chmod(0o755)
    run("config", "core.fsmonitor", str(script))
    run("config", "core.hooksPath", str(tmp_path))
    (tmp_path / "pre-commit").symlink_to(script)
    (repo / "f").write_text("1")
    g.commit_worktree(repo / ".git", repo, "agent-bridge: test")
    assert g.branch_head(repo / ".git", "master") or g.branch_head(repo / ".git", "main")
    assert not marker.exists()


def _kept(message_id, finished_at, size, outcome="failed", finished=True):
    return KeptWorktree(message_id, finished, outcome, finished_at, size)


def test_retention_removes_old_and_succeeded_worktrees_and_never_a_running_one():
    kept = [
        _kept(1, 100.0, 10),  # older than the cutoff
        _kept(2, 900.0, 10, outcome="succeeded"),  # a supervisor died before removing it
        _kept(3, 900.0, 10),  # young and failed: kept for inspection
        _kept(4, None, 0, outcome=None, finished=False),  # running
    ]
    assert worktrees_to_remove(kept, cutoff=500.0, cap_bytes=None) == [1, 2]


def test_the_disk_cap_removes_the_oldest_kept_worktrees_first():
    kept = [_kept(1, 600.0, 50), _kept(2, 700.0, 50), _kept(3, 800.0, 50), _kept(4, None, 0, None, False)]
    assert worktrees_to_remove(kept, cutoff=0.0, cap_bytes=100) == [1]
    assert worktrees_to_remove(kept, cutoff=0.0, cap_bytes=0) == [1, 2, 3]
    assert worktrees_to_remove(kept, cutoff=0.0, cap_bytes=150) == []


@pytest.mark.parametrize(
    ("stat", "text"),
    [
        ((None, None, None), "not recorded yet"),
        ((0, 0, 0), "no changes"),
        ((1, 1, 0), "1 file changed, 1 insertion(+), 0 deletions(-)"),
        ((3, 10, 2), "3 files changed, 10 insertions(+), 2 deletions(-)"),
    ],
)
def test_the_diffstat_reads_as_git_writes_it(stat, text):
    assert diffstat_text(*stat) == text
