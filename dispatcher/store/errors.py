"""The store's error boundary: what the domain may catch, and how the backend's errors read.

The domain never names the database driver. It catches ``STORE_ERRORS`` (any failure of
the backend: locked past the busy timeout, read-only, full, damaged, unreadable) or
``TRANSIENT_STORE_ERRORS`` (the subset where retrying shortly may help), asks
``store_corruption`` whether a failure means the file is not a (sound) database, and
wraps a block in ``store_errors()`` to turn backend and OS errors into ``StoreUnavailable``.
``BACKEND_ERRORS`` hands the first and the third to ``core.exits``, which sits below the store.
"""

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from dispatcher.core.errors import StoreUnavailable
from dispatcher.core.exits import BackendErrors, cause_chain


class PostgresError(Exception):
    """A PostgreSQL failure as the store's boundary names it: the connector raises these from
    psycopg's errors, so that nothing outside ``store/postgres.py`` imports psycopg."""


class PostgresTransientError(PostgresError):
    """The server is gone or restarting, or a lock, a deadlock or a cancel stopped the statement."""


class PostgresConnectionLost(PostgresTransientError):
    """The connection broke while a statement or a COMMIT waited for the server's answer: the
    server may have done it (committed) or not; only reading the store again tells."""


class PostgresIntegrityError(PostgresError):
    """A constraint refused the write (a key, a foreign key, a check)."""


class PostgresPermissionDenied(PostgresError):
    """The role may not do this: a privilege it lacks, or a row policy refused the row (a
    per-agent role writing as another agent)."""


class PostgresCorruption(PostgresError):
    """The server says its data or an index is damaged."""


STORE_ERRORS: tuple[type[Exception], ...] = (sqlite3.Error, PostgresError)
TRANSIENT_STORE_ERRORS: tuple[type[Exception], ...] = (sqlite3.OperationalError, PostgresTransientError)
# The answer was lost with the connection: what was asked may have been done (PostgreSQL alone:
# SQLite's commit is a local file's, whose outcome its caller always learns).
CONNECTION_LOST: tuple[type[Exception], ...] = (PostgresConnectionLost,)
# A constraint refused the write, on either backend.
INTEGRITY_ERRORS: tuple[type[Exception], ...] = (sqlite3.IntegrityError, PostgresIntegrityError)
# What SQLite says about a file that is not a (sound) database: retrying cannot help.
_CORRUPTION = ("file is not a database", "database disk image is malformed", "file is encrypted")


def store_corruption(exc: BaseException) -> Exception | None:
    """The backend's error saying the file is not a (sound) database, anywhere in the cause chain."""
    for link in cause_chain(exc):
        if isinstance(link, sqlite3.DatabaseError) and any(m in str(link) for m in _CORRUPTION):
            return link
        if isinstance(link, PostgresCorruption):
            return link
    return None


BACKEND_ERRORS = BackendErrors(errors=STORE_ERRORS, corruption=store_corruption)


def injected_store_failure(message: str) -> Exception:
    """The error a full disk or a held lock raises, for the fault points tests arm."""
    return sqlite3.OperationalError(message)


@contextmanager
def store_errors(what: str = "the bridge store") -> Iterator[None]:
    """Wrap a block that uses the store: locked past the busy timeout, read-only, full,
    corrupt or unreadable files surface as ``store_unavailable`` (nothing half-done)."""
    try:
        yield
    except PostgresPermissionDenied as exc:
        raise StoreUnavailable(
            "store_permission_denied",
            f"the PostgreSQL server refused what {what} was asked ({exc}); nothing was changed. AGENT_BRIDGE_DB's role "
            "may act only as the agent `agent-bridge db-role` gave it: give this agent's processes (AGENT_ID) "
            "the URL printed for it, or use the store's owner.",
        ) from exc
    except PostgresConnectionLost as exc:
        raise StoreUnavailable(  # the code the README promises for a dropped connection; the text is honest
            "store_unavailable",
            f"the connection to the PostgreSQL store broke before {what} had its answer ({exc}); what was asked "
            "may have been done, or not. `agent-bridge show ID` or `agent-bridge inbox` tells; check before "
            "repeating anything that is not safe to repeat.",
        ) from exc
    except STORE_ERRORS + (OSError,) as exc:
        raise StoreUnavailable(
            "store_unavailable",
            f"{what} could not complete this operation ({type(exc).__name__}: {exc}); nothing was changed. "
            "Retry shortly; if it persists, check the store's disk, permissions and `agent-bridge listener status`.",
        ) from exc
