"""The pool of ready worktrees (docs/worktrees.md, "A pool of ready worktrees") with real git: a
worktree taken from the pool is the one a fresh ``git worktree add`` would make; two takers never
get the same entry; a deleted or tampered entry is never used; a stale one still yields exactly
the start commit's tree; the user's checkout is never written; and a supervisor killed between
the take and the checkout leaves nothing once reconciliation has run."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from dispatch_harness import PROJECT, attempt, cli, make_launcher, post_task

from dispatcher.dispatch import git_worktree as g
from dispatcher.dispatch import worktree_pool as pool

GIT_ENV = {
    **{k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_AUTHOR_NAME": "User",
    "GIT_AUTHOR_EMAIL": "user@example.org",
    "GIT_COMMITTER_NAME": "User",
    "GIT_COMMITTER_EMAIL": "user@example.org",
}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=GIT_ENV
    ).stdout.strip()


def make_repo(root: Path) -> Path:
    repo = root / "user checkout"
    for i in range(30):
        path = repo / f"d{i % 3}" / f"f{i}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"line {i}\n")
    (repo / ".gitignore").write_text("build/\n")
    (repo / "link").symlink_to("d0/f0.txt")
    git(repo.parent, "init", "-q", "-b", "main", str(repo))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "start")
    return repo


def make_dirty(repo: Path) -> None:
    (repo / "d0" / "f0.txt").write_text("changed, not committed\n")
    (repo / "d1" / "f1.txt").unlink()
    (repo / "untracked.txt").write_text("new\n")
    (repo / "d2" / "f2.txt").write_text("staged\n")
    git(repo, "add", "d2/f2.txt")
    (repo / "build").mkdir()
    (repo / "build" / "ignored.o").write_text("ignored\n")


def checkout_hash(repo: Path) -> str:
    """Every file of the user's checkout (the .git directory aside), its index, HEAD and branches."""
    digest = hashlib.sha256()
    for path in sorted(p for p in repo.rglob("*") if ".git" not in p.relative_to(repo).parts):
        digest.update(str(path.relative_to(repo)).encode())
        if path.is_symlink():
            digest.update(os.readlink(path).encode())
        elif path.is_file():
            digest.update(path.read_bytes())
    for name in ("index", "HEAD"):
        digest.update((repo / ".git" / name).read_bytes())
    theirs = [ref for ref in git(repo, "for-each-ref").splitlines() if "refs/heads/agent-bridge/" not in ref]
    digest.update("\n".join(theirs).encode())  # (the branches of ours the test makes aside)
    return digest.hexdigest()


def listing(worktree: Path) -> list[tuple[str, str]]:
    """What a worker sees in a worktree: each path with its bytes or link target (.git aside)."""
    found = []
    for path in sorted(worktree.rglob("*")):
        rel = path.relative_to(worktree)
        if rel.parts[0] == ".git":
            continue
        if path.is_symlink():
            found.append((str(rel), "-> " + os.readlink(path)))
        elif path.is_file():
            found.append((str(rel), hashlib.sha256(path.read_bytes()).hexdigest()))
        else:
            found.append((str(rel), "dir"))
    return found


def attempt_path(runtime: Path, message_id: int) -> Path:
    path = runtime / "worktrees" / "claude" / str(message_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def ready(runtime: Path) -> list[Path]:
    return sorted(runtime.glob("worktree-pool/*/ready/*"))


def assert_is(worktree: Path, git_dir: Path, branch: str, start: str) -> None:
    """``worktree`` is on ``branch`` at ``start``, with exactly its tree and nothing else."""
    assert g.git("symbolic-ref", "HEAD", git_dir=git_dir).stdout.strip() == f"refs/heads/{branch}"
    assert g.git("rev-parse", "HEAD", git_dir=git_dir).stdout.strip() == start
    status = g.git("status", "--porcelain", "--untracked-files=all", "--ignored", git_dir=git_dir, work_tree=worktree,
                   cwd=worktree).stdout  # fmt: skip
    assert status == ""


@pytest.mark.parametrize("dirty", [False, True], ids=["clean", "dirty"])
def test_a_worktree_from_the_pool_is_the_one_a_fresh_add_makes(tmp_path, dirty):
    repo, runtime = make_repo(tmp_path), tmp_path / "runtime"
    assert pool.fill(runtime, repo, 1) == 1
    if dirty:
        make_dirty(repo)
    before = checkout_hash(repo)
    found = g.find_repo(repo)
    assert found is not None
    start = g.snapshot(found, 1)
    fresh_dir = g.add_worktree(found.common_dir, attempt_path(runtime, 1), "agent-bridge/claude/1", start,
                               new_branch=True)  # fmt: skip
    taken_dir = pool.take(runtime, found.common_dir, attempt_path(runtime, 2), "agent-bridge/claude/2", start,
                          new_branch=True)  # fmt: skip
    assert taken_dir is not None and taken_dir.name.startswith("p")  # (from the pool, not made afresh)
    assert_is(attempt_path(runtime, 1), fresh_dir, "agent-bridge/claude/1", start)
    assert_is(attempt_path(runtime, 2), taken_dir, "agent-bridge/claude/2", start)
    assert listing(attempt_path(runtime, 2)) == listing(attempt_path(runtime, 1))
    assert g.git_file_intact(attempt_path(runtime, 2), taken_dir)
    assert ready(runtime) == []  # used once: never handed out again
    assert checkout_hash(repo) == before  # the user's files, index, HEAD and branches, byte for byte
    assert pool.fill(runtime, repo, 1) == 1 and checkout_hash(repo) == before


def test_a_stale_entry_still_yields_exactly_the_start_commits_tree(tmp_path):
    repo, runtime = make_repo(tmp_path), tmp_path / "runtime"
    pool.fill(runtime, repo, 1)
    # HEAD moves on: files changed, deleted, added, a directory replaced by a file, the link retargeted.
    (repo / "d0" / "f0.txt").write_text("moved on\n")
    shutil.rmtree(repo / "d1")
    (repo / "d1").write_text("now a file\n")
    (repo / "d9").mkdir()
    (repo / "d9" / "new.txt").write_text("new\n")
    (repo / "link").unlink()
    (repo / "link").symlink_to("d9/new.txt")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "later")
    found = g.find_repo(repo)
    assert found is not None
    start = g.snapshot(found, 3)
    taken = pool.take(runtime, found.common_dir, attempt_path(runtime, 3), "agent-bridge/claude/3", start,
                      new_branch=True)  # fmt: skip
    assert taken is not None
    assert_is(attempt_path(runtime, 3), taken, "agent-bridge/claude/3", start)
    fresh = g.add_worktree(found.common_dir, attempt_path(runtime, 4), "agent-bridge/claude/4", start, new_branch=True)
    assert listing(attempt_path(runtime, 3)) == listing(attempt_path(runtime, 4))
    assert fresh.name == "4"


TAKER = """
import sys
from pathlib import Path
from dispatcher.dispatch import worktree_pool as pool
runtime, common, path, branch, start = sys.argv[1:6]
sys.stdin.readline()  # every taker is started first, then all are let go at once
got = pool.take(Path(runtime), Path(common), Path(path), branch, start, new_branch=True)
print(got or "none")
"""


def test_two_takers_never_get_the_same_entry(tmp_path):
    repo, runtime = make_repo(tmp_path), tmp_path / "runtime"
    assert pool.fill(runtime, repo, 2) == 2
    found = g.find_repo(repo)
    assert found is not None
    takers = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                TAKER,
                str(runtime),
                str(found.common_dir),
                str(attempt_path(runtime, 10 + i)),
                f"agent-bridge/claude/{10 + i}",
                str(found.head),
            ],
            cwd=PROJECT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for i in range(5)
    ]
    for taker in takers:
        assert taker.stdin is not None
        taker.stdin.write("go\n")
        taker.stdin.flush()
    got = [taker.communicate(timeout=120)[0].strip().splitlines()[-1] for taker in takers]  # (after the log lines)
    taken = [(i, Path(g_dir)) for i, g_dir in enumerate(got) if g_dir != "none"]
    assert len(taken) == 2 and len({g_dir for _, g_dir in taken}) == 2, got
    for i, git_dir in taken:
        assert_is(attempt_path(runtime, 10 + i), git_dir, f"agent-bridge/claude/{10 + i}", str(found.head))
    assert ready(runtime) == []
    assert sorted(p.name for p in (runtime / "worktrees" / "claude").iterdir()) == sorted(str(10 + i) for i, _ in taken)


def _modify_keeping_size_and_mtime(entry: Path) -> None:
    target = entry / "d0" / "f0.txt"
    st = target.stat()
    target.write_text("line X\n")  # the same size
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))


def _plant_link(entry: Path) -> None:
    (entry / "d0" / "planted").symlink_to("/etc/passwd")


def _plant_ignored(entry: Path) -> None:
    (entry / "build").mkdir()
    (entry / "build" / "evil.o").write_text("x\n")


def _replace_tracked_with_link(entry: Path) -> None:
    (entry / "d1" / "f1.txt").unlink()
    (entry / "d1" / "f1.txt").symlink_to("/etc/passwd")


def _rewrite_git_file(entry: Path) -> None:
    (entry / ".git").write_text("gitdir: /nowhere\n")


def _swap_for_a_link(entry: Path) -> None:
    entry.rename(entry.parent.parent / "moved-away")
    entry.symlink_to(entry.parent.parent / "moved-away")


def _delete(entry: Path) -> None:
    shutil.rmtree(entry)


@pytest.mark.parametrize(
    "tamper",
    [
        _modify_keeping_size_and_mtime,
        _plant_link,
        _plant_ignored,
        _replace_tracked_with_link,
        _rewrite_git_file,
        _swap_for_a_link,
        _delete,
    ],
)
def test_a_deleted_or_tampered_entry_is_never_used(tmp_path, tamper):
    repo, runtime = make_repo(tmp_path), tmp_path / "runtime"
    pool.fill(runtime, repo, 1)
    [entry] = ready(runtime)
    tamper(entry)
    found = g.find_repo(repo)
    assert found is not None
    path = attempt_path(runtime, 5)
    assert pool.take(runtime, found.common_dir, path, "agent-bridge/claude/5", str(found.head), new_branch=True) is None
    assert not path.exists() and not path.is_symlink()  # removed (as a plain directory: git never ran in it)
    assert ready(runtime) == []
    assert git(repo, "branch", "--list", "agent-bridge/*") == ""
    if tamper is _delete:  # (nothing was there to take: git forgets it at the next prune, which each settle runs)
        g.prune_worktrees(found.common_dir)
    listed = git(repo, "worktree", "list", "--porcelain").splitlines()
    assert [line for line in listed if line.startswith("worktree ")] == [f"worktree {repo}"]  # git forgot it
    # The fresh worktree made instead is exactly the commit's tree.
    git_dir = g.add_worktree(found.common_dir, path, "agent-bridge/claude/5", str(found.head), new_branch=True)
    assert_is(path, git_dir, "agent-bridge/claude/5", str(found.head))


def test_clearing_removes_leftovers_and_git_forgets_them(tmp_path):
    repo, runtime = make_repo(tmp_path), tmp_path / "runtime"
    pool.fill(runtime, repo, 3)
    key_dir = ready(runtime)[0].parent.parent
    (key_dir / "making" / "pdead").mkdir()  # a filler that died mid-checkout
    (key_dir / "making" / "pdead" / "half.txt").write_text("x")
    assert {left.path.name for left in pool.leftovers(runtime)} == {"pdead"}
    assert len(pool.leftovers(runtime, keep=1)) == 3  # two beyond the size, and the dead one
    assert len(pool.clear(runtime, keep=1)) == 3
    assert len(ready(runtime)) == 1 and not (key_dir / "making" / "pdead").exists()
    pool.clear(runtime, keep=0)
    assert ready(runtime) == []
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1


# -- through the supervisor -----------------------------------------------------------------------
def use(config_path: Path, launchers: Path, repo: Path, pool_size: int, **env: str) -> None:
    launcher = make_launcher(launchers, "succeed", **env)
    doc = {
        "agents": {
            "claude": {"launcher": str(launcher), "workspace": str(repo), "permissions": {"level": "edit"}},
            "kimi": {"launcher": "launchers/kimi_headless.sh"},
        },
        "worktree_pool_size": pool_size,
    }
    config_path.write_text(json.dumps(doc))


@pytest.mark.both_backends
def test_the_supervisor_takes_from_the_pool_and_refills_it(env, db_path, config_path, launchers, tmp_path):
    repo = make_repo(tmp_path)
    make_dirty(repo)
    before = checkout_hash(repo)
    runtime = Path(env["AGENT_BRIDGE_RUNTIME_DIR"])
    use(config_path, launchers, repo, 1, FAKE_WORKER_WRITE="feature.py=x=1")
    rows = []
    for text in ("first", "second"):
        task = post_task(db_path, text)
        assert cli(env, "dispatch", str(task)).returncode == 0
        rows.append(attempt(db_path, task))
    first, second = rows
    assert first["outcome"] == second["outcome"] == "succeeded", rows
    assert Path(first["worktree_git_dir"]).name == str(first["message_id"])  # the pool was empty: a fresh add
    assert Path(second["worktree_git_dir"]).name.startswith("p")  # filled beside the first worker, taken now
    for row in rows:
        branch = row["worktree_branch"]
        assert git(repo, "show", f"{branch}:feature.py") == "x=1"
        assert git(repo, "show", f"{row['worktree_base']}:untracked.txt") == "new"
        assert git(repo, "rev-parse", f"{row['worktree_base']}^{{tree}}") == git(
            repo, "rev-parse", f"{first['worktree_base']}^{{tree}}"
        )
    assert len([p for p in ready(runtime) if str(repo) in (p.parent.parent / "repository").read_text()]) == 1
    assert checkout_hash(repo) == before


@pytest.mark.both_backends
def test_a_supervisor_killed_between_the_take_and_the_checkout_leaves_nothing(
    env, db_path, config_path, launchers, tmp_path
):
    repo = make_repo(tmp_path)
    runtime = Path(env["AGENT_BRIDGE_RUNTIME_DIR"])
    use(config_path, launchers, repo, 1)
    mine = [p for p in ready(runtime) if str(repo) in (p.parent.parent / "repository").read_text()]
    assert mine == []
    assert pool.fill(runtime, repo, 1) == 1
    task = post_task(db_path, "crash while taking")
    killed = cli({**env, "AGENT_BRIDGE_FAULT_POINT": "after_pool_claim"}, "dispatch", str(task))
    assert killed.returncode == -9
    row = attempt(db_path, task)
    assert Path(row["worktree_path"]).is_dir() and row["worktree_state"] == "planned"
    for _ in range(2):  # the second pass finds nothing to do
        done = cli(env, "listener", "recover", "--agent", "claude")
        assert done.returncode == 0, done.stderr
    row = attempt(db_path, task)
    assert (row["state"], row["worktree_state"]) == ("finished", "removed"), row
    assert not Path(row["worktree_path"]).exists()
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1  # git forgot the taken entry
    assert git(repo, "branch", "--list", "agent-bridge/*") == ""


def test_a_repository_reached_through_a_link_still_gets_its_ready_worktree(tmp_path):
    repo, runtime = make_repo(tmp_path), tmp_path / "runtime"
    link = tmp_path / "link to checkout"
    link.symlink_to(repo)
    assert pool.fill(runtime, link, 1) == 1
    found = g.find_repo(link)
    assert found is not None
    path = attempt_path(runtime, 6)
    taken = pool.take(runtime, found.common_dir, path, "agent-bridge/claude/6", str(found.head), new_branch=True)
    assert taken is not None
    assert_is(path, taken, "agent-bridge/claude/6", str(found.head))
