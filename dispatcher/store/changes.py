"""What the wake-up loops sleep on and then check: ``StoreChanges`` (a file event or a NOTIFY says
"look now"), then ``data_version`` (the cheap "did anything change?")."""

import os
import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path

from dispatcher.core.file_events import FALLBACK_SECONDS, FileEvents
from dispatcher.core.locations import StoreLocation, StoreUrl, store_path
from dispatcher.store.types import Connection


def data_version(conn: Connection) -> int:
    """A number that changes whenever another connection commits to the store (SQLite's
    ``PRAGMA data_version``; this connection's own commits do not change it)."""
    if not isinstance(conn, sqlite3.Connection):
        from dispatcher.store.postgres import data_version as postgres_data_version

        return postgres_data_version(conn)
    version: int = conn.execute("PRAGMA data_version").fetchone()[0]
    return version


def change_files(db: StoreLocation) -> list[Path]:
    """The files whose change may mean a commit, for ``file_events`` to watch: every commit writes
    the ``-wal`` next to the real file; a replaced, deleted or checkpointed store changes the file.
    None for a PostgreSQL store (``StoreChanges`` listens for its notices instead)."""
    if isinstance(db, StoreUrl):
        return []
    real = store_path(db)
    return [real, Path(f"{real}-wal")]


def store_file_id(db: StoreLocation) -> tuple[int, int] | None:
    """(device, inode) of the store file, None while there is none: how a waiter notices the
    store deleted or replaced under it. A PostgreSQL store has no file: it is always "there"."""
    if isinstance(db, StoreUrl):
        return (0, 0)
    try:
        st = os.stat(db)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


class StoreChanges:
    """Sleep until the store may have changed for ``agent``, or one of ``files`` changed.

    SQLite: inotify on the store's file and ``-wal`` (``file_events``). PostgreSQL: a LISTEN on
    the agent's channel (``postgres.ChangeNotices``) whose descriptor wakes the same wait, the
    other ``files`` still watched by inotify. Either way a wake only says "look now"."""

    def __init__(self, db: StoreLocation, agent: str, files: Iterable[Path] = ()) -> None:
        self._notices = None
        self._files: list[Path] = []
        if isinstance(db, StoreUrl):
            from dispatcher.store.postgres import ChangeNotices  # psycopg only for a PostgreSQL store

            self._notices = ChangeNotices(db, agent)
            self._files = list(files)
            self._events = FileEvents(self._files)
        else:
            self._events = FileEvents([*change_files(db), *files])

    def wait(self, timeout: float, also: Sequence[int] = ()) -> bool:
        """``FileEvents.wait``, woken by the store's notices too."""
        if self._notices is None:
            return self._events.wait(timeout, also)
        fd = self._notices.fileno()
        if fd is None:  # no LISTEN connection just now: poll
            return self._events.wait(min(timeout, FALLBACK_SECONDS), also) or True
        woke = self._events.wait(timeout, (*also, fd))
        return self._notices.drain() or woke

    async def next_change(self, timeout: float) -> bool:
        """``wait`` for an event loop (``FileEvents.next_change``). On PostgreSQL it sleeps on the
        notices only: ``files`` are then looked at every ``FALLBACK_SECONDS`` (the server's waits
        watch no other file)."""
        if self._notices is None:
            return await self._events.next_change(timeout)
        import anyio  # only the MCP server waits in an event loop

        fd = self._notices.listening()
        limit = min(timeout, FALLBACK_SECONDS) if fd is None or self._files else timeout
        if fd is None:  # listen again off the loop (a server that does not answer blocks its thread only)
            with anyio.move_on_after(max(0.0, limit)):
                if not self._notices.reconnecting():  # one worker thread at a time, however long it hangs
                    await anyio.to_thread.run_sync(self._notices.reconnect, abandon_on_cancel=True)
                if self._notices.listening() is None:  # refused, or still trying: the rest of the limit
                    await anyio.sleep(limit)
            return True
        with anyio.move_on_after(max(0.0, limit)):
            await anyio.wait_readable(fd)
        return self._notices.drain() or bool(self._files)

    def changed(self) -> bool:
        """Without sleeping: whether anything may have changed since the last look."""
        if self._notices is None:
            return self._events.changed()
        return self._notices.drain() or self._events.changed()

    def interrupt(self) -> None:
        self._events.interrupt()

    def close(self) -> None:
        self._events.close()
        if self._notices is not None:
            self._notices.close()

    def close_in_child(self) -> None:
        """``close`` for a forked child of the process that made it: its file watch goes, and a
        PostgreSQL LISTEN connection is left alone (``ChangeNotices.forget``): it is the parent's."""
        self._events.close()
        if self._notices is not None:
            self._notices.forget()
