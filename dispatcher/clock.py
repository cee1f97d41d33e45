"""Wall-clock helpers. Every stored time is float Unix seconds; tools show ISO 8601 UTC."""

import time
from datetime import UTC, datetime


def now() -> float:
    return time.time()


def iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
