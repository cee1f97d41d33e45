"""How long a process of another host counts as running after it last renewed its row.

/proc shows this host's processes only. On a store that several hosts share, a process of
another host proves that it runs by renewing its row (a listener's lease, an attempt's lease,
a session) every quarter of its lease; ``renewed_within`` is the one rule that reads such a
renewal. Tests shorten every lease with ``AGENT_BRIDGE_TEST_HOST_LEASE_SECONDS``.
"""

import os

HOST_LEASE_ENV = "AGENT_BRIDGE_TEST_HOST_LEASE_SECONDS"
RENEWALS_PER_LEASE = 4  # three renewals may fail (a busy store) before the lease lapses


def host_lease(default: float) -> float:
    """``default`` seconds, or the tests' shorter lease."""
    try:
        return float(os.environ.get(HOST_LEASE_ENV) or default)
    except ValueError:
        return default


def renew_every(lease: float) -> float:
    return lease / RENEWALS_PER_LEASE


def renewed_within(renewed_at: float | None, now: float, lease: float) -> bool:
    """Whether a row renewed at ``renewed_at`` (None: never) still counts at ``now``."""
    return renewed_at is not None and now < renewed_at + lease
