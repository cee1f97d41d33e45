"""Leases: a recipient's server process claims a message so no other process works on it.

The owner is a per-process worker id. Expiry is checked when a tool runs; there are no
background timers, so an expired lease simply stops counting.
"""

from typing import Any

from dispatcher.core.clock import iso
from dispatcher.core.errors import BridgeError
from dispatcher.core.validation import check_message_id, clamp
from dispatcher.store import Connection, Row, write_transaction
from dispatcher.store.claims import LEASE_CAP_SECONDS, claim_is_active, drop_claim, take_claim
from dispatcher.store.messages import cap_far_lease, fetch_message
from dispatcher.store.store_clock import store_now

LEASE_RANGE_SECONDS = (30, LEASE_CAP_SECONDS)


def _cap_lease(conn: Connection, message_id: int, now: float) -> None:
    """In its own transaction: a refusal below rolls back, and the cap must stay."""
    row = fetch_message(conn, message_id)
    if row is not None:
        cap_far_lease(conn, row, now)


def _load_own_message(conn: Connection, message_id: int, agent: str) -> Row:
    row = fetch_message(conn, message_id)
    if row is None or agent not in (row["sender"], row["recipient"]):
        raise BridgeError("message_not_found", f"no message #{message_id} sent to or by you ({agent}).")
    if row["recipient"] != agent:
        raise BridgeError(
            "not_recipient", f"message #{message_id} is for {row['recipient']}; only its recipient can claim it."
        )
    return row


def claim_message(
    conn: Connection,
    *,
    agent: str,
    worker_id: str,
    message_id: int,
    lease_seconds: float = 300,
    now: float | None = None,
) -> dict[str, Any]:
    now = store_now(conn) if now is None else now
    check_message_id(message_id)
    lease = clamp(lease_seconds, *LEASE_RANGE_SECONDS, "lease_seconds")
    _cap_lease(conn, message_id, now)
    with write_transaction(conn):
        row = _load_own_message(conn, message_id, agent)
        if row["acknowledged_at"] is not None:
            raise BridgeError(
                "already_acknowledged", f"message #{message_id} is already acknowledged; there is nothing to claim."
            )
        if claim_is_active(row, now) and row["claim_owner"] != worker_id:
            raise BridgeError(
                "claimed_by_other",
                f"message #{message_id} is claimed by another process until {iso(row['claim_expires_at'])}; "
                "leave it, or claim it after the lease expires.",
            )
        renewed = claim_is_active(row, now)
        expires = now + lease
        take_claim(conn, message_id, owner=worker_id, expires_at=expires, now=now)
    return {"message_id": message_id, "claim_expires_at": iso(expires), "lease_seconds": lease, "renewed": renewed}


def release_message(
    conn: Connection, *, agent: str, worker_id: str, message_id: int, now: float | None = None
) -> dict[str, Any]:
    now = store_now(conn) if now is None else now
    check_message_id(message_id)
    _cap_lease(conn, message_id, now)
    with write_transaction(conn):
        row = _load_own_message(conn, message_id, agent)
        if not claim_is_active(row, now) or row["claim_owner"] != worker_id:
            raise BridgeError(
                "not_claimed_by_you",
                f"message #{message_id} has no active claim of this process to release.",
            )
        drop_claim(conn, message_id)
    return {"message_id": message_id, "released": True}
