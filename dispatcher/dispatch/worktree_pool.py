"""Ready worktrees: a small pool per repository, checked out ahead of time, each used once.

Making an attempt's worktree checks out every file of the repository (seconds on 10,000 files).
The pool moves that off the path from send to worker start: ``fill`` (run beside a worker, once it
has started) checks out up to ``worktree_pool_size`` worktrees of the repository on a detached
``HEAD``; ``take`` (when the next attempt's worktree is made) renames one into the attempt's place
and checks out the attempt's branch at its start (``git checkout -b``), which writes only the
files that differ.
docs/worktrees.md, "A pool of ready worktrees", says it for users.

On disk, under the runtime directory (so no worker may write any of it, core/protected.py)::

    worktree-pool/<key>/repository     the repository's common git directory (what ``key`` hashes)
    worktree-pool/<key>/lock           held (flock) by the one process filling or clearing it
    worktree-pool/<key>/making/<name>  being checked out (only while ``lock`` is held)
    worktree-pool/<key>/ready/<name>   ready to take
    worktree-pool/<key>/trash/<name>   taken for removal

The rules:

- **Taken once, by one.** Taking is ``rename(2)`` of ``ready/<name>`` to the attempt's path: of two
  takers exactly one succeeds, the other sees it gone. Only then is git told where it went
  (``git worktree repair``). Clearing takes an entry the same way (into ``trash/``). An entry is
  never given back: after a worker it is the attempt's worktree, removed as such.
- **Trusted only once checked** (``entry_problem``): its ``.git`` file must still name its own
  git directory in the repository, it must be on a detached ``HEAD``, and ``git status`` (with
  untracked and ignored files, and ctimes) must show nothing: a modified, added or replaced file
  or link means the entry is removed and the attempt makes a fresh worktree instead.
- **A crash leaves nothing unowned.** The attempt's row names its path before the take, so
  reconciliation removes a worktree taken but not yet switched (and ``git worktree prune`` forgets
  it). A ``making/`` entry left by a dead filler, a ``trash/`` entry, and entries of a repository
  that is gone are removed by ``clear`` (the listener's retention, ``prune``, ``uninstall --purge``)
  and reported by ``doctor`` (``leftovers``).
"""

import contextlib
import fcntl
import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from dispatcher.core.logs import get_logger
from dispatcher.core.private_files import ensure_private_dir
from dispatcher.dispatch import git_worktree as g
from dispatcher.dispatch.faults import fault_point

log = get_logger("agent_bridge.dispatch")
POOL_DIR = "worktree-pool"


def pool_root(runtime: Path) -> Path:
    return runtime / POOL_DIR


def repo_key(common_dir: Path) -> str:
    """The pool directory's name for a repository: a hash of its common git directory's path."""
    return hashlib.sha256(os.fsencode(os.path.realpath(common_dir))).hexdigest()[:16]


# -- the rules (pure) ----------------------------------------------------------------------------
def _headers(status: str) -> dict[str, str]:
    records = [r for r in status.split("\0") if r]
    return {r.split(" ")[1]: r.split(" ", 2)[2] for r in records if r.startswith("# ") and r.count(" ") >= 2}


def entry_head(status: str) -> str:
    """The commit a pool entry has checked out, as ``git status --porcelain=v2 --branch`` says."""
    return _headers(status).get("branch.oid", "")


def entry_problem(status: str) -> str | None:
    """Why a pool entry, as ``git status --porcelain=v2 --branch -z`` shows it, may not be used
    (None: it is exactly its commit's tree, on a detached HEAD, with nothing else in it)."""
    records = [r for r in status.split("\0") if r]
    headers = _headers(status)
    if headers.get("branch.head") != "(detached)":
        return "not on a detached HEAD"
    oid = headers.get("branch.oid", "")
    if len(oid) < 40 or any(c not in "0123456789abcdef" for c in oid):
        return "no commit checked out"
    if any(not r.startswith("# ") for r in records):
        return "files differ from its commit (changed, added, ignored or replaced)"
    return None


@dataclass(frozen=True)
class Entry:
    path: Path
    made_at: float  # the entry directory's mtime (set when it was checked out; nothing writes it after)


def entries_to_remove(
    ready: list[Entry], keep: int | None, cutoff: float | None, repository_exists: bool
) -> list[Path]:
    """The ready entries that go (pure): all when the repository is gone or ``keep`` is 0; those
    made at or before ``cutoff``; then the oldest until ``keep`` are left (``keep`` None: no count)."""
    if not repository_exists or keep == 0:
        return sorted(e.path for e in ready)
    newest_first = sorted(ready, key=lambda e: (e.made_at, e.path.name), reverse=True)
    going = [e for e in newest_first if cutoff is not None and e.made_at <= cutoff]
    left = [e for e in newest_first if e not in going]
    if keep is not None:
        going += left[keep:]
    return sorted(e.path for e in going)


# -- on disk -------------------------------------------------------------------------------------
def _ready(key_dir: Path) -> list[Entry]:
    found = []
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for item in os.scandir(key_dir / "ready"):
            with contextlib.suppress(OSError):
                found.append(Entry(Path(item.path), item.stat(follow_symlinks=False).st_mtime))
    return sorted(found, key=lambda e: (e.made_at, e.path.name))


def _names(directory: Path) -> list[Path]:
    try:
        return sorted(Path(item.path) for item in os.scandir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return []


@contextlib.contextmanager
def _locked(key_dir: Path) -> Iterator[bool]:
    """Hold ``key_dir/lock`` (True), or False at once when another process holds it."""
    fd = os.open(key_dir / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def _claim(entry: Path, to: Path) -> bool:
    """Take ``entry`` by renaming it to ``to``: True for exactly one of any number of takers."""
    try:
        entry.rename(to)
    except FileNotFoundError:
        return False  # taken (or cleared) by someone else
    except OSError as exc:  # (``to`` there already, another filesystem: git's own add says it better)
        log.warning("worktree_pool_take_failed", error=type(exc).__name__, errno=exc.errno)
        return False
    return True


def _discard(common_dir: Path | None, path: Path) -> None:
    """Remove a pool entry (or an attempt's worktree made from one) as a plain directory, never
    running git in it, then let git forget it."""
    from dispatcher.dispatch.retention import remove_attempt_dir

    if path.is_symlink():
        path.unlink()
    elif path.exists():
        remove_attempt_dir(path)
    if common_dir is not None and common_dir.is_dir():
        with contextlib.suppress(g.GitFailed):
            g.prune_worktrees(common_dir)


def _repository(key_dir: Path) -> Path | None:
    try:
        return Path((key_dir / "repository").read_text(encoding="utf-8").strip())
    except (OSError, UnicodeDecodeError):
        return None


# -- taking ---------------------------------------------------------------------------------------
def take(runtime: Path, common_dir: Path, path: Path, branch: str, start: str, *, new_branch: bool) -> Path | None:
    """Make ``path`` the attempt's worktree from a ready entry: ``branch`` checked out (made at
    ``start`` when ``new_branch``). Returns its git directory; None when the pool has no usable
    entry (the caller makes a fresh worktree; an unusable one taken is removed)."""
    key_dir = pool_root(runtime) / repo_key(common_dir)
    for entry in _ready(key_dir):
        if not _claim(entry.path, path):
            continue
        fault_point("after_pool_claim")
        try:
            git_dir, head = _adopt(common_dir, entry.path.name, path)
            if new_branch and head == start:  # (nothing to write: the branch is made where it stands)
                g.branch_here(git_dir, branch, start)
            else:
                g.checkout_branch(git_dir, path, branch, start, new_branch=new_branch)
        except (g.GitFailed, OSError) as exc:
            log.warning("worktree_pool_entry_unusable", reason=str(exc)[:300])
            _discard(common_dir, path)
            with contextlib.suppress(g.GitFailed):
                if new_branch and g.branch_head(common_dir, branch) == start:
                    g.delete_branch(common_dir, branch)  # (made by the checkout that then failed: holds nothing)
            return None
        log.info("worktree_from_pool", path=str(path))
        return git_dir
    return None


def _adopt(common_dir: Path, name: str, path: Path) -> tuple[Path, str]:
    """Check a claimed entry at ``path`` (raises GitFailed ``worktree_pool_unusable`` when it is not
    exactly what was made) and tell git where it is now; return its git directory and commit."""
    ours = Path(os.path.realpath(common_dir)) / "worktrees" / name
    try:
        git_dir = g.expected_git_dir(path) if path.is_dir() and not path.is_symlink() else None
    except (OSError, UnicodeDecodeError, g.GitFailed):
        git_dir = None
    # (compared resolved: git may write the path through a link of the repository's; still a
    # regular .git file that names our entry's own git directory, and nothing else)
    if git_dir is None or Path(os.path.realpath(git_dir)) != ours or not g.git_file_intact(path, git_dir):
        raise g.GitFailed("worktree_pool_unusable", f"{path} is not the worktree the pool made (its .git changed)")
    g.repair_worktree(common_dir, path)
    status = g.worktree_status(git_dir, path)
    if (why := entry_problem(status)) is not None:
        raise g.GitFailed("worktree_pool_unusable", f"{path}: {why}")
    return git_dir, entry_head(status)


# -- filling --------------------------------------------------------------------------------------
def fill(runtime: Path, checkout: Path, size: int) -> int:
    """Check out ready worktrees of the repository ``checkout`` is in, at its ``HEAD``, until there
    are ``size``; returns how many were made. Never raises: a pool that cannot be filled is only
    slower (logged). Skipped when another process is filling the same repository's pool."""
    if size <= 0:
        return 0
    try:
        repo = g.find_repo(checkout)
        if repo is None or repo.head is None:
            return 0
        key_dir = pool_root(runtime) / repo_key(repo.common_dir)
        for directory in (pool_root(runtime), key_dir, key_dir / "making", key_dir / "ready"):
            ensure_private_dir(directory, "worktree pool directory")
        with _locked(key_dir) as held:
            return _fill_locked(key_dir, repo.common_dir, repo.head, size) if held else 0
    except (g.GitFailed, OSError) as exc:
        log.warning("worktree_pool_fill_failed", error=type(exc).__name__, detail=str(exc)[:300])
        return 0


def _fill_locked(key_dir: Path, common_dir: Path, head: str, size: int) -> int:
    (key_dir / "repository").write_text(f"{common_dir}\n", encoding="utf-8")
    for left in _names(key_dir / "making"):  # a filler that died: nobody else fills while we hold the lock
        _discard(common_dir, left)
    made = 0
    while len(_ready(key_dir)) < size:
        name = f"p{os.urandom(8).hex()}"
        making, ready = key_dir / "making" / name, key_dir / "ready" / name
        try:
            git_dir = g.add_detached(common_dir, making, head)
            if Path(os.path.realpath(git_dir)) != Path(os.path.realpath(common_dir)) / "worktrees" / name:
                raise g.GitFailed("worktree_failed", f"git named the worktree's directory {git_dir}, not {name}")
            g.move_worktree(common_dir, making, ready)
        except (g.GitFailed, OSError):
            _discard(common_dir, making)
            raise
        made += 1
    if made:
        log.info("worktree_pool_filled", made=made)
    return made


# -- clearing -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Leftover:
    path: Path
    repository: Path | None
    why: str


def leftovers(runtime: Path, keep: int | None = None, cutoff: float | None = None) -> list[Leftover]:
    """What ``clear`` would remove (read-only): entries a dead filler left in ``making/``,
    ``trash/`` entries, and ready entries ``entries_to_remove`` lets go."""
    found: list[Leftover] = []
    for key_dir in _names(pool_root(runtime)):
        if not key_dir.is_dir() or key_dir.is_symlink():
            continue
        repository = _repository(key_dir)
        exists = repository is not None and repository.is_dir()
        with _locked(key_dir) as held:
            if held:  # (when not, a filler is at work: its making/ entry is not a leftover)
                found += [Leftover(p, repository, "left by a filler that died") for p in _names(key_dir / "making")]
        found += [Leftover(p, repository, "taken for removal") for p in _names(key_dir / "trash")]
        why = "its repository is gone" if not exists else "more than the pool keeps, or too old"
        going = entries_to_remove(_ready(key_dir), keep, cutoff, exists)
        found += [Leftover(p, repository, why) for p in going]
    return found


def clear(runtime: Path, keep: int | None = None, cutoff: float | None = None) -> list[Path]:
    """Remove the pool's leftovers (``leftovers``; ``keep=0``: every entry); returns what went."""
    removed: list[Path] = []
    for left in leftovers(runtime, keep, cutoff):
        key_dir = left.path.parent.parent
        common = left.repository if left.repository is not None and left.repository.is_dir() else None
        target = left.path
        if left.path.parent.name == "ready":
            with contextlib.suppress(OSError):
                ensure_private_dir(key_dir / "trash", "worktree pool directory")
            target = key_dir / "trash" / left.path.name
            if not _claim(left.path, target):
                continue  # an attempt took it meanwhile: it is that attempt's now
        try:
            _discard(common, target)
        except OSError as exc:
            log.warning("worktree_pool_clear_failed", error=type(exc).__name__)
            continue
        removed.append(left.path)
    for key_dir in _names(pool_root(runtime)):  # a repository's directory with nothing left in it
        repository = _repository(key_dir)
        if not any(_names(key_dir / sub) for sub in ("making", "ready", "trash")) and not (
            repository is not None and repository.is_dir()
        ):
            from dispatcher.dispatch.retention import remove_attempt_dir

            remove_attempt_dir(key_dir)
    if removed:
        log.info("worktree_pool_cleared", count=len(removed))
    return removed
