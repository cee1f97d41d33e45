"""file_events: real files in a real directory, real inotify, real signals and processes; and the
poll fallback, forced. A wait that should return at once is given a long timeout (it returns on
the event, not the timeout); one that must not see an event gets timeout 0 (a non-blocking look)."""

import os
import signal
import struct
import subprocess
import sys
import threading

import anyio
import pytest

from dispatcher.core import file_events
from dispatcher.core.file_events import FileEvents, changed_names

LONG = 60.0


@pytest.fixture
def watched(tmp_path):
    events = FileEvents([tmp_path / "bridge.db", tmp_path / "bridge.db-wal"])
    assert events.kernel, "inotify is available on the development machine"
    yield tmp_path, events
    events.close()


def test_a_write_to_a_watched_file_wakes_the_wait(watched):
    directory, events = watched
    (directory / "bridge.db-wal").write_bytes(b"frame")
    assert events.wait(LONG) is True
    assert events.wait(0) is False  # the events were read: nothing more


def test_a_file_replaced_by_a_rename_wakes_the_wait(watched):
    directory, events = watched
    (directory / "new.db").write_bytes(b"x")
    events.wait(0)  # (the new file's own events are not watched names)
    os.replace(directory / "new.db", directory / "bridge.db")
    assert events.wait(LONG) is True


def test_a_deleted_watched_file_wakes_the_wait(watched):
    directory, events = watched
    (directory / "bridge.db").write_bytes(b"x")
    events.wait(LONG)
    (directory / "bridge.db").unlink()
    assert events.wait(LONG) is True


def test_other_files_in_the_directory_do_not_wake_it(watched):
    directory, events = watched
    (directory / "bridge.db-shm").write_bytes(b"x")
    (directory / "dispatcher.log").write_text("a line\n")
    assert events.wait(0) is False


def test_a_removed_directory_wakes_the_wait_and_falls_back_to_polling(tmp_path):
    directory = tmp_path / "store"
    directory.mkdir()
    events = FileEvents([directory / "bridge.db"])
    try:
        directory.rmdir()
        assert events.wait(LONG) is True
        assert not events.kernel  # from now on: the poll
        assert events.wait(LONG) is True  # a poll tick, at most FALLBACK_SECONDS later
    finally:
        events.close()


def test_a_missing_directory_means_polling_from_the_start(tmp_path):
    events = FileEvents([tmp_path / "nowhere" / "bridge.db"])
    try:
        assert not events.kernel
        assert events.wait(LONG) is True
    finally:
        events.close()


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_the_fallback_can_be_forced_and_polls(tmp_path, monkeypatch, how):
    if how == "environment":
        monkeypatch.setenv(file_events.MODE_VARIABLE, "poll")
    events = FileEvents([tmp_path / "bridge.db"], kernel=False if how == "argument" else None)
    try:
        assert not events.kernel
        assert events.wait(LONG) is True  # each wait is one poll tick: the caller looks again
    finally:
        events.close()


def test_an_event_loop_task_sleeps_until_a_watched_file_changes(watched):
    directory, events = watched

    async def main() -> list[bool]:
        woke: list[bool] = []
        async with anyio.create_task_group() as tasks:

            async def waiter() -> None:
                woke.append(await events.next_change(LONG))

            tasks.start_soon(waiter)
            await anyio.sleep(0)  # the loop runs on while the task sleeps
            (directory / "dispatcher.log").write_text("another name: no change\n")
            (directory / "bridge.db-wal").write_bytes(b"frame")
        return woke

    # True: the change ended it (at the timeout, with inotify watching, it would be False).
    assert anyio.run(main) == [True]
    assert anyio.run(events.next_change, 0.05) is False  # nothing since: the timeout


def test_after_an_event_the_next_event_loop_wait_is_short_for_one_more_look(watched):
    # A commit's -wal write (the event) comes a moment before the commit is visible: a look right
    # at the event may see nothing yet, so the wait after it ends soon even without another event.
    directory, events = watched
    (directory / "bridge.db-wal").write_bytes(b"frame")

    async def two_waits() -> tuple[bool, bool]:
        woke = await events.next_change(LONG)
        with anyio.fail_after(LONG / 2):  # not the LONG timeout: SETTLE_SECONDS
            settled = await events.next_change(LONG)
        return woke, settled

    assert anyio.run(two_waits) == (True, False)


def test_an_event_loop_wait_without_inotify_is_a_poll_tick(tmp_path):
    events = FileEvents([tmp_path / "bridge.db"], kernel=False)
    try:
        assert anyio.run(events.next_change, LONG) is True  # at most FALLBACK_SECONDS: look again
    finally:
        events.close()


def test_a_signal_handler_can_end_a_blocked_wait(watched):
    """Python retries poll(2) after a signal; the handler's interrupt() is what ends the wait."""
    _, events = watched
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: events.interrupt())
    try:
        sender = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGUSR1))
        sender.start()
        assert events.wait(LONG) is True
        sender.join()
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_an_ended_process_ends_the_wait_through_its_pidfd(watched):
    _, events = watched
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    pidfd = os.pidfd_open(child.pid)
    try:
        assert events.wait(LONG, also=[pidfd]) is True
    finally:
        os.close(pidfd)
        child.wait()


def _event(wd: int, mask: int, name: str = "") -> bytes:
    raw = name.encode()
    padded = raw + b"\0" * (16 - len(raw) % 16) if raw else b""
    return struct.pack("iIII", wd, mask, 0, len(padded)) + padded


@pytest.mark.parametrize(
    ("events", "expected"),
    [
        ([_event(1, 0x2, "bridge.db-wal")], (True, False)),  # a commit
        ([_event(1, 0x2, "bridge.db-shm")], (False, False)),  # a name nobody watches
        ([_event(2, 0x2, "bridge.db-wal")], (False, False)),  # the name, but in another directory
        ([_event(1, 0x2, "x.log"), _event(1, 0x80, "bridge.db")], (True, False)),  # the second one counts
        ([_event(-1, 0x4000)], (True, False)),  # overflow: something may have changed
        ([_event(1, 0x8000)], (True, True)),  # the watch went away: look, then poll
        ([_event(1, 0x400)], (True, True)),  # the directory was deleted
    ],
)
def test_changed_names_reads_each_case(events, expected):
    names = {1: frozenset({"bridge.db", "bridge.db-wal"})}
    assert changed_names(b"".join(events), names) == expected


def test_changed_with_the_name_mask_ignores_writes_and_sees_a_name_come_or_go(tmp_path):
    """The store handle's check: a commit (a write to the -wal) is not news, a replaced file is."""
    wal = tmp_path / "bridge.db-wal"
    wal.write_bytes(b"")
    events = FileEvents([tmp_path / "bridge.db", wal], mask=file_events.NAME_CHANGES)
    try:
        assert events.changed() is False
        wal.write_bytes(b"a frame")
        assert events.changed() is False
        (tmp_path / "new").write_bytes(b"x")
        os.replace(tmp_path / "new", tmp_path / "bridge.db")
        assert events.changed() is True
        assert events.changed() is False  # read: nothing more
        wal.unlink()
        assert events.changed() is True
    finally:
        events.close()


def test_changed_without_inotify_always_says_look(tmp_path):
    events = FileEvents([tmp_path / "bridge.db"], kernel=False)
    try:
        assert events.changed() is True
    finally:
        events.close()
