"""An attempt's worktree result as people read it: the one wording of a diffstat, and the fields
``show``, ``get_message``, ``listener status`` and ``top`` print (docs/worktrees.md)."""

from collections.abc import Mapping
from typing import Any, Protocol

WORKTREE_FIELDS = (
    "worktree_branch",
    "worktree_base",
    "worktree_head",
    "worktree_files",
    "worktree_insertions",
    "worktree_deletions",
    "worktree_findings",
    "worktree_state",
)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def diffstat_text(files: int | None, insertions: int | None, deletions: int | None) -> str:
    """git's own shortstat wording; "not recorded yet" before the supervisor committed."""
    if files is None:
        return "not recorded yet"
    if files == 0:
        return "no changes"
    return (
        f"{_plural(files, 'file')} changed, {_plural(insertions or 0, 'insertion')}(+), "
        f"{_plural(deletions or 0, 'deletion')}(-)"
    )


class RowLike(Protocol):
    def __getitem__(self, key: str, /) -> Any: ...


def worktree_summary(row: RowLike) -> dict[str, Any] | None:
    """The worktree part of an attempt row; None for an attempt without isolation."""
    if row["worktree_state"] is None:
        return None
    findings = row["worktree_findings"]
    return {
        "branch": row["worktree_branch"],
        "base": row["worktree_base"],
        "head": row["worktree_head"],
        "files": row["worktree_files"],
        "insertions": row["worktree_insertions"],
        "deletions": row["worktree_deletions"],
        "diffstat": diffstat_text(row["worktree_files"], row["worktree_insertions"], row["worktree_deletions"]),
        "findings": [] if findings in (None, "none") else findings.split(","),
        "on_disk": row["worktree_state"] != "removed",
    }


def worktree_line(summary: Mapping[str, Any]) -> str:
    """One line: branch, commits and diffstat, and what the supervisor found."""

    def short(sha: str | None) -> str:
        return (sha or "-")[:10]

    line = (
        f"branch {summary['branch'] or '(deleted)'}, {short(summary['base'])}..{short(summary['head'])}: "
        f"{summary['diffstat']}"
    )
    if summary["findings"]:
        line += f"; found: {', '.join(summary['findings'])}"
    return line + ("; worktree kept on disk" if summary["on_disk"] else "")
