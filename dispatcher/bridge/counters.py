"""The counters written where the thing happens (docs/metrics.md): a notice handed to an agent's
``notify_command``, and a wake path telling a session of new mail. Each adds one to a running
total in the store (``store.metrics.count_event``), after the notice has started or the session
has been told, in a statement of its own, never inside another write's transaction.

Counting never costs the thing counted: a count that fails (the store busy past its short wait,
read-only, gone, a role refused) is dropped, and its caller logs the returned reason in its own
way (a hook or a watch must not write to stdout: no logger here). A counter may then undercount;
it never counts an event twice.
"""

from collections.abc import Callable

from dispatcher.core.locations import StoreLocation
from dispatcher.core.notices import Notice
from dispatcher.store import Connection
from dispatcher.store.metrics import count_event


def _count(connect: Callable[[], Connection], metric: str, agent: str, label: str, detail: str = "") -> str | None:
    """None once counted, else why not (an exception's type name: payload-free)."""
    try:
        count_event(connect(), metric, agent, label, detail)
    except Exception as exc:  # noqa: BLE001 - whatever goes wrong, the event itself has happened
        return type(exc).__name__
    return None


def count_notice(connect: Callable[[], Connection], notice: Notice, started: bool) -> str | None:
    """One more notice of ``notice.event`` for its agent: its runner ``started`` or could not start."""
    return _count(connect, "notices", notice.agent, notice.event, "started" if started else "cannot_start")


def count_wake(connect: Callable[[], Connection], agent: str, path: str) -> str | None:
    """One more time the wake path ``path`` told ``agent``'s session of new mail."""
    return _count(connect, "wakes", agent, path)


def count_wake_at(db: StoreLocation, agent: str, path: str) -> str | None:
    """``count_wake`` on a connection of its own, opened and closed here (a hook's and a watch's
    own connections are read-only); never creates a store (none: ``no_store``)."""
    from dispatcher.store import open_store
    from dispatcher.store.changes import store_file_id

    if store_file_id(db) is None:
        return "no_store"

    opened: list[Connection] = []

    def connect() -> Connection:
        opened.append(open_store(db))
        return opened[0]

    try:
        return count_wake(connect, agent, path)
    finally:
        for conn in opened:
            conn.close()
