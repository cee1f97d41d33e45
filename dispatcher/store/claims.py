"""Claims: the active-claim rule in its Python and its SQL form, side by side, and the claim writes.

A claim is two columns of a message (``claim_owner``, ``claim_expires_at``). The rule is
defined here once; ``tests/store/test_claims_rule.py`` checks both forms against each other on
generated rows. Code that needs the rule inside a query uses ``active_claim_sql``.
"""

from collections.abc import Mapping
from typing import Any

from dispatcher.store.types import Connection, Row

# No lease outlives this from the moment the bridge reads it: one taken while the clock
# was far ahead would otherwise hide its message for that long.
LEASE_CAP_SECONDS = 3600


def lease_is_active(owner: object, expires: Any, now: float) -> bool:
    """A claim is active while it has an owner and an expiry later than ``now``."""
    return owner is not None and expires is not None and expires > now


def claim_is_active(row: Row | Mapping[str, Any], now: float) -> bool:
    """``lease_is_active`` of a row's claim columns."""
    return lease_is_active(row["claim_owner"], row["claim_expires_at"], now)


def active_claim_sql(alias: str = "") -> str:
    """``claim_is_active`` as an SQL condition over ``alias.`` columns, binding ``:now``;
    never NULL (each comparison is guarded by an IS NOT NULL before it), so ``NOT`` of it is safe."""
    p = f"{alias}." if alias else ""
    return f"({p}claim_owner IS NOT NULL AND {p}claim_expires_at IS NOT NULL AND {p}claim_expires_at > :now)"


def take_claim(conn: Connection, message_id: int, *, owner: str, expires_at: float, now: float) -> None:
    """Claim (or renew) a message for ``owner``; a claimed message counts as delivered."""
    conn.execute(
        "UPDATE messages SET claim_owner = ?, claim_expires_at = ?, delivered_at = COALESCE(delivered_at, ?)"
        " WHERE id = ?",
        (owner, expires_at, now, message_id),
    )


def drop_claim(conn: Connection, message_id: int) -> None:
    conn.execute("UPDATE messages SET claim_owner = NULL, claim_expires_at = NULL WHERE id = ?", (message_id,))


def drop_claim_of(conn: Connection, message_id: int, owner: str) -> None:
    """End ``owner``'s claim on a message (nobody else's)."""
    conn.execute(
        "UPDATE messages SET claim_owner = NULL, claim_expires_at = NULL WHERE id = ? AND claim_owner = ?",
        (message_id, owner),
    )
