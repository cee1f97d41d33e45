"""Sleep until one of a few named files changes: Linux inotify through the standard library's
``ctypes``, with a slow poll as the fallback.

The wake-up loops (the idle listener, the waiting Stop hook, ``inbox watch``, and in the MCP
server the long-poll of ``receive_messages`` and the ``bridge://inbox`` / channel watcher) used to poll
``PRAGMA data_version`` 4 to 50 times a second; each process cost a little CPU all day, and
the poll interval sat in every wake's latency. Now they sleep in ``poll(2)`` on an inotify
descriptor that watches the *directories* of the files they care about (the store and its
``-wal``, config.json, a marker, a state file) and filters events by name: a directory watch
survives the file being created, deleted or replaced by a rename, which a watch on the file
itself would not. Every commit writes the ``-wal`` (``IN_MODIFY``); a changed store file shows
as create/move/delete. The caller still decides what changed (``data_version``, a stat): an
event only says "look now", so a spurious one costs one look and a missed one is impossible
while the watch stands. The -wal is written a moment before its commit is visible, so the wait
after an event is short (``SETTLE_SECONDS``): one more look, which sees the commit.

Why ``ctypes`` and not a library: two libc calls (``inotify_init1``, ``inotify_add_watch``) and
one ``struct`` unpack are all that is needed; ``inotify_simple`` is the same thin wrapper and
``watchfiles`` brings a Rust extension and a thread. ``ctypes`` is already loaded by the
dispatcher (``procs.become_subreaper``).

Fallback, at ``FALLBACK_SECONDS``: no inotify (another OS, ``AGENT_BRIDGE_FILE_EVENTS=poll``, out
of instances or watches, a directory missing), or a watch lost (``IN_IGNORED``: its directory
was removed) or an overflowed queue. ``interrupt`` (safe in a signal handler) ends a wait at
once: Python retries ``poll(2)`` after a signal, so a handler that only sets a flag would
otherwise sleep on.
"""

import contextlib
import ctypes
import os
import select
import struct
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

FALLBACK_SECONDS = 0.5  # the poll rate without inotify
# A commit writes its -wal frames (the event) a moment before it publishes them in the -shm's
# wal-index (no event: a memory write), so a look right at the event can see nothing new yet:
# after an event, the next wait (``wait`` or ``next_change``) lasts at most this long, for one
# more look.
SETTLE_SECONDS = 0.05
RECHECK_SECONDS = 5.0  # between events, every waiter looks anyway (the last resort)
MODE_VARIABLE = "AGENT_BRIDGE_FILE_EVENTS"  # "poll" forces the fallback (a file system without inotify)
# What a watched name changing looks like, in a directory watch (linux/inotify.h).
_IN_MODIFY, _IN_ATTRIB, _IN_CLOSE_WRITE = 0x2, 0x4, 0x8
_IN_MOVED_FROM, _IN_MOVED_TO, _IN_CREATE, _IN_DELETE = 0x40, 0x80, 0x100, 0x200
_IN_DELETE_SELF, _IN_MOVE_SELF = 0x400, 0x800
_IN_Q_OVERFLOW, _IN_IGNORED = 0x4000, 0x8000
_MASK = (
    _IN_MODIFY
    | _IN_ATTRIB
    | _IN_CLOSE_WRITE
    | _IN_MOVED_FROM
    | _IN_MOVED_TO
    | _IN_CREATE
    | _IN_DELETE
    | _IN_DELETE_SELF
    | _IN_MOVE_SELF
)
# Only a name coming or going (created, deleted, renamed): what a check of file identity needs.
NAME_CHANGES = _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE | _IN_DELETE_SELF | _IN_MOVE_SELF
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of NUL-padded name


def _inotify() -> tuple[Callable[..., int], Callable[..., int]] | None:
    """libc's two inotify calls, or None where there are none."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.inotify_init1, libc.inotify_add_watch
    except (OSError, AttributeError):
        return None


def changed_names(buffer: bytes, names: dict[int, frozenset[str]]) -> tuple[bool, bool]:
    """(a watched file changed, a watch was lost) for one read of inotify events; ``names``: the
    file names that matter per watch descriptor. A queue overflow counts as a change."""
    hit = lost = False
    offset = 0
    while offset + _EVENT.size <= len(buffer):
        wd, mask, _cookie, length = _EVENT.unpack_from(buffer, offset)
        name = buffer[offset + _EVENT.size : offset + _EVENT.size + length].rstrip(b"\0").decode(errors="replace")
        offset += _EVENT.size + length
        if mask & _IN_Q_OVERFLOW:
            hit = True
        elif mask & (_IN_IGNORED | _IN_DELETE_SELF | _IN_MOVE_SELF):
            hit = lost = True  # the directory itself went: look now, and poll from here on
        elif name in names.get(wd, ()):
            hit = True
    return hit, lost


class FileEvents:
    """Waits on changes to ``files`` (paths; their directories must exist for inotify to watch them)."""

    def __init__(self, files: Iterable[Path], *, kernel: bool | None = None, mask: int = _MASK) -> None:
        if kernel is None:
            kernel = os.environ.get(MODE_VARIABLE, "") != "poll"
        self._names: dict[int, frozenset[str]] = {}
        self._fd: int | None = None
        self._settling = False  # the last ``next_change`` ended on an event
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        by_dir: dict[Path, set[str]] = {}
        for path in files:
            by_dir.setdefault(Path(path).parent, set()).add(Path(path).name)
        calls = _inotify() if kernel else None
        if calls is None:
            return
        init1, add_watch = calls
        fd = init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:  # out of instances (EMFILE) or unsupported: poll
            return
        for directory, names in by_dir.items():
            wd = add_watch(fd, os.fsencode(directory), mask)
            if wd < 0:  # a missing directory, out of watches (ENOSPC): poll instead
                os.close(fd)
                self._names = {}
                return
            self._names[wd] = frozenset(names)
        self._fd = fd
        self._ready = select.poll()  # (built once: ``changed`` runs on every store call)
        self._ready.register(fd, select.POLLIN)

    @property
    def kernel(self) -> bool:
        """Whether inotify watches every file (else each wait is a ``FALLBACK_SECONDS`` poll)."""
        return self._fd is not None

    def fileno(self) -> int | None:
        return self._fd

    def wait(self, timeout: float, also: Sequence[int] = ()) -> bool:
        """Sleep until a watched file changes, ``interrupt`` is called, one of the descriptors
        ``also`` becomes readable (say a pidfd: that process ended) or ``timeout`` passes (at
        most ``FALLBACK_SECONDS`` without inotify). True unless it was the timeout with inotify
        watching: then nothing changed; any other return means "look now". Right after a
        change, at most ``SETTLE_SECONDS`` (see there)."""
        poller = select.poll()
        for fd in (self._fd, self._wake_r, *also):
            if fd is not None:
                poller.register(fd, select.POLLIN)
        limit = self._limit(timeout)
        ready = {fd for fd, _ in poller.poll(max(0.0, limit) * 1000)}
        if self._wake_r in ready:
            self._drain(self._wake_r)
            return True
        if self._fd is not None and self._fd in ready:
            hit, lost = changed_names(self._drain(self._fd), self._names)
            if lost:
                self._stop_watching()
            self._settling = hit
            return hit or bool(ready - {self._fd})
        return bool(ready) or self._fd is None

    def _limit(self, timeout: float) -> float:
        """How long this wait may sleep: ``timeout``, at most ``FALLBACK_SECONDS`` without inotify,
        at most ``SETTLE_SECONDS`` right after an event (see there); the settling ends here."""
        settling, self._settling = self._settling, False
        if self._fd is None:
            return min(timeout, FALLBACK_SECONDS)
        return min(timeout, SETTLE_SECONDS) if settling else timeout

    async def next_change(self, timeout: float) -> bool:
        """``wait`` for an event loop (the MCP server's long-poll and wake watcher): the task
        sleeps until a watched file changes or ``timeout`` passes (at most ``FALLBACK_SECONDS``
        without inotify; at most ``SETTLE_SECONDS`` right after an event), the loop serves other
        requests meanwhile. Same answer as ``wait``; the caller looks after every return. One
        waiting task per instance (the loop watches a descriptor for one task at a time)."""
        import anyio  # only the MCP server waits in an event loop; the listener never imports it

        limit = self._limit(timeout)
        if self._fd is None:
            await anyio.sleep(max(0.0, limit))
            return True
        with anyio.move_on_after(max(0.0, limit)):
            while self._fd is not None:
                await anyio.wait_readable(self._fd)
                if self.changed():  # (another name in the same directory is no change)
                    self._settling = True
                    return True
            return True  # the watch was lost: look now, and poll from here on
        return False

    def changed(self) -> bool:
        """Without sleeping: whether a watched file changed since the last look (always True
        without inotify: the caller then checks for itself every time)."""
        if self._fd is None:
            return True
        if not self._ready.poll(0):
            return False
        hit, lost = changed_names(self._drain(self._fd), self._names)
        if lost:
            self._stop_watching()
        return hit

    def interrupt(self) -> None:
        """End the current (or next) wait at once; only ``os.write``: safe in a signal handler."""
        with contextlib.suppress(BlockingIOError):  # the pipe is full: a wake is already pending
            os.write(self._wake_w, b"x")

    @staticmethod
    def _drain(fd: int) -> bytes:
        chunks = []
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:  # (EINTR is retried by Python itself)
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)

    def _stop_watching(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
        self._fd, self._names = None, {}

    def close(self) -> None:
        self._stop_watching()
        for fd in (self._wake_r, self._wake_w):
            os.close(fd)
        self._wake_r = self._wake_w = -1
