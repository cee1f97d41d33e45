"""Conversation rows: the conversation, its turn and in-flight message, its state moves
(each one a ``conversation_transitions`` row), and the ledger of its attempts."""

from typing import NamedTuple

from dispatcher.store.connection import inserted_id
from dispatcher.store.types import Connection, Row


def fetch_conversation(conn: Connection, conversation_id: int) -> Row | None:
    row: Row | None = conn.execute("SELECT * FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
    return row


def fetch_existing_conversation(conn: Connection, conversation_id: int) -> Row:
    """``fetch_conversation`` for a conversation the caller has just read or written: it is there."""
    row = fetch_conversation(conn, conversation_id)
    if row is None:
        raise LookupError(f"conversation #{conversation_id} is gone although it was just read")
    return row


def insert_conversation(
    conn: Connection,
    *,
    initiator: str,
    recipient: str,
    goal: str,
    max_turns: int,
    created_at: float,
    expires_at: float,
    max_cost_usd: float | None,
) -> int:
    """A new active conversation; its opening task (inserted next) is its first turn."""
    cur = conn.execute(
        "INSERT INTO conversations (initiator, recipient, goal, state, max_turns, turn_count,"
        " created_at, expires_at, updated_at, max_cost_usd) VALUES (?, ?, ?, 'active', ?, 1, ?, ?, ?, ?)"
        " RETURNING id",
        (initiator, recipient, goal, max_turns, created_at, expires_at, created_at, max_cost_usd),
    )
    return inserted_id(cur)


def set_in_flight(conn: Connection, conversation_id: int, message_id: int) -> None:
    conn.execute("UPDATE conversations SET in_flight_message_id = ? WHERE id = ?", (message_id, conversation_id))


def count_turn(conn: Connection, conversation_id: int, message_id: int, now: float) -> None:
    """``message_id`` took a turn and is now the one in flight."""
    conn.execute(
        "UPDATE conversations SET turn_count = turn_count + 1, in_flight_message_id = ?, updated_at = ? WHERE id = ?",
        (message_id, now, conversation_id),
    )


def record_transition(
    conn: Connection,
    conversation_id: int,
    *,
    from_state: str | None,
    to_state: str,
    actor: str,
    reason: str,
    at: float,
    by_attempt: int | None = None,
) -> None:
    """``by_attempt``: the attempt (its message id) whose worker's server made this move."""
    conn.execute(
        "INSERT INTO conversation_transitions (conversation_id, from_state, to_state, actor, reason, at, by_attempt)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        (conversation_id, from_state, to_state, actor, reason, at, by_attempt),
    )


def move_conversation(
    conn: Connection,
    conversation_id: int,
    *,
    from_state: str,
    to_state: str,
    actor: str,
    reason: str,
    at: float,
    ends: bool,
    by_attempt: int | None = None,
) -> None:
    """Change the state and record the transition, inside the caller's write transaction. A move that
    ``ends`` the conversation (into a terminal state) clears its in-flight message: nothing is in
    flight in a conversation that never changes again, and retention may then take it whole."""
    conn.execute(
        "UPDATE conversations SET state = ?, updated_at = ?,"
        " in_flight_message_id = CASE WHEN ? THEN NULL ELSE in_flight_message_id END WHERE id = ?",
        (to_state, at, ends, conversation_id),
    )
    record_transition(
        conn,
        conversation_id,
        from_state=from_state,
        to_state=to_state,
        actor=actor,
        reason=reason,
        at=at,
        by_attempt=by_attempt,
    )


def states_moved_by_attempt(conn: Connection, conversation_id: int, attempt: int) -> set[str]:
    """The states a conversation was moved into by ``attempt``'s worker."""
    rows = conn.execute(
        "SELECT DISTINCT to_state FROM conversation_transitions WHERE conversation_id = ? AND by_attempt = ?",
        (conversation_id, attempt),
    ).fetchall()
    return {row[0] for row in rows}


def recent_transitions(conn: Connection, conversation_id: int, limit: int) -> list[Row]:
    """The last ``limit`` transitions, newest first."""
    rows: list[Row] = conn.execute(
        "SELECT from_state, to_state, actor, reason, at FROM conversation_transitions"
        " WHERE conversation_id = ? ORDER BY id DESC LIMIT ?",
        (conversation_id, limit),
    ).fetchall()
    return rows


class AttemptTotals(NamedTuple):
    attempts: int
    cost_usd: float | None
    input_tokens: int | None
    output_tokens: int | None


def attempt_totals(conn: Connection, conversation_id: int) -> AttemptTotals:
    """How many attempts the conversation's messages had, and the sums of their recorded cost
    and tokens (None when no attempt recorded any)."""
    row = conn.execute(
        "SELECT count(*), sum(a.cost_usd), sum(a.input_tokens), sum(a.output_tokens)"
        " FROM dispatch_attempts AS a JOIN messages AS m ON m.id = a.message_id WHERE m.conversation_id = ?",
        (conversation_id,),
    ).fetchone()
    return AttemptTotals(row[0], row[1], row[2], row[3])
