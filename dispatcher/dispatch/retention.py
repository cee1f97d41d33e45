"""The attempt-directory retention schedule.

An attempt directory (``<runtime>/attempts/<message id>/``: worker.log, diagnostics.json,
the CLI's raw output and its private home) holds the only copies of the task text
outside the store once the request file is gone (the supervisor deletes that at once).
The agent's listener removes these directories when it is idle, at most once an hour
(``PRUNE_EVERY_SECONDS``): those of this agent's *finished* attempts whose ``finished_at``
is older than ``attempt_retention_days`` (config.json, default 7; 0 removes every
finished attempt's directory at the next pass), and orphans (no attempt row in this
store) untouched for as long. A running or unsettled attempt's directory is never
removed. ``prune_decision`` is the pure rule; ``prune_attempt_dirs`` applies it.
"""

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from dispatcher.core.logs import get_logger
from dispatcher.store import Connection
from dispatcher.store.attempts import attempt_state

PRUNE_EVERY_SECONDS = 3600.0
DAY_SECONDS = 86400.0
log = get_logger("agent_bridge.dispatch")


@dataclass(frozen=True)
class AttemptDir:
    message_id: int
    mtime: float  # the directory's own modification time (lstat)
    agent: str | None  # the attempt's agent; None when the store has no attempt for it
    state: str | None  # recorded, spawned, finished; None without an attempt row
    finished_at: float | None


def prune_decision(dirs: list[AttemptDir], agent: str, now: float, retention_days: int) -> list[int]:
    """The message ids whose directories go: this agent's finished attempts older than the
    retention, and orphans (no attempt row) not modified for as long. Never an unsettled one."""
    cutoff = now - retention_days * DAY_SECONDS
    prune = []
    for d in dirs:
        if d.state is None:
            if d.mtime <= cutoff:
                prune.append(d.message_id)
        elif d.agent == agent and d.state == "finished" and d.finished_at is not None and d.finished_at <= cutoff:
            prune.append(d.message_id)
    return sorted(prune)


def scan(conn: Connection, attempts_root: Path) -> list[AttemptDir]:
    """Every directory named by a message id under ``attempts_root``, with its attempt's facts."""
    try:
        entries = list(os.scandir(attempts_root))
    except FileNotFoundError:
        return []
    found = []
    for entry in entries:
        if not entry.name.isdigit() or not entry.is_dir(follow_symlinks=False):
            continue
        attempt = attempt_state(conn, int(entry.name))
        found.append(
            AttemptDir(
                message_id=int(entry.name),
                mtime=entry.stat(follow_symlinks=False).st_mtime,
                agent=attempt.agent if attempt else None,
                state=attempt.state if attempt else None,
                finished_at=attempt.finished_at if attempt else None,
            )
        )
    return found


def tree_bytes(path: str | Path) -> int:
    """The bytes of the regular files under ``path`` (links are not followed, nor counted)."""
    total = 0
    for root, _dirs, files in os.walk(path, followlinks=False):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))  # noqa: PTH118 - os.walk gives str
            except OSError:
                continue
            total += st.st_size if stat.S_ISREG(st.st_mode) else 0
    return total


def _make_writable(function, path, excinfo) -> None:
    """A CLI may leave read-only directories: open them up (never through a link) and retry once."""
    parent = os.path.dirname(path)  # noqa: PTH120 - rmtree's own str (or bytes) path, back to os.lstat
    try:
        for target in (parent, path):
            st = os.lstat(target)
            if stat.S_ISDIR(st.st_mode):
                os.chmod(target, st.st_mode | stat.S_IRWXU)
        function(path)
    except OSError:
        pass  # what is left is retried at the next pass


def remove_attempt_dir(path: Path) -> bool:
    """Remove one attempt directory without following links; True when it is gone."""
    if path.is_symlink() or not path.is_dir():
        return False
    # Loaded when a directory goes, not at start: shutil brings bz2 and lzma into the listener
    # (README, "The listener's footprint").
    import shutil

    shutil.rmtree(path, onerror=_make_writable)
    return not path.exists()


def prune_attempt_dirs(conn: Connection, attempts_root: Path, agent: str, now: float, retention_days: int) -> list[int]:
    """Apply the schedule once; returns the message ids whose directories were removed."""
    removed = []
    for message_id in prune_decision(scan(conn, attempts_root), agent, now, retention_days):
        if remove_attempt_dir(attempts_root / str(message_id)):
            removed.append(message_id)
    if removed:
        log.info("attempt_dirs_pruned", agent=agent, count=len(removed), retention_days=retention_days)
    return removed
