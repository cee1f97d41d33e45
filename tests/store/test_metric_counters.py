"""The counters written where the thing happens (notices, wakes; docs/metrics.md), on a real
SQLite file and a real PostgreSQL server: one more per event, atomically (two writers at once lose
neither count), from their fixed label sets only, never inside another write's transaction's
wait for long, kept by prune, and a failed count is dropped, never raised at the event."""

import threading
import time

import pytest

from dispatcher.bridge.counters import count_notice, count_wake, count_wake_at
from dispatcher.core.notices import Notice
from dispatcher.ops.prune import prune
from dispatcher.store import open_store, write_transaction
from dispatcher.store.busy import COUNT_WAIT_MS
from dispatcher.store.metrics import count_event, counter_totals

pytestmark = pytest.mark.both_backends


def test_each_event_adds_one_to_its_agents_row(conn):
    for _ in range(3):
        count_event(conn, "wakes", "claude", "monitor")
    count_event(conn, "wakes", "kimi", "channel")
    assert count_notice(lambda: conn, Notice("attempt_failed", "claude", 7, "failed"), started=True) is None
    assert count_notice(lambda: conn, Notice("attempt_failed", "claude", 8, "failed"), started=False) is None
    assert counter_totals(conn, "wakes", None) == {("claude", "monitor", ""): 3, ("kimi", "channel", ""): 1}
    assert counter_totals(conn, "wakes", "kimi") == {("kimi", "channel", ""): 1}
    assert counter_totals(conn, "notices", None) == {
        ("claude", "attempt_failed", "started"): 1,
        ("claude", "attempt_failed", "cannot_start"): 1,
    }
    rows = conn.execute("SELECT count(*) FROM metric_totals WHERE metric IN ('wakes', 'notices')").fetchone()[0]
    assert rows == 4  # a running total per agent and label, not a row per event


def test_two_writers_at_once_lose_no_count(backend, request, tmp_path):
    location = tmp_path / "bridge.db" if backend == "sqlite" else request.getfixturevalue("postgres_url")
    open_store(location).close()  # (created and migrated before the race)
    writers = [open_store(location) for _ in range(2)]
    start = threading.Barrier(2)
    failures: list[str] = []

    def write(own) -> None:
        start.wait()
        for _ in range(25):
            if (why := count_wake(lambda: own, "claude", "hook")) is not None:
                failures.append(why)

    threads = [threading.Thread(target=write, args=(w,)) for w in writers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert failures == []
        assert counter_totals(writers[0], "wakes", None) == {("claude", "hook", ""): 50}
    finally:
        for writer in writers:
            writer.close()


def test_only_the_fixed_label_sets_are_counted(conn):
    for metric, label, detail in (
        ("wakes", "a secret task text", ""),
        ("wakes", "hook", "started"),
        ("notices", "budget_held", ""),
        ("attempts", "failed", "exit_nonzero"),
    ):
        with pytest.raises(ValueError, match="not a counted"):
            count_event(conn, metric, "claude", label, detail)
    assert conn.execute("SELECT count(*) FROM metric_totals").fetchone()[0] == 0


def test_prune_keeps_the_counters(conn):
    count_event(conn, "wakes", "claude", "resource")
    count_event(conn, "notices", "claude", "listener_stopped", "started")
    prune(conn, 0, now=time.time() + 3600)
    assert counter_totals(conn, "wakes", None) == {("claude", "resource", ""): 1}
    assert counter_totals(conn, "notices", None) == {("claude", "listener_stopped", "started"): 1}


def test_a_count_that_cannot_be_written_is_dropped_quickly_never_raised(conn, tmp_path):
    """A count outside the fixed sets, or no store at all: the caller gets why, the event goes on."""
    assert count_wake(lambda: conn, "claude", "nobody") == "ValueError"
    gone = tmp_path / "no" / "such" / "dir" / "x.db"
    assert count_wake_at(gone, "claude", "hook") == "no_store"
    assert not gone.parent.exists()  # a count never creates a store


@pytest.mark.sqlite_only
def test_a_locked_store_delays_a_count_by_its_short_wait_only(tmp_path, backend):
    db = tmp_path / "bridge.db"
    holder, counter = open_store(db), open_store(db)
    try:
        with write_transaction(holder):  # another writer holds the lock throughout
            started = time.monotonic()
            why = count_wake(lambda: counter, "claude", "hook")
            waited = time.monotonic() - started
        assert why == "OperationalError"
        assert waited < COUNT_WAIT_MS / 1000 + 1.0  # not the store's 15 s busy timeout
        assert counter.execute("PRAGMA busy_timeout").fetchone()[0] == 15_000  # put back
        assert count_wake(lambda: counter, "claude", "hook") is None  # once free, counted
    finally:
        holder.close()
        counter.close()
