"""The one reader of the clocks. Every stored time is float Unix seconds (``now``); tools show
ISO 8601 UTC (``iso``); waits, deadlines inside one process and durations use ``monotonic``,
which no clock step moves. A test (``tests/core/test_one_clock.py``) fails when another module reads a clock."""

import functools
import time
from datetime import UTC, date, datetime, timedelta, tzinfo
from datetime import time as datetime_time


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


def local_day_start(ts: float, zone: tzinfo | None = None) -> float:
    """The midnight that began the day holding ``ts`` in ``zone`` (None: this host's zone); a
    conversion, no clock is read."""
    return _midnight(datetime.fromtimestamp(ts, zone).date(), zone)


def next_local_day_start(ts: float, zone: tzinfo | None = None) -> float:
    """The midnight that ends the day holding ``ts`` in ``zone`` (None: this host's zone)."""
    return _midnight(datetime.fromtimestamp(ts, zone).date() + timedelta(days=1), zone)


def _midnight(day: date, zone: tzinfo | None) -> float:
    """The first instant of ``day``: its midnight taken with ``fold=0``. Where clocks fall back
    across midnight (America/Havana, 2026-11-01) midnight happens twice and the first one begins
    the day (a time of the repeated hour carries ``fold=1``, which must not be kept); where they
    spring forward over it, fold=0 reads the missing midnight as the moment of the jump."""
    return datetime.combine(day, datetime_time(0), tzinfo=zone).timestamp()
