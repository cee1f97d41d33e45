"""``agent-bridge inbox watch``: one payload-free line per batch of new messages.

Made for Claude Code's Monitor tool, where every stdout line of a background command
becomes a transcript event. A watch only hints: the store stays the truth, so a watch that
is killed, expires or is never armed loses nothing; on start it first announces what is
already unread, so a re-armed watch catches up.

It reads the store read-only (``open_read_only(live=True)``) and sleeps on file events
(``file_events``: the store's ``-wal`` or file changed), then reads ``PRAGMA data_version`` (it
changes on every commit by another connection). It imports
neither pydantic nor the MCP SDK. ``InboxReader`` is shared with the server's wake paths
(``wake_mcp``).
"""

import json
import os
import shlex
import shutil
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from dispatcher.bridge.counters import count_wake_at
from dispatcher.bridge.inbox import InboxSummary, inbox_summary, wake_line
from dispatcher.bridge.presence import WATCH_PATH, watch_from_descendant
from dispatcher.core import clock
from dispatcher.core.errors import BridgeError
from dispatcher.core.file_events import RECHECK_SECONDS
from dispatcher.core.locations import StoreLocation, shown
from dispatcher.store import TRANSIENT_STORE_ERRORS, Connection
from dispatcher.store.changes import StoreChanges, data_version, store_file_id
from dispatcher.store.readonly import open_read_only
from dispatcher.store.store_clock import store_now
from dispatcher.wake.hooks import log_line

ERROR_RETRY_SECONDS = 0.1  # after a transient store error (locked, being recovered)
MAX_SECONDS_RANGE = (1.0, 7 * 86400.0)
# A store that stays unreadable (locked past the read timeout, being recovered) this many
# looks in a row ends the watch with an error instead of looping silently.
MAX_CONSECUTIVE_ERRORS = 50


class InboxReader:
    """A live read-only view of one agent's inbox that notices every commit.

    ``changed()`` is the cheap check (one ``PRAGMA data_version``, one ``stat``): true on
    the first call, after any commit by another connection, and when the store appears,
    is replaced or disappears. It never creates the store.
    """

    def __init__(self, db: StoreLocation, agent: str) -> None:
        self.db = db
        self.agent = agent
        self._conn: Connection | None = None
        self._inode: tuple[int, int] | None = None
        self._version: int | None = None
        self._first = True
        self.generation = 0  # counts the store files seen: ids start again in a new one
        self._last_file: tuple[int, int] | None = None

    def _file_id(self) -> tuple[int, int] | None:
        return store_file_id(self.db)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn, self._inode, self._version = None, None, None

    def changed(self) -> bool:
        first, self._first = self._first, False
        current = self._file_id()
        if self._conn is not None and current != self._inode:  # deleted or replaced under us
            self.close()
            # Whatever file comes next is a new store, even at a recycled inode number (the
            # old inode is free once our connection is closed).
            self._last_file = None
            first = True
        if self._conn is None:
            if current is None:
                return first
            self._conn = open_read_only(self.db, live=True)
            if self._conn is None:  # removed between stat and open
                return first
            self._inode = current
            if current != self._last_file:
                self._last_file = current
                self.generation += 1
        version = data_version(self._conn)
        changed = version != self._version
        self._version = version
        return changed or first

    def summary(self, *, after_id: int = 0) -> InboxSummary:
        """What waits now (with ``after_id``: only newer ids); empty when there is no store."""
        if self._conn is None:
            return InboxSummary(self.agent, 0, None, None)
        return inbox_summary(self._conn, self.agent, store_now(self._conn), after_id=after_id)


def rearm_command(agent: str, max_seconds: float | None, argv0: str, on_path: str | None, python: str) -> str:
    """The exact command that starts this watch again.

    ``agent-bridge`` when that is what runs (found on PATH as the same file), else the
    absolute script, else this Python with ``-m dispatcher`` (a checkout).
    """
    script = Path(argv0)
    if script.name == "agent-bridge":
        head = ["agent-bridge"] if on_path and Path(on_path).resolve() == script.resolve() else [str(script.resolve())]
    else:
        head = [python, "-m", "dispatcher"]
    tail = ["inbox", "watch", "--agent", agent]
    if max_seconds is not None:
        tail += ["--max-seconds", f"{max_seconds:g}"]
    return shlex.join(head + tail)


def expiry_line(agent: str, max_seconds: float, command: str) -> str:
    return (
        f"inbox watch for {agent} ended after {max_seconds:g} s (its --max-seconds); nothing is lost, "
        f"unread messages stay queued. Re-arm it now to keep being told: {command}"
    )


class _Stop:
    def __init__(self, events: StoreChanges) -> None:
        self.requested = False
        self.events = events

    def __call__(self, signum: int, frame: object) -> None:
        self.requested = True
        self.events.interrupt()  # (a sleeping poll(2) would otherwise sleep on)


def watch(
    db: StoreLocation,
    agent: str,
    out: TextIO,
    *,
    events: StoreChanges,
    max_seconds: float | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    rearm: str = "",
    told: Callable[[], None] = lambda: None,
) -> None:
    """Print the unread line, then one line per batch of new messages until told to stop
    or ``max_seconds`` have passed (then the re-arm line). ``events``: made before the first
    look, so no commit falls between a look and the sleep. ``told``: called after each line
    that names mail is out (the count of wakes by the path ``monitor``)."""
    reader = InboxReader(db, agent)
    announced = 0  # the highest id already named on a line
    generation = 0
    deadline = None if max_seconds is None else clock.monotonic() + max_seconds
    errors = 0
    try:
        first = True
        while not should_stop():
            try:
                if reader.changed():
                    if reader.generation != generation and announced:  # a new store file: new ids
                        announced = 0
                    generation = reader.generation
                    summary = reader.summary(after_id=announced)
                    if summary.unread:
                        out.write(wake_line(summary, new=not first) + "\n")
                        out.flush()
                        announced = max(announced, summary.newest_id or 0)
                        told()
                    first = False
                errors = 0
            except TRANSIENT_STORE_ERRORS as exc:  # locked, busy recovery: try again shortly
                errors += 1
                reader.close()
                if errors >= MAX_CONSECUTIVE_ERRORS:
                    raise BridgeError(
                        "store_unavailable",
                        f"cannot read {shown(db)} ({exc}); check it with `agent-bridge doctor`, then re-arm the watch.",
                    ) from None
            if deadline is not None and max_seconds is not None and clock.monotonic() >= deadline:
                out.write(expiry_line(agent, max_seconds, rearm) + "\n")
                out.flush()
                return
            timeout = ERROR_RETRY_SECONDS if errors else RECHECK_SECONDS
            events.wait(timeout if deadline is None else min(timeout, max(0.0, deadline - clock.monotonic())))
    finally:
        reader.close()


def _require_declared(config_path: Path, agent: str) -> None:
    """Refuse an agent config.json does not declare (read as plain JSON: no pydantic here)."""
    try:
        agents = json.loads(config_path.read_text())["agents"]
        declared = sorted(agents)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BridgeError(
            "config_invalid",
            f"cannot read the agents of {config_path} ({type(exc).__name__}); run `agent-bridge doctor`.",
        ) from None
    if agent not in agents:
        raise BridgeError(
            "unknown_agent", f"{agent!r} is not declared in {config_path}; declared: {', '.join(declared) or 'none'}."
        )


def _count_told(locations, agent: str) -> None:
    """One more wake by the path ``monitor`` (docs/metrics.md); a count that fails is dropped, with
    a line in the runtime's ``hooks.log`` (stdout is the watch's lines, for the model)."""
    if (why := count_wake_at(locations.db, agent, WATCH_PATH)) is not None:
        log_line(locations.private_dir(), "watch", "-", agent, f"count_dropped {why}")


def run_watch(agent: str, max_seconds: float | None) -> int:
    from dispatcher.core.locations import Locations

    locations = Locations.from_env()
    _require_declared(locations.config_path(), agent)
    events = StoreChanges(locations.db, agent)
    stop = _Stop(events)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    rearm = rearm_command(agent, max_seconds, sys.argv[0], shutil.which("agent-bridge"), sys.executable)
    # While this process runs, the session whose CLI started it counts as wakeable ("monitor"):
    # one row per watch, with this pid and start time (a watch killed with -9 stops counting).
    watch_id = watch_from_descendant(locations.db, agent)
    try:
        watch(
            locations.db,
            agent,
            sys.stdout,
            events=events,
            max_seconds=max_seconds,
            should_stop=lambda: stop.requested,
            rearm=rearm,
            told=lambda: _count_told(locations, agent),
        )
    except BrokenPipeError:  # whoever read our lines is gone: nothing left to tell
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    finally:
        # Finishing anyway: a signal that arrives while the interpreter shuts down (when Python
        # has put the default handlers back) must not turn a clean end into "killed".
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if watch_id is not None:
            watch_from_descendant(locations.db, agent, watch_id=watch_id)
        events.close()
    return 0
