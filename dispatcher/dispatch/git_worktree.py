"""Every git command the bridge runs: the one place that builds git's argv and environment.

The bridge runs git in the user's repository and in worktrees a worker has written in. Config
can run programs (``core.fsmonitor``, hooks, ``core.pager``), so every command goes through
``git_command``: hooks off, no fsmonitor, no pager or editor, no system or global config, no
inherited ``GIT_*`` variable, no automatic gc (it would leave a process behind), an identity we
choose. In a worktree the git directory and work tree are always the ones recorded when it was
made (``--git-dir``/``--work-tree``), never found through its ``.git`` file, which the worker
could have rewritten. docs/worktrees.md says what each step does and why.
"""

import os
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

GIT_TIMEOUT_SECONDS = 300.0
IDENTITY = ("Agent Bridge", "agent-bridge@localhost")
# -c settings on every command: what the repository's config must not decide for us.
SAFE_CONFIG = (
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.pager=cat",
    "core.editor=true",
    "core.quotePath=false",
    "commit.gpgSign=false",
    "gc.auto=0",
    "maintenance.auto=false",
    "advice.detachedHead=false",
)
# Kept from the caller's environment; everything else (every GIT_* variable above all) is dropped.
_KEPT_ENV = ("PATH", "HOME", "TMPDIR", "SYSTEMROOT")
IN_PROGRESS = ("MERGE_HEAD", "rebase-merge", "rebase-apply", "CHERRY_PICK_HEAD", "REVERT_HEAD", "BISECT_LOG")


class GitFailed(Exception):
    """A git command failed; ``kind`` is an error kind for the attempt or the command's refusal."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


def git_command(
    args: tuple[str, ...] | list[str],
    *,
    git_dir: Path | str | None = None,
    work_tree: Path | str | None = None,
    index_file: Path | None = None,
) -> tuple[list[str], dict[str, str]]:
    """git's argv and environment for ``args``: the one definition of how the bridge runs git."""
    argv = ["git", "--no-pager"]
    for setting in SAFE_CONFIG:
        argv += ["-c", setting]
    if git_dir is not None:
        argv.append(f"--git-dir={git_dir}")
    if work_tree is not None:
        argv.append(f"--work-tree={work_tree}")
    env = {k: os.environ[k] for k in _KEPT_ENV if k in os.environ}
    env.update(
        LC_ALL="C",
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL="/dev/null",
        GIT_TERMINAL_PROMPT="0",
        GIT_OPTIONAL_LOCKS="0",
        GIT_AUTHOR_NAME=IDENTITY[0],
        GIT_AUTHOR_EMAIL=IDENTITY[1],
        GIT_COMMITTER_NAME=IDENTITY[0],
        GIT_COMMITTER_EMAIL=IDENTITY[1],
    )
    if index_file is not None:
        env["GIT_INDEX_FILE"] = str(index_file)
    return [*argv, *args], env


def git(
    *args: str,
    git_dir: Path | str | None = None,
    work_tree: Path | str | None = None,
    cwd: Path | None = None,
    index_file: Path | None = None,
    kind: str = "git_failed",
    ok_codes: tuple[int, ...] = (0,),
) -> subprocess.CompletedProcess[str]:
    """Run one git command (``git_command``); raise GitFailed(``kind``) on an exit code not in ``ok_codes``."""
    argv, env = git_command(args, git_dir=git_dir, work_tree=work_tree, index_file=index_file)
    try:
        done = subprocess.run(  # noqa: S603 - argv from git_command: fixed program, arguments as a list
            argv,
            cwd=cwd or "/",
            env=env,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=GIT_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GitFailed(kind, f"git {args[0]} did not run: {exc}") from None
    if done.returncode not in ok_codes:
        raise GitFailed(kind, f"git {args[0]} exited {done.returncode}: {done.stderr.strip()[:400]}")
    return done


# -- the user's repository ----------------------------------------------------------------------
@dataclass(frozen=True)
class Repo:
    """A workspace inside a git repository, as git describes it."""

    toplevel: Path
    git_dir: Path  # the checkout's own git directory (its index, HEAD)
    common_dir: Path  # objects, refs, config, hooks: shared by every worktree
    branch: str | None  # None: detached HEAD
    head: str | None  # None: no commit yet
    in_progress: str | None  # a merge, rebase, cherry-pick, revert or bisect under way


def find_repo(workspace: Path) -> Repo | None:
    """The repository ``workspace`` is in; None when it is in none. Raises GitFailed
    (``workspace_bare_repository``) for a bare repository or a git directory itself."""
    probe = git("rev-parse", "--is-bare-repository", "--is-inside-work-tree", cwd=workspace, ok_codes=(0, 128))
    if probe.returncode == 128:
        return None
    bare, inside = probe.stdout.split()[:2]
    if bare == "true" or inside != "true":
        raise GitFailed("workspace_bare_repository", f"{workspace} is a bare repository or a git directory")
    top, git_dir, common = git(
        "rev-parse", "--path-format=absolute", "--show-toplevel", "--git-dir", "--git-common-dir", cwd=workspace
    ).stdout.splitlines()[:3]
    branch = git("symbolic-ref", "-q", "--short", "HEAD", cwd=workspace, ok_codes=(0, 1)).stdout.strip() or None
    head = git("rev-parse", "-q", "--verify", "HEAD^{commit}", cwd=workspace, ok_codes=(0, 1)).stdout.strip() or None
    gd = Path(git_dir)
    busy = next((name for name in IN_PROGRESS if (gd / name).exists()), None)
    return Repo(Path(top), gd, Path(common), branch, head, busy)


def repo_refusal(repo: Repo) -> str | None:
    """Why a worktree cannot start from this repository (an error kind), None when it can (pure)."""
    if repo.head is None:
        return "workspace_no_commits"
    if repo.in_progress is not None:
        return "workspace_mid_operation"
    if repo.branch is None:
        return "workspace_detached_head"
    return None


def snapshot(repo: Repo, message_id: int) -> str:
    """A commit of what the user sees: HEAD plus tracked changes and untracked, non-ignored files,
    made through a temporary index (a copy of theirs). Their index and tree are only read.
    HEAD itself when nothing differs."""
    with tempfile.TemporaryDirectory(prefix="agent-bridge-index-") as tmp:
        index = Path(tmp) / "index"
        user_index = repo.git_dir / "index"
        if user_index.is_file():
            index.write_bytes(user_index.read_bytes())
        where = {"git_dir": repo.git_dir, "work_tree": repo.toplevel, "index_file": index}
        git("add", "-A", "--", ".", cwd=repo.toplevel, kind="snapshot_failed", **where)  # type: ignore[arg-type]
        tree = git("write-tree", cwd=repo.toplevel, kind="snapshot_failed", **where).stdout.strip()  # type: ignore[arg-type]
    head_tree = git("rev-parse", f"{repo.head}^{{tree}}", git_dir=repo.common_dir).stdout.strip()
    if tree == head_tree:
        return str(repo.head)
    message = f"agent-bridge: uncommitted changes at the start of task #{message_id}"
    return git("commit-tree", "-p", str(repo.head), "-m", message, tree, git_dir=repo.common_dir).stdout.strip()


# -- one attempt's worktree -----------------------------------------------------------------------
def add_worktree(common_dir: Path, path: Path, branch: str, start: str, *, new_branch: bool) -> Path:
    """Check out ``branch`` (made at ``start`` when ``new_branch``) at ``path``; return the worktree's
    own git directory, read from the ``.git`` file git just wrote (nothing else has run in it yet)."""
    args = ("worktree", "add", "-b", branch, str(path), start) if new_branch else ("worktree", "add", str(path), branch)
    git(*args, git_dir=common_dir, kind="worktree_failed")
    return expected_git_dir(path)


def add_detached(common_dir: Path, path: Path, commit: str) -> Path:
    """A worktree at ``path`` with ``commit`` checked out on a detached HEAD (a pool entry: it holds
    no branch); return its own git directory, read from the ``.git`` file git just wrote."""
    git("worktree", "add", "--detach", str(path), commit, git_dir=common_dir, kind="worktree_failed")
    return expected_git_dir(path)


def move_worktree(common_dir: Path, path: Path, to: Path) -> None:
    git("worktree", "move", str(path), str(to), git_dir=common_dir, kind="worktree_failed")


def repair_worktree(common_dir: Path, path: Path) -> None:
    """Tell git the worktree now lives at ``path`` (after it was renamed there: what ``git worktree
    move`` does after its own rename)."""
    git("worktree", "repair", str(path), git_dir=common_dir, kind="worktree_failed")


def worktree_status(git_dir: Path, path: Path) -> str:
    """``git status --porcelain=v2 --branch -z`` of the worktree, untracked and ignored files
    included, through the git directory and work tree we recorded. ``core.trustctime`` is forced
    on: a file rewritten with its size and mtime put back still shows (nobody can set a ctime)."""
    return git("-c", "core.trustctime=true", "-c", "core.checkStat=default", "status", "--porcelain=v2", "--branch",
               "-z", "--untracked-files=all", "--ignored=matching", git_dir=git_dir, work_tree=path, cwd=path,
               kind="worktree_failed").stdout  # fmt: skip


def checkout_branch(git_dir: Path, path: Path, branch: str, start: str, *, new_branch: bool) -> None:
    """Switch the worktree to ``branch`` (made at ``start`` when ``new_branch``: refused, as ``git
    worktree add -b`` is, when it exists): git writes only the files that differ. No ``-f``: the
    worktree was just found clean (``worktree_status``), and ``-f`` would check every file again;
    should anything differ, git refuses rather than overwrites."""
    args = ("checkout", "-q", "-b", branch, start, "--") if new_branch else ("checkout", "-q", branch, "--")
    git(*args, git_dir=git_dir, work_tree=path, cwd=path, kind="worktree_failed")


def branch_here(git_dir: Path, branch: str, start: str) -> None:
    """``git checkout -b branch`` where the worktree already is at ``start`` and clean: the branch is
    made (refused when it exists: the empty old value) and HEAD names it; no file is looked at."""
    git("update-ref", "-m", f"branch: Created from {start}", f"refs/heads/{branch}", start, "", git_dir=git_dir,
        kind="worktree_failed")  # fmt: skip
    git("symbolic-ref", "HEAD", f"refs/heads/{branch}", git_dir=git_dir, kind="worktree_failed")


def expected_git_dir(path: Path) -> Path:
    text = (path / ".git").read_text(encoding="utf-8").strip()
    if not text.startswith("gitdir: "):
        raise GitFailed("worktree_failed", f"{path}/.git does not name a git directory")
    return Path(text.removeprefix("gitdir: "))


def git_file_intact(path: Path, git_dir: Path) -> bool:
    """The worktree's ``.git`` is still the regular file git wrote, naming ``git_dir``."""
    try:
        st = os.lstat(path / ".git")
        return stat.S_ISREG(st.st_mode) and (path / ".git").read_text(encoding="utf-8").strip() == f"gitdir: {git_dir}"
    except (OSError, UnicodeDecodeError):
        return False


def special_files(path: Path, limit: int = 1000) -> int:
    """FIFOs, sockets and devices in the worktree (never opened: counted with lstat, not followed)."""
    found = 0
    for root, dirs, files in os.walk(path, followlinks=False):
        if root == str(path) and ".git" in dirs:
            dirs.remove(".git")
        for name in files:
            try:
                mode = os.lstat(os.path.join(root, name)).st_mode  # noqa: PTH118 - os.walk gives str
            except OSError:
                continue
            if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
                found += 1
                if found >= limit:
                    return found
    return found


@dataclass(frozen=True)
class Committed:
    head: str
    files: int
    insertions: int
    deletions: int
    symlinks: int  # symbolic links the branch adds or changes since ``base`` (committed as links)


def commit_worktree(git_dir: Path, path: Path, message: str) -> None:
    """Commit whatever is in the worktree, through the git directory and work tree we recorded."""
    where = {"git_dir": git_dir, "work_tree": path}
    git("add", "-A", "--", ".", cwd=path, kind="commit_failed", **where)  # type: ignore[arg-type]
    staged = git("diff", "--cached", "--quiet", "--no-ext-diff", cwd=path, ok_codes=(0, 1), **where)  # type: ignore[arg-type]
    if staged.returncode == 1:
        git("commit", "--no-verify", "--no-gpg-sign", "-q", "-m", message, cwd=path, kind="commit_failed", **where)  # type: ignore[arg-type]


def branch_head(common_dir: Path, branch: str) -> str | None:
    done = git("rev-parse", "-q", "--verify", f"refs/heads/{branch}^{{commit}}", git_dir=common_dir, ok_codes=(0, 1))
    return done.stdout.strip() or None


def diffstat(common_dir: Path, base: str, head: str) -> Committed:
    """Files, insertions and deletions from ``base`` to ``head`` (a binary file counts as a file)."""
    files = insertions = deletions = 0
    numstat = git("diff", "--numstat", "--no-ext-diff", "--no-renames", base, head, git_dir=common_dir).stdout
    for line in numstat.splitlines():
        added, removed, _ = line.split("\t", 2)
        files += 1
        insertions += int(added) if added.isdigit() else 0
        deletions += int(removed) if removed.isdigit() else 0
    raw = git("diff", "--raw", "--no-ext-diff", "--no-renames", base, head, git_dir=common_dir).stdout
    links = sum(1 for line in raw.splitlines() if line.split(" ")[1:2] == ["120000"])
    return Committed(head, files, insertions, deletions, links)


def remove_worktree(common_dir: Path, path: Path, git_dir: Path | None) -> None:
    """Remove the worktree (even with changes), then let git forget any whose directory is gone.
    A worktree whose ``.git`` file was changed is removed as a plain directory: git is never
    pointed at it."""
    if path.is_symlink():
        path.unlink()
    elif path.exists():
        if git_dir is not None and git_file_intact(path, git_dir):
            git("worktree", "remove", "--force", "--force", str(path), git_dir=common_dir, ok_codes=(0, 128))
        if path.exists():  # changed, or not a worktree git knows (any more): ours to remove
            from dispatcher.dispatch.retention import remove_attempt_dir

            remove_attempt_dir(path)
    prune_worktrees(common_dir)


def prune_worktrees(common_dir: Path) -> None:
    git("worktree", "prune", git_dir=common_dir, ok_codes=(0, 128))


def delete_branch(common_dir: Path, branch: str) -> None:
    git("branch", "-D", "--", branch, git_dir=common_dir, ok_codes=(0, 1))


def branches(common_dir: Path, prefix: str) -> dict[str, str]:
    """Branch name -> commit of every branch under ``prefix`` (``agent-bridge/``)."""
    out = git("for-each-ref", "--format=%(refname:short) %(objectname)", f"refs/heads/{prefix}", git_dir=common_dir)
    return dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)


def already_applied(common_dir: Path, origin: str, head: str, into: str) -> bool:
    """Every commit of ``origin..head`` is in ``into``, itself or as an equal patch (``git cherry``)."""
    out = git("cherry", into, head, origin, git_dir=common_dir).stdout.split()
    return all(mark == "-" for mark in out[::2])


def merged(common_dir: Path, branch: str, into: str) -> bool:
    done = git("merge-base", "--is-ancestor", branch, into, git_dir=common_dir, ok_codes=(0, 1, 128))
    return done.returncode == 0


def diff_text(common_dir: Path, base: str, head: str) -> str:
    return git("diff", "--no-ext-diff", "--no-color", "--stat", "-p", base, head, git_dir=common_dir).stdout


# -- bringing a result into the user's branch -----------------------------------------------------
def dirty(repo: Repo) -> bool:
    """Tracked changes (staged or not) in the user's checkout; untracked files do not count."""
    out = git("status", "--porcelain", "--untracked-files=no", cwd=repo.toplevel, git_dir=repo.git_dir,
              work_tree=repo.toplevel).stdout  # fmt: skip
    return bool(out.strip())


def applies_cleanly(repo: Repo, origin: str, head: str) -> bool:
    """Whether ``origin..head`` applies to the user's tree as a patch: checked without writing
    anything of theirs (``git apply --check``), so a plain conflict never touches their checkout."""
    patch = git("diff", "--binary", "--no-ext-diff", "--full-index", origin, head, git_dir=repo.common_dir).stdout
    with tempfile.NamedTemporaryFile("w", prefix="agent-bridge-apply-", suffix=".patch") as fh:
        fh.write(patch)
        fh.flush()
        done = git("apply", "--check", fh.name, git_dir=repo.git_dir, work_tree=repo.toplevel, cwd=repo.toplevel,
                   ok_codes=(0, 1, 128))  # fmt: skip
    return done.returncode == 0


def cherry_pick(repo: Repo, origin: str, head: str) -> None:
    """Apply ``origin..head`` onto the user's current branch; on any failure abort, leaving their
    branch, index and tree as they were, and raise GitFailed(``apply_conflict``)."""
    where = {"git_dir": repo.git_dir, "work_tree": repo.toplevel, "cwd": repo.toplevel}
    try:
        git("cherry-pick", "--allow-empty", "--keep-redundant-commits", f"{origin}..{head}", kind="apply_conflict",
            **where)  # type: ignore[arg-type]  # fmt: skip
    except GitFailed:
        if (repo.git_dir / "CHERRY_PICK_HEAD").exists() or (repo.git_dir / "sequencer").exists():
            git("cherry-pick", "--abort", ok_codes=(0, 128), **where)  # type: ignore[arg-type]
        raise
