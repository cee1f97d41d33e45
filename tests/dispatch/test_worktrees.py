"""A git worktree per attempt (docs/worktrees.md), end to end with real git and real processes:
``agent-bridge dispatch`` runs the supervisor, the fake worker edits its workspace, and the user's
checkout (a path with spaces) is checked byte for byte before and after."""

import hashlib
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from dispatch_harness import attempt, cli, make_launcher, post_task, query

pytestmark = pytest.mark.both_backends

PROVEN_ON_POSTGRES = pytest.mark.postgres_proven_by(
    "test_a_worker_edits_its_worktree_and_the_supervisor_commits_it",
    "an attempt's worktree recorded and committed on PostgreSQL (and test_an_agents_own_role_records_its_worktrees through an agent's own role); the rest is git's side and the worktree rules, tested on both backends in tests/store",
)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=_git_env()
    ).stdout.strip()


def _git_env() -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_AUTHOR_NAME": "User",
        "GIT_AUTHOR_EMAIL": "user@example.org",
        "GIT_COMMITTER_NAME": "User",
        "GIT_COMMITTER_EMAIL": "user@example.org",
    }


def make_repo(root: Path, name: str = "user checkout") -> Path:
    repo = root / name
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "app.py").write_text("print('hello')\n")
    (repo / ".gitignore").write_text("build/\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "start")
    return repo


def attempt_worktrees(repo: Path) -> list[str]:
    """The repository's worktrees other than the user's checkout and the pool's ready ones
    (docs/worktrees.md, "A pool of ready worktrees": those stay, by design)."""
    listed = [line.removeprefix("worktree ") for line in git(repo, "worktree", "list", "--porcelain").splitlines()]
    return [p for p in listed[1:] if p.startswith("/") and "/worktree-pool/" not in p]


def checkout_hash(repo: Path) -> str:
    """The user's checkout as bytes: every file of the tree (the .git directory aside), the index, HEAD and refs."""
    digest = hashlib.sha256()
    for path in sorted(p for p in repo.rglob("*") if ".git" not in p.relative_to(repo).parts):
        digest.update(str(path.relative_to(repo)).encode())
        if path.is_file() and not path.is_symlink():
            digest.update(path.read_bytes())
    for name in ("index", "HEAD"):
        digest.update((repo / ".git" / name).read_bytes())
    digest.update(git(repo, "for-each-ref", "refs/heads/main").encode())
    return digest.hexdigest()


def use(config_path: Path, launchers: Path, repo: Path, *, isolation: str = "auto", level: str = "edit", **env):
    launcher = make_launcher(launchers, "succeed", **env)
    doc = {
        "agents": {
            "claude": {
                "launcher": str(launcher),
                "workspace": str(repo),
                "permissions": {"level": level},
                "isolation": isolation,
            },
            "kimi": {"launcher": "launchers/kimi_headless.sh"},
        }
    }
    config_path.write_text(json.dumps(doc))


def dispatched(env: dict, db_path, text: str = "change app.py") -> tuple[int, dict]:
    task = post_task(db_path, text)
    cli(env, "dispatch", str(task))
    return task, attempt(db_path, task)


def test_a_worker_edits_its_worktree_and_the_supervisor_commits_it(env, db_path, config_path, launchers, tmp_path):
    repo = make_repo(tmp_path)
    (repo / "app.py").write_text("print('hello, uncommitted')\n")  # what the user sees, not committed
    (repo / "notes.txt").write_text("untracked\n")
    before = checkout_hash(repo)
    use(config_path, launchers, repo, FAKE_WORKER_WRITE="feature.py=x=1")
    task, row = dispatched(env, db_path, "secret task text")
    assert row["outcome"] == "succeeded", row
    assert checkout_hash(repo) == before
    branch = f"agent-bridge/claude/{task}"
    assert row["worktree_branch"] == branch and row["worktree_state"] == "removed"
    assert (row["worktree_files"], row["worktree_insertions"], row["worktree_deletions"]) == (1, 1, 0)
    assert row["worktree_findings"] == "none"
    assert not Path(row["worktree_path"]).exists()
    # The worker started from what the user saw: the snapshot holds their uncommitted edit and file.
    assert git(repo, "show", f"{row['worktree_base']}:app.py") == "print('hello, uncommitted')"
    assert git(repo, "show", f"{row['worktree_base']}:notes.txt") == "untracked"
    assert git(repo, "rev-parse", f"{row['worktree_base']}~1") == git(repo, "rev-parse", "main")
    # One commit by the supervisor on top of it, naming the agent and task id, never the text.
    log = git(repo, "log", "--format=%an <%ae>|%s", f"{row['worktree_base']}..{branch}").splitlines()
    assert log == [f"Agent Bridge <agent-bridge@localhost>|agent-bridge: claude task #{task}"]
    assert git(repo, "show", f"{branch}:feature.py") == "x=1"
    assert attempt_worktrees(repo) == []
    shown = cli(env, "show", str(task))
    assert "1 file changed, 1 insertion(+), 0 deletions(-)" in shown.stdout and branch in shown.stdout
    top = cli({**env, "COLUMNS": "300"}, "top", "--once")
    assert branch in top.stdout and "1 file changed" in top.stdout, top.stdout


@pytest.mark.store_agnostic(
    "the refusal comes before any store write beyond the attempt row both backends record elsewhere"
)
def test_isolation_worktree_on_a_workspace_outside_git_fails_and_runs_nothing(
    env, db_path, config_path, launchers, tmp_path
):
    plain = tmp_path / "not a repo"
    plain.mkdir()
    launches = tmp_path / "launches"
    use(config_path, launchers, plain, isolation="worktree", FAKE_WORKER_LAUNCHES=str(launches))
    _, row = dispatched(env, db_path)
    assert (row["outcome"], row["error_kind"]) == ("failed", "workspace_not_git")
    assert not launches.exists() and list(plain.iterdir()) == []
    report = json.loads(cli(env, "doctor", "--json").stdout)["findings"]
    refused = [f for f in report if f["code"] == "isolation_refused"]
    assert (
        len(refused) == 1 and refused[0]["message"].startswith("workspace_not_git: ") and refused[0]["level"] == "error"
    )


@pytest.mark.store_agnostic("git's refusals; the attempt's failure row is the same on both backends")
@pytest.mark.parametrize("case", ["mid_merge", "detached", "bare", "no_commits"])
def test_a_repository_that_cannot_be_branched_gets_one_clear_error(
    env, db_path, config_path, launchers, tmp_path, case
):
    repo = make_repo(tmp_path)
    expected = {
        "mid_merge": "workspace_mid_operation",
        "detached": "workspace_detached_head",
        "bare": "workspace_bare_repository",
        "no_commits": "workspace_no_commits",
    }[case]
    if case == "mid_merge":
        git(repo, "checkout", "-q", "-b", "other")
        (repo / "app.py").write_text("print('other')\n")
        git(repo, "commit", "-qam", "other")
        git(repo, "checkout", "-q", "main")
        (repo / "app.py").write_text("print('main')\n")
        git(repo, "commit", "-qam", "main")
        subprocess.run(["git", "-C", str(repo), "merge", "other"], capture_output=True, env=_git_env(), check=False)
    elif case == "detached":
        git(repo, "checkout", "-q", "--detach")
    elif case == "bare":
        bare = tmp_path / "bare.git"
        git(tmp_path, "clone", "-q", "--bare", str(repo), str(bare))
        repo = bare
    else:
        repo = tmp_path / "empty"
        repo.mkdir()
        git(repo, "init", "-q")
    before = sorted(str(p) for p in repo.rglob("*"))
    launches = tmp_path / "launches"
    use(config_path, launchers, repo, FAKE_WORKER_LAUNCHES=str(launches))
    task, row = dispatched(env, db_path)
    assert (row["outcome"], row["error_kind"]) == ("failed", expected)
    assert not launches.exists() and sorted(str(p) for p in repo.rglob("*")) == before
    notice = query(db_path, "SELECT text FROM messages WHERE reply_to = ? AND kind = 'notice'", (task,))
    assert expected in notice[0][0]


@PROVEN_ON_POSTGRES
def test_a_hostile_worker_cannot_make_the_supervisor_follow_what_it_planted(
    env, db_path, config_path, launchers, tmp_path
):
    repo = make_repo(tmp_path)
    before = checkout_hash(repo)
    use(config_path, launchers, repo, FAKE_WORKER_WRITE="feature.py=x=2", FAKE_WORKER_TAMPER="git_file,symlink,fifo")
    task, row = dispatched(env, db_path)
    assert row["outcome"] == "succeeded"
    assert set(row["worktree_findings"].split(",")) == {"git_file_changed", "special_files", "symlinks"}
    evil = Path(env["AGENT_BRIDGE_RUNTIME_DIR"]) / "attempts" / str(task) / "evil"
    assert evil.is_dir() and not (evil / "fsmonitor-ran").exists()
    branch = row["worktree_branch"]
    assert git(repo, "show", f"{branch}:feature.py") == "x=2"
    assert git(repo, "ls-tree", branch, "escape").startswith("120000")  # committed as a link, never followed
    assert "pipe" not in git(repo, "ls-tree", "--name-only", branch)
    assert not Path(row["worktree_path"]).exists() and checkout_hash(repo) == before
    assert (evil.parent / "worker.log").is_file()  # removing the worktree did not follow the link
    assert attempt_worktrees(repo) == []


@pytest.mark.store_agnostic("git's side of a deleted worktree")
def test_a_worktree_deleted_under_its_attempt_is_reported_and_git_forgets_it(
    env, db_path, config_path, launchers, tmp_path
):
    repo = make_repo(tmp_path)
    seen = tmp_path / "seen"
    use(config_path, launchers, repo, FAKE_WORKER_TAMPER="rm_workspace", FAKE_WORKER_ENV_FILE=str(seen))
    _, row = dispatched(env, db_path)
    assert seen.read_text() == str(repo / ".git")  # for the permission plan's read-only rule
    assert row["worktree_findings"] == "worktree_missing" and row["worktree_state"] == "removed"
    assert attempt_worktrees(repo) == []


@pytest.mark.store_agnostic("where the worker runs is decided from config and git, not the store")
def test_isolation_none_and_read_levels_run_in_the_workspace(env, db_path, config_path, launchers, tmp_path):
    repo = make_repo(tmp_path)
    for isolation, level in (("none", "edit"), ("auto", "read")):
        use(config_path, launchers, repo, isolation=isolation, level=level)
        _, row = dispatched(env, db_path)
        assert row["outcome"] == "succeeded" and row["isolation"] is None and row["worktree_path"] is None


@pytest.mark.store_agnostic("apply is git's cherry-pick in the user's checkout")
def test_apply_cherry_picks_cleanly_refuses_a_dirty_tree_and_leaves_a_conflict_untouched(
    env, db_path, config_path, launchers, tmp_path
):
    repo = make_repo(tmp_path)
    use(config_path, launchers, repo, FAKE_WORKER_WRITE="app.py=agent")
    task, row = dispatched(env, db_path)
    assert "+agent" in cli(env, "diff", str(task)).stdout
    # A dirty tree is refused, and stays as it was.
    (repo / "app.py").write_text("print('mine, uncommitted')\n")
    before = checkout_hash(repo)
    refused = cli(env, "apply", str(task))
    assert refused.returncode != 0 and "apply_refused" in refused.stderr and checkout_hash(repo) == before
    # A conflict (the user changed the same line and committed it) is reported, nothing half-done.
    git(repo, "commit", "-qam", "mine")
    before = checkout_hash(repo)
    conflict = cli(env, "apply", str(task))
    assert conflict.returncode != 0 and "apply_conflict" in conflict.stderr
    assert checkout_hash(repo) == before and git(repo, "status", "--porcelain") == ""
    assert not (repo / ".git" / "CHERRY_PICK_HEAD").exists()
    # A clean apply: back to where the worker started, then apply.
    git(repo, "reset", "-q", "--hard", "HEAD~1")
    applied = cli(env, "apply", str(task))
    assert applied.returncode == 0, applied.stderr
    assert (repo / "app.py").read_text() == "agent"
    assert git(repo, "log", "-1", "--format=%s") == f"agent-bridge: claude task #{task}"
    assert "nothing to apply" in cli(env, "apply", str(task)).stdout
    # discard: the branch goes, and the row says so.
    done = cli(env, "discard", str(task))
    assert done.returncode == 0, done.stderr
    assert git(repo, "branch", "--list", "agent-bridge/*") == ""
    assert attempt(db_path, task)["worktree_branch"] is None


@PROVEN_ON_POSTGRES
def test_a_failed_attempt_keeps_its_worktree_until_discarded(env, db_path, config_path, launchers, tmp_path):
    repo = make_repo(tmp_path)
    task, row = _failed_attempt(env, db_path, config_path, launchers, repo)
    assert row["outcome"] == "failed" and row["worktree_state"] == "present"
    assert (Path(row["worktree_path"]) / "half.py").read_text() == "1"
    assert row["worktree_files"] == 1  # committed all the same: the branch keeps what it did
    shown = cli(env, "show", str(task)).stdout
    assert "worktree kept on disk" in shown
    cli(env, "discard", str(task))
    after = attempt(db_path, task)
    assert after["worktree_state"] == "removed" and not Path(row["worktree_path"]).exists()
    assert attempt_worktrees(repo) == []


@pytest.mark.store_agnostic(
    "the branch a follow-up continues is git's; both backends record worktrees in the other tests"
)
def test_a_follow_up_turn_continues_on_the_same_branch(env, db_path, config_path, launchers, tmp_path):
    from dispatcher.bridge.messages import send_message
    from dispatcher.store import open_store

    repo = make_repo(tmp_path)
    use(config_path, launchers, repo, FAKE_WORKER_WRITE="turn.txt=first")
    first = post_task(db_path, "first turn", conversation=True)
    cli(env, "dispatch", str(first))
    one = attempt(db_path, first)
    assert one["outcome"] == "succeeded"
    result = query(db_path, "SELECT id FROM messages WHERE reply_to = ? AND kind = 'result'", (first,))[0][0]
    conn = open_store(db_path)
    try:
        second = send_message(
            conn, sender="kimi", recipient="claude", kind="task", reply_to=result, text="again",
            agents={"kimi", "claude"},
        )["id"]  # fmt: skip
    finally:
        conn.close()
    use(config_path, launchers, repo, FAKE_WORKER_WRITE="turn.txt=second")
    cli(env, "dispatch", str(second))
    two = attempt(db_path, second)
    assert two["outcome"] == "succeeded", two
    assert two["worktree_branch"] == one["worktree_branch"] == f"agent-bridge/claude/{first}"
    assert (two["worktree_base"], two["worktree_origin"]) == (one["worktree_head"], one["worktree_origin"])
    subjects = git(repo, "log", "--format=%s", f"{one['worktree_origin']}..{two['worktree_branch']}").splitlines()
    assert subjects == [f"agent-bridge: claude task #{second}", f"agent-bridge: claude task #{first}"]
    assert git(repo, "show", f"{two['worktree_branch']}:turn.txt") == "second"


@PROVEN_ON_POSTGRES
def test_kill_9_of_a_supervisor_mid_run_is_settled_with_its_worktree_once(
    env, db_path, config_path, launchers, tmp_path
):
    import signal
    import sys

    from dispatch_harness import PROJECT, tree_of, wait_until

    repo = make_repo(tmp_path)
    release = tmp_path / "release"
    use(config_path, launchers, repo, FAKE_WORKER_WRITE="late.txt=kept", FAKE_WORKER_RELEASE_FILE=str(release),
        FAKE_WORKER_DELAY="120")  # fmt: skip
    # The launcher's mode: claim, wait for the release file, then answer.
    (launchers / "launch_succeed.sh").write_text(
        (launchers / "launch_succeed.sh")
        .read_text()
        .replace("FAKE_WORKER_MODE=succeed", "FAKE_WORKER_MODE=claim_and_wait")
    )
    task = post_task(db_path, "survive your supervisor")
    supervisor = subprocess.Popen(
        [sys.executable, "-m", "dispatcher", "dispatch", str(task)], cwd=PROJECT, env={**os.environ, **env},
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    running = wait_until(lambda: (a := attempt(db_path, task)) and a["state"] == "spawned" and a, what="worker spawned")
    wait_until(lambda: (Path(running["worktree_path"]) / "late.txt").exists(), what="the worker's edit")
    supervisor.send_signal(signal.SIGKILL)
    supervisor.wait(30)
    release.write_text("go")
    wait_until(lambda: not tree_of(running["worker_token"]), what="the orphaned worker to end")
    for _ in range(2):  # twice: the second pass finds nothing to do
        done = cli(env, "listener", "recover", "--agent", "claude")
        assert done.returncode == 0, done.stderr
    row = attempt(db_path, task)
    assert (row["state"], row["outcome"], row["worktree_state"]) == ("finished", "succeeded", "removed")
    assert not Path(row["worktree_path"]).exists()
    log = git(repo, "log", "--format=%s", f"{row['worktree_base']}..{row['worktree_branch']}").splitlines()
    assert log == [f"agent-bridge: claude task #{task}"]
    assert attempt_worktrees(repo) == []


@PROVEN_ON_POSTGRES
def test_doctor_reports_what_no_attempt_owns_and_purge_removes_ours(env, launchers, tmp_path):
    from register_harness import register_env

    from dispatcher.core.locations import is_postgres_url

    # A store, runtime and HOME of its own: uninstall --purge deletes the first two and edits the CLIs' files.
    own = tmp_path / "bridge"
    env = {
        **register_env(tmp_path),
        **env,
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path / "home"),
        "AGENT_BRIDGE_RUNTIME_DIR": str(own / "runtime"),
        "AGENT_BRIDGE_CONFIG": str(own / "config.json"),
    }
    if not is_postgres_url(env["AGENT_BRIDGE_DB"]):
        env["AGENT_BRIDGE_DB"] = str(own / "state" / "bridge.db")
    own.mkdir()
    db_path, config_path = env["AGENT_BRIDGE_DB"], Path(env["AGENT_BRIDGE_CONFIG"])
    repo = make_repo(tmp_path)
    use(config_path, launchers, repo, FAKE_WORKER_WRITE="kept.txt=1")
    task, _ = dispatched(env, db_path)
    git(repo, "branch", "agent-bridge/claude/999999")  # a branch of ours that no attempt owns
    stray = Path(env["AGENT_BRIDGE_RUNTIME_DIR"]) / "worktrees" / "claude" / "888888"
    stray.mkdir(parents=True)
    (stray / "big").write_bytes(b"x" * 4096)
    report = cli(env, "doctor", "--json")
    findings = {(f["code"], f["message"]) for f in json.loads(report.stdout)["findings"]}
    codes = [code for code, _ in findings]
    assert codes.count("orphan_branch") == 1 and codes.count("orphan_worktree") == 1, findings
    assert any("agent-bridge/claude/999999" in m for c, m in findings if c == "orphan_branch")
    assert any(str(stray) in m and "4 KiB" in m for c, m in findings if c == "orphan_worktree")
    assert not re.search(rf"agent-bridge/claude/{task}\b", report.stdout)  # (a prefix of 999999 when task is 9)
    git(repo, "checkout", "-q", "-b", "elsewhere")
    purged = cli(env, "uninstall", "--purge")
    assert purged.returncode == 0, purged.stderr
    assert f"deleting unmerged branch agent-bridge/claude/{task}" in purged.stdout
    assert "unmerged branch agent-bridge/claude/999999" not in purged.stdout  # (it is in main)
    assert git(repo, "branch", "--list", "agent-bridge/*") == ""
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1


@pytest.mark.store_agnostic("git's side: no commit, no branch")
def test_a_worker_that_changes_nothing_leaves_no_branch(env, db_path, config_path, launchers, tmp_path):
    repo = make_repo(tmp_path)
    use(config_path, launchers, repo)
    _, row = dispatched(env, db_path)
    assert row["outcome"] == "succeeded" and row["worktree_files"] == 0 and row["worktree_branch"] is None
    assert git(repo, "branch", "--list", "agent-bridge/*") == ""


def _failed_attempt(env, db_path, config_path, launchers, repo) -> tuple[int, dict]:
    launcher = make_launcher(launchers, "crash", FAKE_WORKER_WRITE="half.py=1")
    doc = json.loads(config_path.read_text())
    claude = {"launcher": str(launcher), "workspace": str(repo), "permissions": {"level": "edit"}}
    config_path.write_text(json.dumps({**doc, "agents": {**doc["agents"], "claude": claude}}))
    return dispatched(env, db_path)


@PROVEN_ON_POSTGRES
def test_retention_and_the_disk_cap_remove_kept_worktrees_and_keep_their_branches(
    env, db_path, config_path, launchers, tmp_path
):
    from dispatcher.core import clock
    from dispatcher.dispatch.worktree_retention import prune_kept_worktrees
    from dispatcher.store import open_store

    repo = make_repo(tmp_path)
    task, row = _failed_attempt(env, db_path, config_path, launchers, repo)
    assert row["worktree_state"] == "present"
    conn = open_store(db_path)
    try:
        assert task not in prune_kept_worktrees(conn, "claude", clock.now(), 7, None)  # young, no cap: kept
        assert task in prune_kept_worktrees(conn, "claude", clock.now(), 7, 0)  # over a cap of 0 MB: removed
    finally:
        conn.close()
    after = attempt(db_path, task)
    assert after["worktree_state"] == "removed" and not Path(row["worktree_path"]).exists()
    assert git(repo, "show", f"{row['worktree_branch']}:half.py") == "1"  # the branch keeps the work
    assert attempt_worktrees(repo) == []


@PROVEN_ON_POSTGRES
def test_prune_removes_kept_worktrees_before_their_attempts(env, db_path, config_path, launchers, tmp_path):
    import time

    from dispatch_harness import wait_until

    repo = make_repo(tmp_path)
    task, row = _failed_attempt(env, db_path, config_path, launchers, repo)
    assert row["worktree_state"] == "present"
    wait_until(lambda: time.time() > row["finished_at"] + 1.5, what="the attempt to be older than 1 s")
    done = cli(env, "prune", "--older-than", "1s")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["worktrees"] >= 1
    assert not Path(row["worktree_path"]).exists()
    assert attempt_worktrees(repo) == []


def test_an_agents_own_role_records_its_worktrees(env, db_path, config_path, launchers, tmp_path, request):
    """On PostgreSQL with per-agent roles, the supervisor (and `discard`) write the worktree columns
    under the agent's own role: the row policies grant exactly those columns (``store.roles``)."""
    from dispatcher.core.locations import is_postgres_url

    if not is_postgres_url(str(db_path)):
        pytest.skip("per-agent database roles are PostgreSQL's")
    as_claude = {**env, "AGENT_BRIDGE_DB": request.getfixturevalue("agent_role")(str(db_path), "claude")}
    repo = make_repo(tmp_path)
    use(config_path, launchers, repo, FAKE_WORKER_WRITE="feature.py=x=1")
    task, row = dispatched(as_claude, db_path)
    assert (row["outcome"], row["worktree_state"], row["worktree_files"]) == ("succeeded", "removed", 1), row
    assert row["worktree_branch"] == f"agent-bridge/claude/{task}" and row["worktree_removed_at"] is not None
    use(config_path, launchers, repo)  # changes nothing: its branch is deleted and forgotten
    _, row = dispatched(as_claude, db_path)
    assert (row["outcome"], row["worktree_files"], row["worktree_branch"]) == ("succeeded", 0, None), row
    task, row = _failed_attempt(as_claude, db_path, config_path, launchers, repo)
    assert (row["outcome"], row["worktree_state"]) == ("failed", "present"), row
    discarded = cli(as_claude, "discard", str(task))
    assert discarded.returncode == 0, discarded.stderr
    assert attempt(db_path, task)["worktree_state"] == "removed"


@PROVEN_ON_POSTGRES
def test_a_worktree_path_moved_in_the_store_is_never_removed_or_committed_from(
    env, db_path, config_path, launchers, tmp_path
):
    """On PostgreSQL an agent's role may update its attempts' worktree columns (the supervisor
    writes them under that role), and so may its worker's server: a path moved to another of the
    user's directories is never what the commit, retention or discard acts on."""
    from dispatcher.dispatch.isolation import close_worktree, drop_worktree
    from dispatcher.store import open_store, write_transaction

    repo = make_repo(tmp_path)
    task, row = _failed_attempt(env, db_path, config_path, launchers, repo)
    victim = tmp_path / "the user's own work"
    victim.mkdir()
    (victim / "keep.txt").write_text("mine")
    conn = open_store(db_path)
    try:
        with write_transaction(conn):
            conn.execute(
                "UPDATE dispatch_attempts SET worktree_path = ?, worktree_findings = NULL WHERE message_id = ?",
                (str(victim), task),
            )
        close_worktree(conn, task)  # a commit still to make: not from there
        drop_worktree(conn, attempt(db_path, task), branch="delete")  # what retention and discard call
    finally:
        conn.close()
    assert (victim / "keep.txt").read_text() == "mine" and sorted(p.name for p in victim.iterdir()) == ["keep.txt"]
    moved = attempt(db_path, task)
    assert (moved["worktree_findings"], moved["worktree_state"]) == ("worktree_path_moved", "present"), moved
    assert Path(row["worktree_path"]).is_dir()  # ours is left too: the row no longer names it
    assert git(repo, "branch", "--list", row["worktree_branch"])  # and its branch is not deleted
