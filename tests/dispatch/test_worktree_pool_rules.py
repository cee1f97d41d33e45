"""The worktree pool's rules, one case each (pure: no git runs here): when a ready entry may be
used, and which entries clearing removes (docs/worktrees.md, "A pool of ready worktrees")."""

from pathlib import Path

import pytest

from dispatcher.dispatch.worktree_pool import Entry, entries_to_remove, entry_head, entry_problem, repo_key

OID = "0123456789abcdef0123456789abcdef01234567"
CLEAN = f"# branch.oid {OID}\0# branch.head (detached)\0"


@pytest.mark.parametrize(
    ("status", "problem"),
    [
        (CLEAN, None),
        (f"# branch.oid {OID}\0# branch.head main\0", "not on a detached HEAD"),
        ("# branch.oid (initial)\0# branch.head (detached)\0", "no commit checked out"),
        (CLEAN + "1 .M N... 100644 100644 100644 a b app.py\0", "files differ"),  # a tracked file changed
        (CLEAN + "? planted-link\0", "files differ"),  # an untracked file or link planted
        (CLEAN + "! build/out.o\0", "files differ"),  # an ignored file planted
        (CLEAN + "1 T. N... 100644 120000 120000 a b app.py\0", "files differ"),  # a file made a link
        ("", "not on a detached HEAD"),
    ],
)
def test_when_a_ready_entry_may_be_used(status, problem):
    found = entry_problem(status)
    assert (found is None) if problem is None else (found is not None and found.startswith(problem))


def test_the_commit_a_ready_entry_has_checked_out():
    assert entry_head(CLEAN) == OID
    assert entry_head("# branch.head (detached)\0") == ""


def _entries(*ages: float) -> list[Entry]:
    return [Entry(Path(f"/pool/k/ready/p{i}"), made_at) for i, made_at in enumerate(ages)]


@pytest.mark.parametrize(
    ("ages", "keep", "cutoff", "exists", "going"),
    [
        ((10.0, 20.0), 2, None, True, []),
        ((10.0, 20.0, 30.0), 1, None, True, ["p0", "p1"]),  # beyond the size: the oldest go
        ((10.0, 20.0), 0, None, True, ["p0", "p1"]),  # the pool is off: all go
        ((10.0, 20.0), 2, 15.0, True, ["p0"]),  # made at or before the cutoff
        ((10.0, 20.0), None, 10.0, True, ["p0"]),  # prune: no count, only age
        ((10.0, 20.0), None, None, True, []),
        ((10.0, 20.0), 2, None, False, ["p0", "p1"]),  # the repository is gone
    ],
)
def test_which_ready_entries_clearing_removes(ages, keep, cutoff, exists, going):
    removed = entries_to_remove(_entries(*ages), keep, cutoff, exists)
    assert [p.name for p in removed] == going


def test_each_repository_has_its_own_pool_directory(tmp_path):
    one, two = tmp_path / "a" / ".git", tmp_path / "b" / ".git"
    assert repo_key(one) == repo_key(one) != repo_key(two)
    assert len(repo_key(one)) == 16
