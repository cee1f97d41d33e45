"""Message rows: insert and fetch, the dedup lookup, delivery and acknowledgement, the lease
cap on read, the receive and inbox queries, and the replies a message got."""

from typing import NamedTuple

from dispatcher.store.claims import LEASE_CAP_SECONDS, active_claim_sql
from dispatcher.store.connection import inserted_id
from dispatcher.store.types import Connection, Row


def insert_message(
    conn: Connection,
    *,
    sender: str,
    recipient: str,
    text: str,
    created_at: float,
    kind: str | None = None,
    reply_to: int | None = None,
    conversation_id: int | None = None,
    dedup_key: str | None = None,
    response_deadline: float | None = None,
    origin: str = "agent",
    broadcast_id: int | None = None,
    sent_by_attempt: int | None = None,
    traceparent: str | None = None,
) -> int:
    """``origin='system'`` marks the dispatcher's own notices; no tool can write one.
    ``sent_by_attempt``: the attempt (its message id) whose worker's server wrote it.
    ``traceparent``: the sender's span (docs/traces.md), None when it did not trace."""
    cur = conn.execute(
        "INSERT INTO messages (sender, recipient, kind, text, reply_to, conversation_id, dedup_key,"
        " created_at, response_deadline, origin, broadcast_id, sent_by_attempt, traceparent)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
        (
            sender,
            recipient,
            kind,
            text,
            reply_to,
            conversation_id,
            dedup_key,
            created_at,
            response_deadline,
            origin,
            broadcast_id,
            sent_by_attempt,
            traceparent,
        ),
    )
    return inserted_id(cur)


def fetch_message(conn: Connection, message_id: int) -> Row | None:
    row: Row | None = conn.execute("SELECT * FROM messages WHERE id = ?", (message_id,)).fetchone()
    return row


def fetch_existing_message(conn: Connection, message_id: int) -> Row:
    """``fetch_message`` for a message the caller has just read or written: it is there."""
    row = fetch_message(conn, message_id)
    if row is None:
        raise LookupError(f"message #{message_id} is gone although it was just read")
    return row


def fetch_message_header(conn: Connection, message_id: int) -> Row | None:
    """Who sent what kind to whom: ``id, kind, sender, recipient`` (no text)."""
    row: Row | None = conn.execute(
        "SELECT id, kind, sender, recipient FROM messages WHERE id = ?", (message_id,)
    ).fetchone()
    return row


def message_by_dedup_key(conn: Connection, sender: str, dedup_key: str) -> Row | None:
    row: Row | None = conn.execute(
        "SELECT * FROM messages WHERE sender = ? AND dedup_key = ?", (sender, dedup_key)
    ).fetchone()
    return row


def cap_far_lease(conn: Connection, row: Row, now: float) -> Row:
    """Persist the lease cap on a row just read; the row as it now stands."""
    cap = now + LEASE_CAP_SECONDS
    if row["claim_expires_at"] is None or not row["claim_expires_at"] > cap:
        return row
    conn.execute(
        "UPDATE messages SET claim_expires_at = ? WHERE id = ? AND claim_expires_at > ?", (cap, row["id"], cap)
    )
    return fetch_existing_message(conn, row["id"])


# An unacknowledged message of :agent whose lease reaches past :cap (now + LEASE_CAP_SECONDS).
_FAR_LEASE = "recipient = :agent AND acknowledged_at IS NULL AND claim_expires_at > :cap"


def cap_far_leases(conn: Connection, recipient: str, now: float) -> bool:
    """Persist the lease cap on every unacknowledged message of ``recipient``: a plain read
    unless a lease reaches past now + LEASE_CAP_SECONDS. True if it capped any."""
    params = {"agent": recipient, "cap": now + LEASE_CAP_SECONDS}
    if not conn.execute(f"SELECT 1 FROM messages WHERE {_FAR_LEASE} LIMIT 1", params).fetchone():  # noqa: S608 - constant SQL fragments only; every value is a bound parameter
        return False
    conn.execute(f"UPDATE messages SET claim_expires_at = :cap WHERE {_FAR_LEASE}", params)  # noqa: S608 - constant SQL fragments only; every value is a bound parameter
    return True


# A worker's reads: the message it was started for (bound as :own), its replies, the message it
# answers, and the rest of its conversation. Defined once, here, for every read that needs it.
_THREAD_OF_OWN = (
    "(id = :own OR reply_to = :own OR id = (SELECT reply_to FROM messages WHERE id = :own)"
    " OR conversation_id = (SELECT conversation_id FROM messages WHERE id = :own))"
)


def receivable_messages(
    conn: Connection, *, agent: str, worker_id: str, now: float, limit: int, thread_of: int | None = None
) -> list[Row]:
    """Unacknowledged messages for ``agent``, oldest first, minus those another process holds;
    with ``thread_of``, only those in that message's thread or conversation. Each row also
    carries ``far_lease``: whether any unacknowledged message of ``agent`` (shown or not) has a
    lease past the cap (``cap_far_leases``), found in the same statement (one index probe, run once)."""
    thread = f" AND {_THREAD_OF_OWN}" if thread_of is not None else ""
    rows: list[Row] = conn.execute(
        f"SELECT *, EXISTS (SELECT 1 FROM messages WHERE {_FAR_LEASE}) AS far_lease FROM messages"  # noqa: S608 - constant SQL fragments only; every value is a bound parameter
        f" WHERE recipient = :agent AND acknowledged_at IS NULL AND (NOT {active_claim_sql()} OR claim_owner = :worker)"
        f"{thread} ORDER BY id LIMIT :limit",
        {
            "agent": agent,
            "worker": worker_id,
            "now": now,
            "cap": now + LEASE_CAP_SECONDS,
            "limit": limit,
            "own": thread_of,
        },
    ).fetchall()
    return rows


def in_thread_of(conn: Connection, own: int, message_id: int) -> bool:
    """Whether ``message_id`` is ``own`` itself, a reply to it, the message it answers, or in its conversation."""
    query = f"SELECT 1 FROM messages WHERE id = :id AND {_THREAD_OF_OWN}"  # noqa: S608 - constant SQL
    return conn.execute(query, {"id": message_id, "own": own}).fetchone() is not None


def mark_delivered(conn: Connection, message_ids: list[int], now: float) -> None:
    """First delivery only: a message delivered before keeps its time."""
    conn.executemany(
        "UPDATE messages SET delivered_at = ? WHERE id = ? AND delivered_at IS NULL",
        [(now, i) for i in message_ids],
    )


def mark_acknowledged(conn: Connection, message_id: int, now: float) -> None:
    """Acknowledged (and so delivered), and any claim on it ends."""
    conn.execute(
        "UPDATE messages SET acknowledged_at = ?, delivered_at = COALESCE(delivered_at, ?),"
        " claim_owner = NULL, claim_expires_at = NULL WHERE id = ?",
        (now, now, message_id),
    )


def reply_ids(conn: Connection, message_id: int) -> list[int]:
    return [r[0] for r in conn.execute("SELECT id FROM messages WHERE reply_to = ? ORDER BY id", (message_id,))]


def result_ids_after(conn: Connection, message_id: int, after: float) -> list[int]:
    """Results that answered ``message_id`` later than ``after``."""
    return [
        r[0]
        for r in conn.execute(
            "SELECT id FROM messages WHERE reply_to = ? AND kind = 'result' AND created_at > ? ORDER BY id",
            (message_id, after),
        )
    ]


def dispatch_summary_row(conn: Connection, message_id: int) -> Row | None:
    """The attempt columns ``get_message`` shows about a message's dispatch (no diagnostics)."""
    row: Row | None = conn.execute(
        "SELECT state, outcome, error_kind, started_at, finished_at, cli_status, cost_usd, input_tokens,"
        " output_tokens, cache_read_tokens, cache_write_tokens, max_cost_usd, cost_overshoot_usd,"
        " permission_level, denied_tools, worktree_branch, worktree_base, worktree_head, worktree_files,"
        " worktree_insertions, worktree_deletions, worktree_findings, worktree_state"
        " FROM dispatch_attempts WHERE message_id = ?",
        (message_id,),
    ).fetchone()
    return row


class UnreadRows(NamedTuple):
    unread: int
    oldest_created_at: float | None
    newest_id: int | None
    first: list[tuple[int, str, str | None]]  # (id, sender, kind), oldest first


def unclaimed_unread(conn: Connection, agent: str, now: float, *, after_id: int, named: int) -> UnreadRows:
    """Unacknowledged messages for ``agent`` that nobody holds an active claim on (a claimed
    one is being handled), with id greater than ``after_id``: the count, oldest time, newest
    id, and the first ``named`` of them."""
    where = f"recipient = :agent AND acknowledged_at IS NULL AND id > :after AND NOT {active_claim_sql()}"
    params = {"agent": agent, "after": after_id, "now": now, "named": named}
    unread, oldest, newest = conn.execute(
        f"SELECT COUNT(*), MIN(created_at), MAX(id) FROM messages WHERE {where}",  # noqa: S608 - constant fragments, bound values
        params,
    ).fetchone()
    first = [
        (i, s, k)
        for i, s, k in conn.execute(
            f"SELECT id, sender, kind FROM messages WHERE {where} ORDER BY id LIMIT :named",  # noqa: S608 - constant fragments, bound values
            params,
        )
    ]
    return UnreadRows(unread, oldest, newest, first)


def waiting_count(conn: Connection, agent: str, now: float) -> tuple[int, float | None]:
    """``unclaimed_unread``'s count and oldest time, read from the view ``unread_mail`` (no id,
    sender, kind or text): on a store with per-agent roles, the one read of another agent's
    inbox a role may make (``who``, the status line)."""
    count, oldest = conn.execute(
        f"SELECT COUNT(*), MIN(created_at) FROM unread_mail WHERE recipient = :agent AND NOT {active_claim_sql()}",  # noqa: S608 - constant fragments, bound values
        {"agent": agent, "now": now},
    ).fetchone()
    return count, oldest


def inbox_rows(conn: Connection, recipient: str, *, unread_only: bool, limit: int) -> list[Row]:
    """The latest ``limit`` messages to ``recipient`` (only unacknowledged ones with
    ``unread_only``), oldest first, text included: what ``agent-bridge inbox`` lists."""
    rows = conn.execute(
        "SELECT id, sender, recipient, kind, origin, reply_to, conversation_id, created_at, acknowledged_at, text"
        " FROM messages WHERE recipient = ? AND (acknowledged_at IS NULL OR NOT ?) ORDER BY id DESC LIMIT ?",
        (recipient, unread_only, limit),
    ).fetchall()
    return list(reversed(rows))
