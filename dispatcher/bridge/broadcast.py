"""Broadcast: ``send_message(recipient="*", kind="notice")`` -> one copy per other declared agent.

A broadcast is a notice and nothing else: a notice never wakes a headless worker (the
dispatch rule in ``dispatch/queue.py`` dispatches only tasks and review results) and it
never joins a conversation, so it takes no turn. The copies are ordinary messages sharing
a ``broadcasts`` row, which also holds the sender's ``dedup_key`` for the whole set: a
repeat answers the same broadcast id and copy ids, and a key names either one broadcast or
one direct message, never both (``dedup_conflict``). The check and every copy are written
in one ``BEGIN IMMEDIATE`` transaction, so a refusal writes nothing.
"""

from collections.abc import Collection, Sequence
from typing import Any

from dispatcher.core.clock import iso
from dispatcher.core.errors import BridgeError
from dispatcher.store import Connection, write_transaction
from dispatcher.store.broadcasts import broadcast_by_dedup_key, broadcast_copies, insert_broadcast
from dispatcher.store.messages import insert_message, message_by_dedup_key

BROADCAST_RECIPIENT = "*"
BROADCAST_KIND = "notice"


def broadcast_refusal(kind: object, reply_to: object, conversation_id: object) -> str | None:
    """What makes these arguments no broadcast (the message says what to do); None when they are one."""
    if kind != BROADCAST_KIND:
        return (
            f"recipient '*' sends a notice to every other declared agent, so it needs kind='notice' "
            f"(got {'a plain message' if kind is None else repr(kind)}); a task, a result or a plain note goes "
            "to one agent by name. Nothing was sent."
        )
    if reply_to is not None:
        return (
            "a broadcast (recipient '*') answers nothing: drop reply_to, or reply to that message's "
            "sender by name. Nothing was sent."
        )
    if conversation_id is not None:
        return (
            "a broadcast (recipient '*') never joins a conversation: drop conversation_id, or send the "
            "notice to the conversation's other agent by name. Nothing was sent."
        )
    return None


def broadcast_recipients(sender: str, agents: Collection[str]) -> list[str]:
    """Every declared agent except the sender, sorted; refused when that is nobody (a broadcast
    reaching no one would look delivered and spend its dedup key on nothing)."""
    recipients = sorted(a for a in agents if a != sender)
    if not recipients:
        raise BridgeError(
            "no_recipients",
            f"config.json declares no agent besides you ({sender}), so a broadcast would reach nobody; nothing "
            "was sent. Declare the other agents in config.json first.",
        )
    return recipients


def _answer(broadcast_id: int, copies: Sequence[tuple[int, str]], duplicate: bool, created_at: float) -> dict[str, Any]:
    return {
        "broadcast_id": broadcast_id,
        "ids": [c[0] for c in copies],
        "recipients": [c[1] for c in copies],
        "duplicate": duplicate,
        "kind": BROADCAST_KIND,
        "created_at": iso(created_at),
    }


def send_broadcast(
    conn: Connection,
    *,
    sender: str,
    text: str,
    agents: Collection[str],
    kind: str | None,
    reply_to: int | None,
    conversation_id: int | None,
    dedup_key: str | None,
    deadline: float | None,
    now: float,
) -> dict[str, Any]:
    """Arguments already checked by ``messages.send_message`` (sender, body, key, types)."""
    refusal = broadcast_refusal(kind, reply_to, conversation_id)
    if refusal is not None:
        raise BridgeError("invalid_broadcast", refusal)
    recipients = broadcast_recipients(sender, agents)
    with write_transaction(conn):
        if dedup_key is not None:
            earlier = broadcast_by_dedup_key(conn, sender, dedup_key)
            if earlier is not None:
                return _answer(earlier["id"], broadcast_copies(conn, earlier["id"]), True, earlier["created_at"])
            direct = message_by_dedup_key(conn, sender, dedup_key)
            if direct is not None:
                raise BridgeError(
                    "dedup_conflict",
                    f"this dedup_key was already used for message #{direct['id']} to {direct['recipient']}, so it "
                    "cannot name a broadcast; nothing was sent. Pick a new dedup_key for this broadcast.",
                )
        broadcast_id = insert_broadcast(conn, sender=sender, dedup_key=dedup_key, created_at=now)
        copies = [
            (
                insert_message(
                    conn,
                    sender=sender,
                    recipient=recipient,
                    text=text,
                    kind=BROADCAST_KIND,
                    created_at=now,
                    response_deadline=deadline,
                    broadcast_id=broadcast_id,
                ),
                recipient,
            )
            for recipient in recipients
        ]
    return _answer(broadcast_id, copies, False, now)
