"""How a command ends when it fails: one line on stderr and a documented exit status.

Every failure of ``agent-bridge`` (and of ``server.py`` before its handshake) ends with
exactly one line ``agent-bridge: <code>: <what to do>``, never a traceback. ``describe``
is the one pure decision from an exception to (code, message, exit status); ``report``
prints it and, for a bug, keeps the traceback in the private ``dispatcher.log``.
Exceptions that escaped the store boundary unwrapped (the backend's, OS errors) are named
here the way ``store_errors`` names them. The core sits below the store and never imports
the database driver: the caller passes the store's ``BackendErrors`` (which exceptions are
the backend's, and which of them say the file is damaged).
"""

import json
import os
import sys
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from dispatcher.core import clock
from dispatcher.core.errors import BridgeError, DispatchRefused, RequestRefused

EXIT_FAILURE = 1  # the command was right, but the store, a file or the bridge itself failed
EXIT_USAGE = 2  # the command line, a setting, config.json or the agent id is wrong; nothing was done
EXIT_REFUSED = 3  # a dispatch was refused before anything was launched
EXIT_ATTEMPT_FAILED = 4  # `dispatch`: the attempt ran and ended failed, timeout or crashed
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)

USAGE_CODES = frozenset(
    {
        "usage_error",
        "not_postgres",
        "wrong_agent_role",
        "invalid_setting",
        "config_invalid",
        "unknown_agent",
        "config_exists",
        "workspace_unsafe",
        "invalid_duration",
        "message_not_found",
        "approval_unknown",
        "invalid_grant",
    }
)


@dataclass(frozen=True)
class Failure:
    code: str
    message: str
    status: int

    def line(self) -> str:
        """Exactly one line, whatever the message holds (paths and SQLite messages may have newlines)."""
        return " ".join(f"agent-bridge: {self.code}: {self.message}".split())


@dataclass(frozen=True)
class Where:
    """The files a failure may be about, when the settings could be read."""

    db: Path | None = None
    runtime: Path | None = None
    log: Path | None = None


@dataclass(frozen=True)
class BackendErrors:
    """How the store's backend fails: its exception classes, and the one (anywhere in the
    cause chain) saying the file is not a (sound) database. ``dispatcher.store.errors``
    provides it."""

    errors: tuple[type[Exception], ...]
    corruption: Callable[[BaseException], Exception | None]


def cause_chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, then what caused it (explicitly or while handling), each once."""
    seen = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        yield link
        link = link.__cause__ or link.__context__


def _status(exc: BridgeError) -> int:
    if isinstance(exc, DispatchRefused):
        return EXIT_REFUSED
    if exc.code == "attempt_failed":
        return EXIT_ATTEMPT_FAILED
    return EXIT_USAGE if exc.code in USAGE_CODES or isinstance(exc, RequestRefused) else EXIT_FAILURE


def _within(path: Path, base: Path | None) -> bool:
    """``path`` is ``base``, inside it, or one of the directories leading to it."""
    return base is not None and (path == base or base in path.parents or path in base.parents)


def _store_name(where: Where) -> str:
    return f"the store {where.db}" if where.db else "the store"


def _os_failure(exc: OSError, where: Where) -> Failure:
    reason = exc.strerror or type(exc).__name__
    if exc.filename is None:
        return Failure(
            "store_unavailable",
            f"a file operation failed ({reason}); nothing more was done. Check free "
            "disk space and the permissions of the store's and the runtime directory.",
            EXIT_FAILURE,
        )
    path = Path(os.fsdecode(exc.filename))
    sidecars = {Path(f"{where.db}{s}") for s in ("-wal", "-shm", "-journal")} if where.db else set()
    if path in sidecars or _within(path, where.db):
        what = f"cannot open the store {path}" if path == where.db else f"cannot use {path} for {_store_name(where)}"
        return Failure(
            "store_unavailable",
            f"{what} ({reason}); nothing was changed. AGENT_BRIDGE_DB must name a "
            "file in a directory you can create and write.",
            EXIT_FAILURE,
        )
    hint = (
        "AGENT_BRIDGE_RUNTIME_DIR (default: <store dir>/runtime) must be a directory you own and can write"
        if _within(path, where.runtime)
        else "check that it and its directory exist and are yours to write"
    )
    return Failure("file_unavailable", f"cannot use {path} ({reason}); {hint}.", EXIT_FAILURE)


def describe(exc: BaseException, where: Where, backend: BackendErrors) -> Failure:
    """The one line and exit status for any exception that ends a command."""
    corrupt = backend.corruption(exc)
    if corrupt is not None and (not isinstance(exc, BridgeError) or exc.code == "store_unavailable"):
        return Failure(
            "store_corrupt",
            f"{_store_name(where)} is not a SQLite database or is damaged ({corrupt}); "
            "nothing was changed. Move it aside (with any -wal and -shm file next to it) and restore a "
            "backup; without a backup, the next start creates a new, empty store.",
            EXIT_FAILURE,
        )
    if isinstance(exc, BridgeError):
        return Failure(exc.code, exc.message, _status(exc))
    if isinstance(exc, backend.errors):
        return Failure(
            "store_unavailable",
            f"{_store_name(where)} could not complete this operation "
            f"({type(exc).__name__}: {exc}); nothing was changed. Retry shortly; if it persists, check "
            "the store's disk and permissions.",
            EXIT_FAILURE,
        )
    if isinstance(exc, OSError):
        return _os_failure(exc, where)
    if where.log is not None:
        pointer = f"its traceback is in {where.log}"
    else:
        pointer = "run it again with AGENT_BRIDGE_LOG_LEVEL=DEBUG to see the traceback"
    return Failure(
        "internal_error",
        f"unexpected {type(exc).__name__}: this is a bug in agent-bridge; {pointer}. Please report it.",
        EXIT_FAILURE,
    )


def _where() -> Where:
    from dispatcher.core.locations import Locations

    try:
        found = Locations.from_env()
    except BridgeError:
        return Where()
    return Where(db=found.db if isinstance(found.db, Path) else None, runtime=found.private_dir())


def _keep_traceback(exc: BaseException, runtime: Path | None) -> Path | None:
    """Append the traceback to the private dispatcher.log (only if the runtime directory exists)."""
    if runtime is None or not runtime.is_dir():
        return None
    from dispatcher.core.private_files import open_private_append

    log = runtime / "dispatcher.log"
    entry = {
        "event": "cli_internal_error",
        "level": "error",
        "error": type(exc).__name__,
        "timestamp": clock.utc_stamp(),
        "exception": "".join(traceback.format_exception(exc)),
    }
    try:
        fd = open_private_append(log)
        try:
            os.write(fd, (json.dumps(entry) + "\n").encode())
        finally:
            os.close(fd)
    except Exception:  # noqa: BLE001 - the one line must still be printed
        return None
    return log


def report(exc: BaseException, backend: BackendErrors) -> int:
    """Print the one line for ``exc`` on stderr and return the exit status."""
    where = _where()
    debug = os.environ.get("AGENT_BRIDGE_LOG_LEVEL", "").upper() == "DEBUG"
    if debug and not isinstance(exc, BridgeError):
        traceback.print_exception(exc, file=sys.stderr)
    failure = describe(exc, where, backend)
    if failure.code == "internal_error":
        log = _keep_traceback(exc, where.runtime)
        failure = describe(exc, Where(where.db, where.runtime, log), backend)
    print(failure.line(), file=sys.stderr, flush=True)  # noqa: T201 - the one failure line; server.py uses it before its handshake, outside click
    return failure.status


def finish(command: Callable[[], int], backend: Callable[[], BackendErrors]) -> NoReturn:
    """Run ``command`` and exit with its status; a failure ends with its one line (``report``; the
    store's ``backend`` errors are asked for only then), Ctrl-C with the interrupted line. The one
    ending of ``agent-bridge`` and of the listener's process (``dispatch.listener_main``)."""
    try:
        status = command()
    except KeyboardInterrupt:
        print("agent-bridge: interrupted: stopped by Ctrl-C; nothing more was done.", file=sys.stderr, flush=True)  # noqa: T201 - the one failure line
        sys.exit(EXIT_INTERRUPTED)
    except Exception as exc:  # noqa: BLE001 - any other failure is one documented line and exit status
        sys.exit(report(exc, backend()))
    sys.exit(status)
