"""Small, dependency-free statistics used by every measurement."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def percentile(samples: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None for no samples."""
    if not samples:
        return None
    ordered = sorted(samples)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def summarize(samples: Sequence[float]) -> dict[str, float | int | None]:
    """Median, p99, min, max and mean of a list of durations (seconds)."""
    if not samples:
        return {"n": 0, "median": None, "p99": None, "min": None, "max": None, "mean": None}
    return {
        "n": len(samples),
        "median": statistics.median(samples),
        "p99": percentile(samples, 99),
        "min": min(samples),
        "max": max(samples),
        "mean": statistics.fmean(samples),
    }
