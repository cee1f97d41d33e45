"""The store boundary: sqlite3 and OS errors become ``StoreUnavailable`` with a code and a fix."""

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from dispatcher.core.errors import StoreUnavailable


@contextmanager
def store_errors(what: str = "the bridge store") -> Iterator[None]:
    """Wrap a block that uses the store: locked past the busy timeout, read-only, full,
    corrupt or unreadable files surface as ``store_unavailable`` (nothing half-done)."""
    try:
        yield
    except (sqlite3.Error, OSError) as exc:
        raise StoreUnavailable(
            "store_unavailable",
            f"{what} could not complete this operation ({type(exc).__name__}: {exc}); nothing was changed. "
            "Retry shortly; if it persists, check the store's disk, permissions and `agent-bridge listener status`.",
        ) from exc
