"""Doctor's checks of the store (either backend), its directory, its disk and the runtime directory.

The store is opened read-only once (``read_store``, by whichever check asks first); each check
asks one question of what that open found, or of the store's files."""

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from dispatcher.core.errors import BridgeError
from dispatcher.core.findings import Finding, finding
from dispatcher.core.locations import StoreUrl, shown
from dispatcher.ops.doctor.check import check
from dispatcher.ops.doctor.context import Context, mode, one_line
from dispatcher.store import STORE_ERRORS, schema_version, views
from dispatcher.store.readonly import open_read_only, store_is_idle

LOW_DISK_BYTES = 100 * 1024 * 1024
OPEN = "open"


@dataclass(frozen=True)
class StoreRead:
    """What opening the store read-only found: ``state`` is OPEN or the code of what kept it from
    opening (store_missing, store_not_file, store_unreadable, store_busy, store_corrupt, schema_too_new)."""

    state: str
    message: str = ""
    variant: str = ""
    version: int = 0


def read_store(ctx: Context) -> StoreRead:
    """The store opened read-only, once per run (``ctx.conn`` set when it opened and passed its checks)."""
    return ctx.fact("store", lambda: _read(ctx))


def _read(ctx: Context) -> StoreRead:
    from dispatcher.store import SCHEMA_VERSION

    db = ctx.locations.db
    read = _read_postgres(ctx, db) if isinstance(db, StoreUrl) else _read_sqlite(ctx, db)
    ctx.schema_current = read.state == OPEN and read.version == SCHEMA_VERSION
    return read


def _read_sqlite(ctx: Context, db: Path) -> StoreRead:
    if not db.exists():
        return StoreRead("store_missing", f"no store yet at {db}; it is created on first use")
    if not stat.S_ISREG(db.lstat().st_mode):
        return StoreRead("store_not_file", f"{db} is not a regular file")
    idle = store_is_idle(db)
    try:
        conn = open_read_only(db)
    except STORE_ERRORS as exc:
        return StoreRead("store_unreadable", f"cannot open {db} read-only ({one_line(exc)})", "open")
    if conn is None:  # removed since the check above
        return StoreRead("store_missing", f"no store yet at {db}; it is created on first use")
    busy = StoreRead("store_busy", f"{db} came into use while doctor read it")
    try:
        version, problems = schema_version(conn), views.integrity_problems(conn, 5)
    except STORE_ERRORS as exc:
        conn.close()
        from dispatcher.store import store_corruption

        if idle and Path(f"{db}-wal").exists():  # a writer started while we read the file as immutable
            return busy
        if store_corruption(exc) is not None:
            said = f"{db} is not a SQLite database or is damaged ({one_line(exc)})"
            return StoreRead("store_corrupt", said, "unreadable")
        return StoreRead("store_unreadable", f"cannot read {db} ({one_line(exc)})", "read")
    if problems != ["ok"]:
        conn.close()
        if idle and Path(f"{db}-wal").exists():
            return busy
        said = f"the integrity check (PRAGMA quick_check) of {db} failed: {one_line('; '.join(problems))[:200]}"
        return StoreRead("store_corrupt", said, "check")
    ctx.conn = conn
    return StoreRead(OPEN, version=version)


def _read_postgres(ctx: Context, url: StoreUrl) -> StoreRead:
    """A PostgreSQL store: the server answers, the database holds a store, its schema is known."""
    try:
        conn = open_read_only(url)
    except (BridgeError,) + STORE_ERRORS as exc:
        if isinstance(exc, BridgeError) and exc.code == "schema_too_new":  # refused as every process refuses it
            return StoreRead("schema_too_new", one_line(exc))
        return StoreRead(
            "store_unreadable", f"cannot reach the PostgreSQL store {shown(url)} ({one_line(exc)})", "postgres"
        )
    if conn is None:
        return StoreRead("store_missing", f"no store yet in {shown(url)}; it is created on first use")
    ctx.conn = conn
    return StoreRead(OPEN, version=schema_version(conn))


def _sqlite_file(ctx: Context) -> Path | None:
    """The SQLite store's file when it is a regular file (the file checks are the server's business on PostgreSQL)."""
    db = ctx.locations.db
    return db if isinstance(db, Path) and db.exists() and stat.S_ISREG(db.lstat().st_mode) else None


def _sqlite_directory(ctx: Context) -> Path | None:
    db = ctx.locations.db
    return db.parent if isinstance(db, Path) and db.parent.is_dir() else None


@check()
def disk_low(ctx: Context) -> list[Finding]:
    """Is the store's filesystem nearly full?"""
    if (directory := _sqlite_directory(ctx)) is None:
        return []
    try:
        vfs = os.statvfs(directory)
    except OSError:
        return []
    free = vfs.f_bavail * vfs.f_frsize
    if free >= LOW_DISK_BYTES:
        return []
    return [finding("disk_low", f"only {free // (1024 * 1024)} MiB free on the store's filesystem ({directory})")]


@check()
def store_dir_mode(ctx: Context) -> list[Finding]:
    """Can other users list the store's directory?"""
    if (directory := _sqlite_directory(ctx)) is None or not mode(directory) & 0o077:
        return []
    said = f"the store's directory {directory} is {mode(directory):04o}, not 0700: other users can list it"
    return [finding("store_dir_mode", said, directory=directory)]


def _not_open(code: str, question: str):  # one check per way the store can fail to open: the open says which
    def run(ctx: Context) -> list[Finding]:
        read = read_store(ctx)
        return [finding(code, read.message, variant=read.variant)] if read.state == code else []

    run.__name__ = run.__qualname__ = code
    run.__doc__ = question
    return check()(run)


store_missing = _not_open("store_missing", "Is there no store yet (it is created on first use)?")
store_not_file = _not_open("store_not_file", "Is the store's path not a regular file?")


@check()
def store_owner(ctx: Context) -> list[Finding]:
    """Does the store file belong to someone else?"""
    if (db := _sqlite_file(ctx)) is None or (owner := db.lstat().st_uid) == os.getuid():
        return []
    said = f"{db} belongs to uid {owner}, not to you (uid {os.getuid()})"
    return [finding("store_owner", said, uid=os.getuid(), db=db)]


@check()
def store_mode(ctx: Context) -> list[Finding]:
    """Can other users read the store or its -wal and -shm files?"""
    if (db := _sqlite_file(ctx)) is None:
        return []
    return [
        finding(
            "store_mode", f"{path.name} is {mode(path):04o}, not 0600: other users can read the messages", path=path
        )
        for path in (db, Path(f"{db}-wal"), Path(f"{db}-shm"))
        if path.exists() and mode(path) & 0o077
    ]


store_unreadable = _not_open(
    "store_unreadable", "Can the store not be opened or read (on PostgreSQL: its server not be reached)?"
)
store_busy = _not_open("store_busy", "Did the store come into use while doctor read it as idle?")
store_corrupt = _not_open("store_corrupt", "Is the store not a SQLite database, or does its quick_check fail?")


def _where(ctx: Context) -> str:
    return shown(ctx.locations.db) if isinstance(ctx.locations.db, StoreUrl) else str(ctx.locations.db)


@check()
def schema_too_new(ctx: Context) -> list[Finding]:
    """Was the store written by a newer agent-bridge?"""
    from dispatcher.store import SCHEMA_VERSION

    read = read_store(ctx)
    if read.state == "schema_too_new":
        return [finding("schema_too_new", read.message)]
    if read.state != OPEN or read.version <= SCHEMA_VERSION:
        return []
    said = f"{_where(ctx)} has schema version {read.version}; this agent-bridge knows up to {SCHEMA_VERSION}"
    return [finding("schema_too_new", said)]


@check()
def schema_old(ctx: Context) -> list[Finding]:
    """Is the store of an older schema (migrated on the next start)?"""
    from dispatcher.store import SCHEMA_VERSION

    read = read_store(ctx)
    if read.state != OPEN or read.version >= SCHEMA_VERSION:
        return []
    said = (
        f"{_where(ctx)} has schema version {read.version} (current {SCHEMA_VERSION}); it is migrated on the next start"
    )
    return [finding("schema_old", said)]


@check()
def store_ok(ctx: Context) -> list[Finding]:
    """Did the store open, pass its checks and is it yours, private and of a schema this code knows?"""
    read = read_store(ctx)
    if read.state != OPEN or ctx.reported("store_owner", "store_mode", "schema_too_new"):
        return []
    if isinstance(ctx.locations.db, StoreUrl):
        said = f"{_where(ctx)}: schema {read.version}, PostgreSQL {views.server_version(ctx.store())}"
    else:
        said = f"{_where(ctx)}: schema {read.version}, quick_check ok, mode 0600, yours"
    return [finding("store_ok", said)]


@check()
def runtime_dir_mode(ctx: Context) -> list[Finding]:
    """Can other users reach the runtime directory?"""
    runtime = ctx.locations.private_dir()
    if not runtime.exists() or not mode(runtime) & 0o077:
        return []
    said = f"the runtime directory {runtime} is {mode(runtime):04o}, not 0700"
    return [finding("runtime_dir_mode", said, runtime=runtime)]


@check()
def runtime_dir_owner(ctx: Context) -> list[Finding]:
    """Does the runtime directory belong to someone else?"""
    runtime = ctx.locations.private_dir()
    if not runtime.exists() or runtime.stat().st_uid == os.getuid():
        return []
    return [finding("runtime_dir_owner", f"the runtime directory {runtime} is not yours")]
