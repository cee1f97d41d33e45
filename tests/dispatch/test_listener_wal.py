"""An idle listener truncates a -wal that a burst grew past its bound. Before, the file stayed at
its high-water mark for as long as the store saw no further write."""

from pathlib import Path

from dispatch_harness import make_launcher, start_listener, status, stop_listener, wait_until, write_config_atomic

from dispatcher.store import open_store, write_transaction
from dispatcher.store.connection import JOURNAL_SIZE_LIMIT_BYTES
from dispatcher.store.messages import insert_message


def test_an_idle_listener_truncates_the_wal_after_a_burst(env, config_path, launchers, db_path):
    write_config_atomic(config_path, make_launcher(launchers, "succeed"))
    listener = start_listener(env)
    wait_until(lambda: status(env)["stage"] == "idle", what="listener idle")
    writer = open_store(db_path)  # stays open and idle, as a session's server would
    text = "x" * 8000
    with write_transaction(writer):  # plain notes: nothing to dispatch
        for _ in range(6 * 1024 * 1024 // len(text)):
            insert_message(writer, sender="kimi", recipient="claude", text=text, created_at=1.0)
    wal = Path(f"{db_path}-wal")
    assert wal.stat().st_size > JOURNAL_SIZE_LIMIT_BYTES
    wait_until(lambda: wal.stat().st_size <= JOURNAL_SIZE_LIMIT_BYTES, what="the listener to truncate the -wal")
    assert writer.execute("SELECT count(*) FROM messages").fetchone()[0] >= 6 * 1024 * 1024 // len(text)
    writer.close()
    stop_listener(listener)
