"""The one reader of the clocks. Every stored time is float Unix seconds (``now``); tools show
ISO 8601 UTC (``iso``); waits, deadlines inside one process and durations use ``monotonic``,
which no clock step moves. A test (``tests/core/test_one_clock.py``) fails when another module reads a clock."""

import functools
import time
from datetime import UTC, datetime


def now() -> float:
    """Wall time, Unix seconds: what the store records and compares."""
    return time.time()


def monotonic() -> float:
    """Seconds on a clock that only moves forward: for deadlines and durations within a process."""
    return time.monotonic()


def utc_stamp() -> str:
    """Now as ``2026-11-30T15:19:39Z`` (to the second): the time of a diagnostic log line."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now()))


@functools.lru_cache(maxsize=4096, typed=True)  # an inbox shows the same stored times on every read
def iso(ts: float | None) -> str | None:
    """ISO 8601 UTC, or None for no time and for a stored value no calendar date can show
    (NaN, infinities, 1e300, text): one odd row must not break a whole inbox."""
    if isinstance(ts, bool) or not isinstance(ts, int | float):
        return None
    try:
        return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    except (OverflowError, OSError, ValueError):
        return None


def local_day_start(ts: float) -> float:
    """The local midnight that began the day holding ``ts`` (a conversion: no clock is read)."""
    return datetime.fromtimestamp(ts).replace(hour=0, minute=0, second=0, microsecond=0).timestamp()


def next_local_day_start(ts: float) -> float:
    """The local midnight that ends the day holding ``ts`` (25 h on, then back to midnight: DST-safe)."""
    return local_day_start(local_day_start(ts) + 25 * 3600)
