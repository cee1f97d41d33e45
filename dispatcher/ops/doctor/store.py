"""Doctor's checks of the store (either backend), its directory, its disk and the runtime directory."""

import os
import stat
from pathlib import Path

from dispatcher.core.errors import BridgeError
from dispatcher.core.findings import ERROR, Finding, finding
from dispatcher.core.locations import StoreUrl, shown
from dispatcher.ops.doctor.context import Context, mode, one_line
from dispatcher.store import STORE_ERRORS, Connection, schema_version, views
from dispatcher.store.readonly import open_read_only, store_is_idle

LOW_DISK_BYTES = 100 * 1024 * 1024


def _missing(where: str) -> Finding:
    return finding("store_missing", f"no store yet {where}; it is created on first use")


def _busy(db: Path) -> Finding:
    return finding("store_busy", f"{db} came into use while doctor read it")


def check_store(ctx: Context) -> list[Finding]:
    if isinstance(ctx.locations.db, StoreUrl):
        return _check_postgres_store(ctx, ctx.locations.db)

    db: Path = ctx.locations.db
    found: list[Finding] = []
    directory = db.parent
    if directory.is_dir():
        found += _disk(directory)
        if mode(directory) & 0o077:
            found.append(
                finding(
                    "store_dir_mode",
                    f"the store's directory {directory} is {mode(directory):04o}, not 0700: other users can list it",
                    directory=directory,
                )
            )
    if not db.exists():
        return found + [_missing(f"at {db}")]
    info = db.lstat()
    if not stat.S_ISREG(info.st_mode):
        return found + [finding("store_not_file", f"{db} is not a regular file")]
    if info.st_uid != os.getuid():
        found.append(
            finding(
                "store_owner",
                f"{db} belongs to uid {info.st_uid}, not to you (uid {os.getuid()})",
                uid=os.getuid(),
                db=db,
            )
        )
    for path in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
        if path.exists() and mode(path) & 0o077:
            found.append(
                finding(
                    "store_mode",
                    f"{path.name} is {mode(path):04o}, not 0600: other users can read the messages",
                    path=path,
                )
            )
    try:
        conn, idle = _open_read_only(db)
    except STORE_ERRORS as exc:
        return found + [finding("store_unreadable", f"cannot open {db} read-only ({one_line(exc)})", variant="open")]
    if conn is None:  # removed since the check above
        return found + [_missing(f"at {db}")]
    try:
        version = schema_version(conn)
        check = views.integrity_problems(conn, 5)
    except STORE_ERRORS as exc:
        conn.close()
        from dispatcher.store import store_corruption

        if idle and Path(f"{db}-wal").exists():  # a writer started while we read the file as immutable
            return found + [_busy(db)]
        if store_corruption(exc) is not None:
            return found + [
                finding(
                    "store_corrupt",
                    f"{db} is not a SQLite database or is damaged ({one_line(exc)})",
                    variant="unreadable",
                )
            ]
        return found + [finding("store_unreadable", f"cannot read {db} ({one_line(exc)})", variant="read")]
    if check != ["ok"] and idle and Path(f"{db}-wal").exists():
        conn.close()
        return found + [_busy(db)]
    if check != ["ok"]:
        conn.close()
        return found + [
            finding(
                "store_corrupt",
                f"the integrity check (PRAGMA quick_check) of {db} failed: {one_line('; '.join(check))[:200]}",
                variant="check",
            )
        ]
    ctx.conn = conn
    found += _schema(ctx, str(db), version)
    if not [f for f in found if f.level == ERROR]:
        found.append(finding("store_ok", f"{db}: schema {version}, quick_check ok, mode 0600, yours"))
    return found


def _schema(ctx: Context, where: str, version: int) -> list[Finding]:
    """The store's schema version against this code's (either backend)."""
    from dispatcher.store import SCHEMA_VERSION

    if version > SCHEMA_VERSION:
        return [
            finding(
                "schema_too_new",
                f"{where} has schema version {version}; this agent-bridge knows up to {SCHEMA_VERSION}",
            )
        ]
    if version < SCHEMA_VERSION:
        return [
            finding(
                "schema_old",
                f"{where} has schema version {version} (current {SCHEMA_VERSION}); it is migrated on the next start",
            )
        ]
    ctx.schema_current = True
    return []


def _check_postgres_store(ctx: Context, url: StoreUrl) -> list[Finding]:
    """A PostgreSQL store: the server answers, the database holds a store, its schema is known."""

    where = shown(url)
    try:
        conn = open_read_only(url)
    except (BridgeError,) + STORE_ERRORS as exc:
        if isinstance(exc, BridgeError) and exc.code == "schema_too_new":  # refused as every process refuses it
            return [finding("schema_too_new", one_line(exc))]
        return [
            finding(
                "store_unreadable",
                f"cannot reach the PostgreSQL store {where} ({one_line(exc)})",
                variant="postgres",
            )
        ]
    if conn is None:
        return [_missing(f"in {where}")]
    ctx.conn = conn
    version = schema_version(conn)
    found = _schema(ctx, where, version)
    if not [f for f in found if f.level == ERROR]:
        found.append(finding("store_ok", f"{where}: schema {version}, PostgreSQL {views.server_version(conn)}"))
    return found


def _open_read_only(db: Path) -> tuple[Connection | None, bool]:
    """A read-only connection that creates no file (None: there is no store file); True when the store was idle."""
    idle = store_is_idle(db)
    return open_read_only(db), idle


def _disk(directory: Path) -> list[Finding]:
    try:
        vfs = os.statvfs(directory)
    except OSError:
        return []
    free = vfs.f_bavail * vfs.f_frsize
    if free < LOW_DISK_BYTES:
        return [finding("disk_low", f"only {free // (1024 * 1024)} MiB free on the store's filesystem ({directory})")]
    return []


def check_runtime(ctx: Context) -> list[Finding]:
    runtime = ctx.locations.private_dir()
    if not runtime.exists():
        return []
    if mode(runtime) & 0o077:
        return [
            finding(
                "runtime_dir_mode",
                f"the runtime directory {runtime} is {mode(runtime):04o}, not 0700",
                runtime=runtime,
            )
        ]
    if runtime.stat().st_uid != os.getuid():
        return [finding("runtime_dir_owner", f"the runtime directory {runtime} is not yours")]
    return []
