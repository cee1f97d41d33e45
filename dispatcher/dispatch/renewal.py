"""The supervisor keeps its worker's claim alive for the worker's whole budget.

A worker claims its message with an ordinary lease (300 s by default), shorter than a
worker budget (1800 s by default); without renewal, interactive sessions of the same
agent would see the task as unclaimed half-way through. Only a claim that is still
active, on an unacknowledged message, and owned by the attempt (the barrier takes the
claim under the attempt's claim owner, and only that attempt's worker server acts as it)
is extended; a released or expired claim is never revived and no lease is shortened.

The same round renews the attempt's own lease, by which other hosts on one store judge that
it still runs (``reconcile``): ``ATTEMPT_LEASE_SECONDS`` ahead, several renewals long.
"""

from dispatcher.core.host_lease import host_lease
from dispatcher.store import Connection
from dispatcher.store.attempts import active_claim, extend_attempt_lease, extend_claim
from dispatcher.store.connection import write_transaction

RENEW_EVERY_SECONDS = 30.0
LEASE_AHEAD_SECONDS = 300.0
ATTEMPT_LEASE_SECONDS = 4 * RENEW_EVERY_SECONDS


def attempt_lease_seconds() -> float:
    return host_lease(ATTEMPT_LEASE_SECONDS)


def renew_attempt_lease(conn: Connection, message_id: int, now: float) -> bool:
    """Say the attempt still runs here, for another ``attempt_lease_seconds``; False once settled."""
    with write_transaction(conn):
        return extend_attempt_lease(conn, message_id, now + attempt_lease_seconds())


def renew_worker_claim(conn: Connection, message_id: int, *, owner: str, until: float, now: float) -> bool:
    """Extend the attempt's active claim on ``message_id`` (held by ``owner``, the attempt's claim
    owner) to ``until``; True if extended."""
    with write_transaction(conn):
        claim = active_claim(conn, message_id, now)
        if claim is None or claim[0] != owner or claim[1] >= until:
            return False
        extend_claim(conn, message_id, until)
    return True
