"""What an agent has waiting, payload-free: the one summary every wake path announces.

Hooks, ``inbox watch``, the channel ping, the ``bridge://inbox`` resource, ``who`` and the
status line all say the same thing: counts, ids, senders and kinds, never a message's text.
Every wake signal is only a hint to call ``receive_messages``; the store stays the truth.
"""

from dataclasses import dataclass, field
from typing import Any

from dispatcher.store import Connection
from dispatcher.store.messages import unclaimed_unread

NAMED_IDS = 10  # a line names at most this many messages; the count is always complete


@dataclass(frozen=True)
class Waiting:
    id: int
    sender: str
    kind: str | None


@dataclass(frozen=True)
class InboxSummary:
    agent: str
    unread: int
    oldest_created_at: float | None
    newest_id: int | None
    first: tuple[Waiting, ...] = field(default=())  # oldest first, at most NAMED_IDS

    def as_dict(self, now: float) -> dict[str, Any]:
        return {
            "agent": self.agent,
            "unread": self.unread,
            "oldest_age_seconds": None if self.oldest_created_at is None else round(now - self.oldest_created_at, 1),
            "newest_id": self.newest_id,
            "messages": [{"id": w.id, "sender": w.sender, "kind": w.kind} for w in self.first],
        }


def inbox_summary(conn: Connection, agent: str, now: float, *, after_id: int = 0) -> InboxSummary:
    """Unacknowledged messages for ``agent`` that nobody holds an active claim on
    (a claimed one is being handled), with id greater than ``after_id``."""
    rows = unclaimed_unread(conn, agent, now, after_id=after_id, named=NAMED_IDS)
    first = tuple(Waiting(i, s, k) for i, s, k in rows.first)
    return InboxSummary(agent, rows.unread, rows.oldest_created_at, rows.newest_id, first)


def wake_line(summary: InboxSummary, *, new: bool = False) -> str:
    """One line naming what waits: ``2 new: #41 from kimi (task), #42 from codex (notice) —
    call receive_messages``. Empty when nothing waits."""
    if summary.unread == 0:
        return ""
    named = ", ".join(f"#{w.id} from {w.sender} ({w.kind or 'note'})" for w in summary.first)
    more = summary.unread - len(summary.first)
    if more > 0:
        named += f" and {more} more"
    word = "new" if new else "unread"
    return f"{summary.unread} {word} for {summary.agent}: {named} — call receive_messages"
