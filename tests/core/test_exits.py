"""The one decision from an exception to the CLI's line and exit status, case by case."""

import errno
import sqlite3
from pathlib import Path

import pytest

from dispatcher.core.config import UnknownAgent
from dispatcher.core.errors import AlreadyAttempted, BridgeError, ConfigError, DispatchRefused, StoreUnavailable
from dispatcher.core.exits import Failure, Where, describe
from dispatcher.core.locations import InvalidSetting
from dispatcher.store import BACKEND_ERRORS, store_errors

WHERE = Where(db=Path("/s/state/bridge.db"), runtime=Path("/s/state/runtime"))


def _wrapped(exc: BaseException) -> BaseException:
    """``exc`` as it leaves the store boundary."""
    try:
        with store_errors():
            raise exc
    except StoreUnavailable as wrapped:
        return wrapped


@pytest.mark.parametrize(
    ("exc", "code", "status"),
    [
        (InvalidSetting("AGENT_BRIDGE_LOG_LEVEL", "LOUD", "no"), "invalid_setting", 2),
        (ConfigError(Path("/c.json"), "agents: field required"), "config_invalid", 2),
        (UnknownAgent("nobody", ["claude"], Path("/c.json")), "unknown_agent", 2),
        (AlreadyAttempted(7), "already_attempted", 3),
        (DispatchRefused("not_dispatchable", "no"), "not_dispatchable", 3),
        (BridgeError("attempt_failed", "ended failed"), "attempt_failed", 4),
        (BridgeError("store_missing", "deleted"), "store_missing", 1),
        (BridgeError("unsafe_path", "owned by uid 65534"), "unsafe_path", 1),
        (BridgeError("schema_too_new", "upgrade"), "schema_too_new", 1),
        (sqlite3.DatabaseError("file is not a database"), "store_corrupt", 1),
        (sqlite3.DatabaseError("database disk image is malformed"), "store_corrupt", 1),
        (_wrapped(sqlite3.DatabaseError("file is not a database")), "store_corrupt", 1),
        (sqlite3.OperationalError("database is locked"), "store_unavailable", 1),
        (_wrapped(sqlite3.OperationalError("database or disk is full")), "store_unavailable", 1),
        (OSError(errno.ENOSPC, "No space left on device"), "store_unavailable", 1),
        (ValueError("sleep length must be non-negative"), "internal_error", 1),
    ],
)
def test_each_failure_has_a_code_and_a_documented_status(exc, code, status):
    failure = describe(exc, WHERE, BACKEND_ERRORS)
    assert (failure.code, failure.status) == (code, status)
    assert failure.line().startswith(f"agent-bridge: {code}: ")


@pytest.mark.parametrize(
    ("filename", "code", "names"),
    [
        ("/s/state/bridge.db", "store_unavailable", "cannot open the store /s/state/bridge.db"),
        ("/s/state/bridge.db-wal", "store_unavailable", "AGENT_BRIDGE_DB"),
        ("/s", "store_unavailable", "AGENT_BRIDGE_DB"),  # a directory on the way to the store
        ("/s/state/runtime/claude.lock", "file_unavailable", "AGENT_BRIDGE_RUNTIME_DIR"),
        ("/home/u/.config/systemd/user/x.service", "file_unavailable", "are yours to write"),
    ],
)
def test_os_errors_name_the_file_and_the_setting_behind_it(filename, code, names):
    failure = describe(NotADirectoryError(errno.ENOTDIR, "Not a directory", filename), WHERE, BACKEND_ERRORS)
    assert failure.code == code and filename in failure.message and names in failure.message


def test_a_refusal_wrapped_elsewhere_keeps_its_own_code():
    failure = describe(BridgeError("store_missing", "deleted"), WHERE, BACKEND_ERRORS)
    assert failure.message == "deleted"


def test_internal_error_points_at_the_log_or_at_debug():
    exc = KeyError("x")
    assert (
        "/s/state/runtime/dispatcher.log"
        in describe(exc, Where(log=Path("/s/state/runtime/dispatcher.log")), BACKEND_ERRORS).message
    )
    assert "AGENT_BRIDGE_LOG_LEVEL=DEBUG" in describe(exc, Where(), BACKEND_ERRORS).message


def test_the_line_is_always_one_line():
    assert Failure("x", "a\nb\r\nc", 1).line() == "agent-bridge: x: a b c"
