"""Presence: which sessions of each agent are really there, from process evidence alone.

Every MCP server process registers one row in ``sessions`` when it starts (agent, role,
host, pid and /proc start time, the CLI process that started it), learns its client's
name and version from the MCP ``initialize`` handshake, notes its last tool call (at most
once every ``TOUCH_EVERY_SECONDS``: no write per call) and the wake paths it has, and
removes its row on a clean exit. A row whose process died (kill -9, a crash) is removed
lazily: when a new session registers, and when the ``who`` tool reads.

Liveness is the one rule of process identity, ``processes.liveness``: a session is ``alive``
when its pid runs with the recorded start time on this host; ``dead`` when it does not (gone,
a zombie, or a recycled pid). A row of another host cannot be seen here: on a store that spans
hosts (PostgreSQL) its server renews it every quarter of ``SESSION_LEASE_SECONDS``, and it is
``alive`` while renewed within the lease, else ``unknown``. ``last_call_at`` is telemetry for
"idle for", never evidence of life.

No MCP SDK import here: the server wires ``ServerPresence`` in (``serve`` and
``mcp_server``); the ``who`` view (``dispatcher/dispatch/who.py``) reads it with ``sessions``.
"""

import json
import os
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dispatcher.core import clock, host_lease, processes
from dispatcher.core.errors import BridgeError
from dispatcher.core.locations import StoreLocation
from dispatcher.core.logs import get_logger
from dispatcher.store import STORE_ERRORS, Connection, StoreHandle, write_transaction
from dispatcher.store import sessions as stored
from dispatcher.store.store_clock import store_now

ROLES = ("interactive", "worker")
# How a session can be woken: a Claude Code hook, a Monitor line (inbox watch), the
# claude/channel notification, the bridge://inbox resource subscription.
WAKE_PATHS = ("hook", "monitor", "channel", "resource")
# The wake path a running ``inbox watch`` provides: it counts while one of the session's watch
# processes is alive (a row per watch, with its pid and start time), never as a stored flag.
WATCH_PATH = "monitor"
# The paths stored on the session row: armed by the session's own CLI (hook) or server.
MARKED_PATHS = tuple(p for p in WAKE_PATHS if p != WATCH_PATH)
# The paths that put a notice in front of the model. A resource subscription is recorded but
# does not count: Claude Code and Codex never start a turn on `resources/updated`.
WAKING_PATHS = ("hook", "monitor", "channel")
TOUCH_EVERY_SECONDS = 5.0
SESSION_LEASE_SECONDS = 60.0  # how long another host counts a session alive after its renewal
# A client's name and version are shown as names: anything else is dropped, not shown.
_CLIENT_TEXT = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._:@/+()-]{0,63}")
# Where the handshake-free protocol (2026-07-28) carries the client's name on every request.
CLIENT_INFO_META_KEY = "io.modelcontextprotocol/clientInfo"
# Wrappers between an MCP client and this server (``uv run ... server.py``): the client is above them.
_WRAPPERS = frozenset({"uv", "uvx"})

log = get_logger("agent_bridge.presence")


# -- the decisions (pure) --------------------------------------------------------------------
def should_touch(last_touch: float | None, now: float, every: float = TOUCH_EVERY_SECONDS) -> bool:
    """Whether a tool call at ``now`` writes ``last_call_at`` (the first always does;
    then at most once every ``every`` seconds; a clock that went back writes again)."""
    return last_touch is None or now - last_touch >= every or now < last_touch


def session_lease() -> float:
    return host_lease.host_lease(SESSION_LEASE_SECONDS)


def role_of(setting: str) -> str:
    """The session's role from ``AGENT_BRIDGE_ROLE``: ``worker`` stays worker, ``session`` is interactive."""
    return "worker" if setting == "worker" else "interactive"


def client_text(value: object) -> str | None:
    """A client's name or version as a shown name, or None when it is not one."""
    if not isinstance(value, str) or not _CLIENT_TEXT.fullmatch(value):
        return None
    return value


def wake_paths_of(raw: object) -> list[str]:
    """The stored JSON list, keeping only known paths (a damaged value reads as none)."""
    try:
        paths = json.loads(raw) if isinstance(raw, str) else []
    except ValueError:
        return []
    return [p for p in WAKE_PATHS if isinstance(paths, list) and p in paths]


# -- process evidence ------------------------------------------------------------------------
def client_pid_of(pid: int) -> int | None:
    """The CLI process that started the server ``pid``: its parent, above any ``uv`` wrapper."""
    return processes.nearest_ancestor(pid, skipping=_WRAPPERS)


Probe = Callable[[int], str | None]


# -- rows ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Session:
    """A session row as stored, with what presence judges of it: the wake paths that work now and
    its liveness."""

    record: stored.SessionRecord
    wake_paths: tuple[str, ...]
    liveness: str

    @property
    def id(self) -> int:
        return self.record.id

    @property
    def agent(self) -> str:
        return self.record.agent

    @property
    def role(self) -> str:
        return self.record.role

    def view(self, now: float) -> dict[str, Any]:
        """Ids, enums, numbers and names only."""
        r = self.record
        last = r.last_call_at if r.last_call_at is not None else r.started_at
        return {
            "id": r.id,
            "role": r.role,
            "liveness": self.liveness,
            "host": r.host,
            "pid": r.pid,
            "client": client_text(r.client_name),
            "client_version": client_text(r.client_version),
            "since_seconds": round(max(0.0, now - r.started_at), 1),
            "idle_seconds": round(max(0.0, now - last), 1),
            "wake_paths": list(self.wake_paths),
        }


def sessions(
    conn: Connection,
    agent: str | None = None,
    *,
    here: str | None = None,
    probe: Probe = processes.start_time,
    now: float | None = None,
) -> list[Session]:
    """Every session row (of ``agent``), each with its liveness, oldest first. Its wake paths are
    the marked ones, plus ``monitor`` while one of its watch processes is alive."""
    here = processes.this_host() if here is None else here
    now = store_now(conn) if now is None else now
    lease = session_lease()
    found = []
    records = stored.session_records(conn, agent)
    watched = _watched_sessions(conn, agent, {r.id: r.host for r in records}, here, probe)
    for r in records:
        seen = probe(r.pid) if r.host == here else None
        marked = [p for p in wake_paths_of(r.wake_paths) if p in MARKED_PATHS]
        paths = [p for p in WAKE_PATHS if p in marked or (p == WATCH_PATH and r.id in watched)]
        found.append(
            Session(
                r,
                tuple(paths),
                processes.liveness(
                    r.host, r.start_time, here=here, observed_start=seen, renewed_at=r.renewed_at, now=now, lease=lease
                ),
            )
        )
    return found


def _watch_liveness(watch: stored.WatchRecord, host: str, here: str, probe: Probe) -> str:
    """A watch runs on its session's host (the session's CLI started it): the same rule as a session's."""
    seen = probe(watch.pid) if host == here else None
    return processes.liveness(host, watch.start_time, here=here, observed_start=seen)


def _watched_sessions(conn: Connection, agent: str | None, hosts: dict[int, str], here: str, probe: Probe) -> set[int]:
    """The sessions (of ``hosts``: id -> host) with a watch whose process is alive."""
    return {
        w.session_id
        for w in stored.watch_records(conn, agent)
        if w.session_id in hosts and _watch_liveness(w, hosts[w.session_id], here, probe) == "alive"
    }


def prune_dead(conn: Connection, *, here: str | None = None, probe: Probe = processes.start_time) -> int:
    """Remove this host's rows whose process is gone (sessions, with their watches, and the watches
    of live sessions); inside the caller's transaction or alone. Returns the sessions removed."""
    here = processes.this_host() if here is None else here
    dead = [s.id for s in sessions(conn, here=here, probe=probe) if s.liveness == "dead"]
    for sid in dead:
        stored.delete_session(conn, sid)
    hosts = {r.id: r.host for r in stored.session_records(conn)}
    for w in stored.watch_records(conn):
        if w.session_id in hosts and _watch_liveness(w, hosts[w.session_id], here, probe) == "dead":
            stored.delete_watch(conn, w.id)
    return len(dead)


def register_session(
    conn: Connection,
    agent: str,
    role: str,
    *,
    pid: int,
    start_time: str | None,
    client_pid: int | None,
    now: float,
    here: str | None = None,
    probe: Probe = processes.start_time,
) -> int:
    """Clean this host's dead rows and add this process's row; returns its id."""
    if role not in ROLES:
        raise BridgeError("invalid_role", f"a session's role is one of {', '.join(ROLES)}, not {role!r}.")
    here = processes.this_host() if here is None else here
    with write_transaction(conn):
        removed = prune_dead(conn, here=here, probe=probe)
        session_id = stored.insert_session(
            conn,
            agent=agent,
            role=role,
            host=here,
            pid=pid,
            start_time=start_time,
            client_pid=client_pid,
            started_at=now,
        )
    if removed:
        log.info("sessions_pruned", count=removed)
    return session_id


def end_session(conn: Connection, session_id: int) -> bool:
    with write_transaction(conn):
        return stored.delete_session(conn, session_id)


def set_client(conn: Connection, session_id: int, name: object, version: object) -> None:
    """The client named in ``initialize``'s clientInfo (a value that is not a name is kept as none)."""
    with write_transaction(conn):
        stored.set_client(conn, session_id, client_text(name), client_text(version))


def touch(conn: Connection, session_id: int, now: float) -> None:
    with write_transaction(conn):
        stored.set_last_call(conn, session_id, now)


def renew(conn: Connection, session_id: int, now: float) -> bool:
    """Say that session ``session_id`` still runs (for the hosts that cannot see its process)."""
    with write_transaction(conn):
        return stored.renew_session(conn, session_id, now)


def record_wake_path(conn: Connection, session_id: int, path: str) -> list[str]:
    """Note that session ``session_id`` has the wake path ``path`` (idempotent); returns its paths.

    Wake paths call this when they are armed for a session (the server's channel or resource
    subscription, a hook firing for the session's client). Raises ``invalid_wake_path`` for
    an unknown path and ``unknown_session`` when the row is gone.
    """
    if path not in MARKED_PATHS:
        raise BridgeError(
            "invalid_wake_path",
            f"a marked wake path is one of {', '.join(MARKED_PATHS)}, not {path!r} "
            f"({WATCH_PATH} is a running watch's: add_watch).",
        )
    if isinstance(session_id, bool) or not isinstance(session_id, int):
        raise BridgeError("unknown_session", f"a session id is an integer, not {session_id!r}.")
    with write_transaction(conn):
        raw = stored.stored_wake_paths(conn, session_id)
        if raw is None:
            raise BridgeError("unknown_session", f"there is no session #{session_id}: it has ended; nothing to mark.")
        paths = wake_paths_of(raw)
        if path not in paths:
            paths = [p for p in WAKE_PATHS if p in (*paths, path)]
            stored.set_wake_paths(conn, session_id, paths)
    return paths


def add_watch(conn: Connection, session_id: int, *, pid: int, start_time: str | None) -> int | None:
    """A running ``inbox watch`` (``pid``, its start time) of session ``session_id``: while that
    process is alive the session has the wake path ``monitor``. Returns the watch's id, None when
    the session is gone."""
    with write_transaction(conn):
        if stored.stored_wake_paths(conn, session_id) is None:
            return None
        return stored.insert_watch(conn, session_id, pid=pid, start_time=start_time)


def end_watch(conn: Connection, watch_id: int) -> None:
    """The watch ended (a watch killed with -9 never gets here: its dead process stops counting)."""
    with write_transaction(conn):
        stored.delete_watch(conn, watch_id)


def mark_from_descendant(db: StoreLocation, agent: str, path: str) -> int | None:
    """For a hook the CLI started: record ``path`` on the session of ``agent`` whose CLI is an
    ancestor of this process. Returns the session id, None when there is no such session or no
    store. Looks read-only first and writes only to change a row. Never raises: the hook it
    serves must go on whatever the store says."""
    from dispatcher.store import open_store
    from dispatcher.store.readonly import open_read_only

    conn: Connection | None = None
    try:
        conn = open_read_only(db)
        if conn is None:
            return None
        found = session_of_ancestor(conn, agent)
        if found is None:
            return None
        raw = stored.stored_wake_paths(conn, found)
        if raw is None:  # ended meanwhile
            return None
        if path in wake_paths_of(raw):
            return found
        conn.close()
        conn = open_store(db)
        record_wake_path(conn, found, path)
        return found
    except STORE_ERRORS + (OSError, BridgeError, TypeError):  # silent: a hook's output is the model's
        return None
    finally:
        if conn is not None:
            conn.close()


def watch_from_descendant(db: StoreLocation, agent: str, *, watch_id: int | None = None) -> int | None:
    """For an ``inbox watch`` the CLI started: add this process as a watch of the session of
    ``agent`` whose CLI is an ancestor (returns the watch's id, None when there is no such
    session or no store), or, given ``watch_id``, end that watch. Never raises: the watch must go
    on whatever the store says."""
    from dispatcher.store import open_store
    from dispatcher.store.changes import store_file_id

    if store_file_id(db) is None:  # no store yet: a watch never creates one
        return None
    conn: Connection | None = None
    try:
        conn = open_store(db)
        if watch_id is not None:
            end_watch(conn, watch_id)
            return watch_id
        found = session_of_ancestor(conn, agent)
        pid = os.getpid()
        return None if found is None else add_watch(conn, found, pid=pid, start_time=processes.start_time(pid))
    except STORE_ERRORS + (OSError, BridgeError, TypeError):  # silent: a watch's output is the model's
        return None
    finally:
        if conn is not None:
            conn.close()


def session_of_client(conn: Connection, agent: str, client_pid: int) -> int | None:
    """The newest session of ``agent`` started by the CLI process ``client_pid`` on this host
    (how a hook, a child of that CLI, finds the session it speaks for)."""
    return stored.newest_session_of_client(conn, agent, client_pid, processes.this_host())


def session_of_ancestor(conn: Connection, agent: str, pid: int | None = None) -> int | None:
    """The session of ``agent`` whose CLI process is the nearest ancestor of ``pid`` (default: this
    process): how a hook or a Monitor command, run by the CLI through a shell, finds its session."""
    for ancestor in processes.ancestors(pid):
        if (found := session_of_client(conn, agent, ancestor)) is not None:
            return found
    return None


def has_wakeable_session(
    conn: Connection, agent: str, *, here: str | None = None, probe: Probe = processes.start_time
) -> bool:
    """A live interactive session of ``agent`` with a path that wakes the model (of another host:
    renewed within its lease, with a marked path; its ``inbox watch`` is that host's to see)."""
    if not stored.may_have_wakeable_session(conn, agent):  # the usual case: no query of /proc at all
        return False
    return any(
        s.role == "interactive" and set(s.wake_paths) & set(WAKING_PATHS) and s.liveness == "alive"
        for s in sessions(conn, agent, here=here, probe=probe)
    )


# -- the server's side -----------------------------------------------------------------------
class ServerPresence:
    """This server process's session row: registered at start, client set on ``initialize``,
    touched on tool calls (throttled), removed on a clean exit. A failing write is logged
    and never fails a request: presence is a view, the messages are the truth."""

    def __init__(self, store: StoreHandle, agent: str, role: str) -> None:
        self.store = store
        self.agent = agent
        self.role = role
        pid = os.getpid()
        self.session_id: int | None = None
        try:  # a store that refuses the row (full, read-only) still serves messages: no row, then
            conn = store.connection()
            self.session_id = register_session(
                conn,
                agent,
                role,
                pid=pid,
                start_time=processes.start_time(pid),
                client_pid=client_pid_of(pid),
                now=store_now(conn),
            )
        except STORE_ERRORS + (OSError, BridgeError) as exc:
            log.warning("session_register_failed", agent=agent, error=type(exc).__name__)
        self._last_touch: float | None = None
        self._client_known = False

    def _write(self, what: str, fn: Callable[..., object], *args: object) -> None:
        if self.session_id is None:
            return
        try:
            fn(self.store.connection(), self.session_id, *args)
        except STORE_ERRORS + (OSError, BridgeError) as exc:
            log.warning("presence_write_failed", what=what, error=type(exc).__name__)

    def on_client(self, info: object) -> None:
        """The client's ``{name, version}``: from ``initialize``'s clientInfo, or (the handshake-free
        protocol) from a request's ``_meta``; recorded once."""
        if self._client_known or not isinstance(info, dict):
            return
        self._client_known = True
        self._write("client", set_client, info.get("name"), info.get("version"))

    def on_call(self, now: float | None = None) -> None:
        now = clock.now() if now is None else now
        if should_touch(self._last_touch, now):
            self._last_touch = now
            self._write("touch", touch, now)

    def wake_path(self, path: str) -> None:
        """For the server's own wake paths (channel, resource) once armed."""
        self._write("wake_path", record_wake_path, path)

    def renew_on_own_connection(self) -> None:
        """Renew the row through a connection of its own, opened and closed here: it runs in a
        worker thread, so a store that does not answer never stalls the server's event loop, and
        it never shares a transaction with a tool call on the server's connection."""
        from dispatcher.store import open_store

        session_id = self.session_id
        if session_id is None:
            return
        try:
            conn = open_store(self.store.location)
            try:
                renew(conn, session_id, store_now(conn))
            finally:
                conn.close()
        except STORE_ERRORS + (OSError, BridgeError) as exc:
            log.warning("presence_write_failed", what="renew", error=type(exc).__name__)

    def close(self) -> None:
        self._write("end", lambda conn, sid: end_session(conn, sid))
        self.session_id = None

    async def middleware(self, ctx: object, call_next: Callable[[Any], Awaitable[object]]) -> object:
        """A server middleware: the client's name from the first request that carries it
        (``initialize``, or any request's ``_meta``); a tool call that succeeded touches the row
        (a refused one leaves the whole store unchanged, as every refusal does)."""
        method = getattr(ctx, "method", None)
        params = getattr(ctx, "params", None)
        params = params if isinstance(params, Mapping) else {}
        result = await call_next(ctx)
        if method == "tools/call" and not (isinstance(result, Mapping) and result.get("isError")):
            self.on_call()
        if not self._client_known:
            meta = params.get("_meta")
            info = params.get("clientInfo") if method == "initialize" else None
            if info is None and isinstance(meta, Mapping):
                info = meta.get(CLIENT_INFO_META_KEY)
            self.on_client(dict(info) if isinstance(info, Mapping) else None)
        return result
