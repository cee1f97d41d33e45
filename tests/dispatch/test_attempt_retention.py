"""The retention schedule's pure rule, one row per case, and its application to real directories
on a real SQLite file (no processes): what goes, what stays, links never followed."""

import os
import time

import pytest

from dispatcher.core.config import BridgeConfig
from dispatcher.dispatch.retention import DAY_SECONDS, AttemptDir, prune_attempt_dirs, prune_decision
from dispatcher.store import open_store

NOW = 1_800_000_000.0
DAY = DAY_SECONDS


def _dir(mid, *, agent="claude", state="finished", finished=None, mtime=NOW):
    return AttemptDir(message_id=mid, mtime=mtime, agent=agent, state=state, finished_at=finished)


@pytest.mark.parametrize(
    ("entry", "days", "pruned"),
    [
        (_dir(1, finished=NOW - 8 * DAY), 7, True),  # finished, past the retention
        (_dir(1, finished=NOW - 7 * DAY), 7, True),  # exactly at it
        (_dir(1, finished=NOW - 6 * DAY), 7, False),  # within it
        (_dir(1, finished=NOW - 1), 0, True),  # 0: every finished attempt at the next pass
        (_dir(1, finished=NOW + 60), 0, False),  # finished "in the future" (a clock step): kept for now
        (_dir(1, state="spawned", finished=None, mtime=NOW - 90 * DAY), 7, False),  # running: never
        (_dir(1, state="recorded", finished=None, mtime=NOW - 90 * DAY), 0, False),
        (_dir(1, state="finished", finished=None), 0, False),  # no finish time: kept
        (_dir(1, agent="kimi", finished=NOW - 90 * DAY), 7, False),  # another agent's: its listener decides
        (_dir(1, agent=None, state=None, mtime=NOW - 8 * DAY), 7, True),  # orphan, untouched for long
        (_dir(1, agent=None, state=None, mtime=NOW - 1 * DAY), 7, False),  # orphan, recent
    ],
)
def test_prune_decision(entry, days, pruned):
    assert prune_decision([entry], "claude", NOW, days) == ([1] if pruned else [])


def test_prune_decision_sorts_and_keeps_the_rest():
    dirs = [_dir(5, finished=NOW - 9 * DAY), _dir(2, finished=NOW - 9 * DAY), _dir(3, finished=NOW)]
    assert prune_decision(dirs, "claude", NOW, 7) == [2, 5]


def test_the_retention_default_is_seven_days_and_zero_is_allowed():
    agents = {"claude": {"launcher": "x"}}
    assert BridgeConfig.model_validate({"agents": agents}).attempt_retention_days == 7
    assert BridgeConfig.model_validate({"agents": agents, "attempt_retention_days": 0}).attempt_retention_days == 0
    for bad in (-1, 1.5, "7", 3651):
        with pytest.raises(ValueError):
            BridgeConfig.model_validate({"agents": agents, "attempt_retention_days": bad})


def test_prune_removes_only_what_the_rule_names_and_never_follows_links(tmp_path):
    conn = open_store(tmp_path / "bridge.db")
    now = time.time()
    root = tmp_path / "runtime" / "attempts"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep")
    for mid, state, finished in ((1, "finished", now - 30 * DAY), (2, "spawned", None), (3, "finished", now)):
        conn.execute(
            "INSERT INTO messages (id, sender, recipient, kind, text, created_at) VALUES (?, 'k', 'claude',"
            " 'task', 't', ?)",
            (mid, now),
        )
        conn.execute(
            "INSERT INTO dispatch_attempts (message_id, agent, state, started_at, finished_at)"
            " VALUES (?, 'claude', ?, ?, ?)",
            (mid, state, now - 31 * DAY, finished),
        )
        d = root / str(mid)
        (d / "home").mkdir(parents=True)
        (d / "worker.log").write_text("task text")
        os.symlink(outside, d / "home" / "link")  # a worker's planted link: removed, not followed
        (d / "home").chmod(0o500)
    (root / "not-an-id").mkdir()
    os.utime(root / "not-an-id", (now - 90 * DAY, now - 90 * DAY))
    os.symlink(outside, root / "4")  # a link named like an attempt: not a directory of ours
    conn.commit()

    assert prune_attempt_dirs(conn, root, "claude", now, 7) == [1]
    assert not (root / "1").exists()
    assert (root / "2" / "worker.log").exists() and (root / "3" / "worker.log").exists()
    assert (root / "not-an-id").is_dir() and (root / "4").is_symlink()
    assert (outside / "precious").read_text() == "keep"
    assert prune_attempt_dirs(conn, root, "claude", now, 7) == []  # idempotent
    assert prune_attempt_dirs(conn, tmp_path / "missing", "claude", now, 7) == []
    conn.close()
