"""``agent-bridge retry ID --allow GRANT``: send a finished task again, as a new message linked to
the old one, with a grant for that task alone (docs/approvals.md). The old message keeps its
attempt and verdict; the agent's profile in config.json is not touched.
"""

from typing import Any

from dispatcher.core.clock import iso
from dispatcher.core.errors import BridgeError
from dispatcher.core.grants import GrantRefused, parse_grant
from dispatcher.core.locations import LocationsLike
from dispatcher.ops.approvals import person
from dispatcher.store import open_store, store_errors, write_transaction
from dispatcher.store.attempts import get_attempt
from dispatcher.store.grants import insert_grant
from dispatcher.store.messages import fetch_message, insert_message
from dispatcher.store.store_clock import store_now


def retry(settings: LocationsLike, message_id: int, grants: list[str]) -> dict[str, Any]:
    try:
        for grant in grants:
            parse_grant(grant)
    except GrantRefused as exc:
        raise BridgeError("invalid_grant", f"{exc}; nothing was sent.") from None
    with store_errors():
        conn = open_store(settings.db)
        try:
            with write_transaction(conn):
                now = store_now(conn)
                old = fetch_message(conn, message_id)
                if old is None:
                    raise BridgeError("message_not_found", f"there is no message #{message_id}; check the id.")
                attempt = get_attempt(conn, message_id)
                why = _refusal(old, attempt)
                if why is not None:
                    raise BridgeError("retry_refused", f"message #{message_id} {why}; nothing was sent.")
                new = insert_message(
                    conn,
                    sender=old["sender"],
                    recipient=old["recipient"],
                    text=old["text"],
                    kind="task",
                    created_at=now,
                )
                insert_grant(conn, message_id=new, retry_of=message_id, grants=list(grants), by=person(), now=now)
        finally:
            conn.close()
    return {
        "id": new,
        "retry_of": message_id,
        "recipient": old["recipient"],
        "grants": list(grants),
        "previous_outcome": attempt["outcome"] if attempt is not None else None,
        "sent_at": iso(now),
    }


def _refusal(old: Any, attempt: Any) -> str | None:
    """Why this message cannot be retried (pure), or None."""
    if old["kind"] != "task":
        return "is not a task"
    if old["conversation_id"] is not None:
        return "is a conversation's turn (its turns are the conversation's own; start a new one)"
    if attempt is None:
        return "was never attempted (`agent-bridge dispatch` runs it)"
    if attempt["state"] != "finished":
        return "has an attempt still running; retry it once it ends"
    return None
