"""The WAL is bounded. After a burst, the -wal used to stay at its high-water mark forever (17 MB
seen): nothing bounded the file, and an idle store has no next write to start it over. Now every
connection sets ``journal_size_limit``, and ``shrink_wal`` (which an idle listener runs)
checkpoints and truncates a -wal that grew past it."""

from pathlib import Path

from dispatcher.store import open_store, write_transaction
from dispatcher.store.connection import JOURNAL_SIZE_LIMIT_BYTES, shrink_wal, wal_size
from dispatcher.store.messages import insert_message

BURST_BYTES = 6 * 1024 * 1024


def burst(conn, total: int = BURST_BYTES) -> None:
    """One transaction bigger than the bound: its frames all sit in the -wal at once."""
    text = "x" * 8000
    with write_transaction(conn):
        for _ in range(total // len(text)):
            insert_message(conn, sender="kimi", recipient="claude", text=text, created_at=1.0)


def wal_file(db: Path) -> Path:
    return Path(f"{db}-wal")


def test_the_next_write_after_a_burst_trims_the_wal_to_the_bound(tmp_path):
    db = tmp_path / "bridge.db"
    conn = open_store(db)
    burst(conn)
    assert wal_file(db).stat().st_size > BURST_BYTES
    insert_message(conn, sender="kimi", recipient="claude", text="small", created_at=2.0)
    assert wal_file(db).stat().st_size <= JOURNAL_SIZE_LIMIT_BYTES


def test_shrink_wal_truncates_a_wal_past_the_bound_and_keeps_every_row(tmp_path):
    db = tmp_path / "bridge.db"
    conn, reader = open_store(db), open_store(db)
    burst(conn)
    assert wal_size(reader) > JOURNAL_SIZE_LIMIT_BYTES
    assert shrink_wal(reader) is True
    assert wal_file(db).stat().st_size == 0
    assert reader.execute("SELECT count(*) FROM messages").fetchone()[0] == BURST_BYTES // 8000
    assert shrink_wal(reader) is False  # nothing past the bound: nothing done


def test_shrink_wal_gives_up_while_a_reader_holds_an_old_snapshot(tmp_path):
    db = tmp_path / "bridge.db"
    conn, reader, other = open_store(db), open_store(db), open_store(db)
    other.execute("BEGIN")
    other.execute("SELECT count(*) FROM messages").fetchone()  # a read snapshot from before the burst
    burst(conn)
    assert shrink_wal(reader) is False
    assert wal_file(db).stat().st_size > JOURNAL_SIZE_LIMIT_BYTES
    other.execute("COMMIT")
    assert shrink_wal(reader) is True
