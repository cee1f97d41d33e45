"""Wall-clock helpers. Every stored time is float Unix seconds; tools show ISO 8601 UTC."""

import time
from datetime import UTC, datetime


def now() -> float:
    return time.time()


def iso(ts: float | None) -> str | None:
    """ISO 8601 UTC, or None for no time and for a stored value no calendar date can show
    (NaN, infinities, 1e300, text): one odd row must not break a whole inbox."""
    if isinstance(ts, bool) or not isinstance(ts, int | float):
        return None
    try:
        return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    except (OverflowError, OSError, ValueError):
        return None
