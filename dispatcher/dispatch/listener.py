"""The long-running listener: one per agent, dispatching one message at a time.

It holds an exclusive flock for its agent, wakes on any commit to the store (``PRAGMA
data_version``, polled cheaply) or a change to config.json or the disabled marker, and
forks a supervisor for the oldest dispatchable message, waiting for it before looking
again. Stale attempts are reconciled on start and after every supervisor.
"""

import fcntl
import logging
import os
import signal
import sys
import time
from pathlib import Path

import psutil  # noqa: F401  (loaded before fork, so each supervisor starts with it: see procs)

from ..config import BridgeConfig, load_config
from ..errors import BridgeError, ConfigError, DispatchRefused
from ..logs import configure_logging, get_logger
from ..settings import BridgeSettings
from ..store import Store
from . import queue
from .attempts import get_attempt
from .paths import AgentPaths
from .procs import flock_holder
from .progress import write_progress
from .reconcile import reconcile
from .supervisor import supervise

POLL_SECONDS = 0.02
FILE_CHECK_EVERY = 10  # polls between looks at config.json, the disabled marker and the store file
RESCAN_SECONDS = 5.0  # also look again without a signal: leases expire, orphans finish
STORE_RETRY_SECONDS = 1.0  # how often to look for a deleted or replaced store file
log = get_logger("agent_bridge.listener")


class _Stop(Exception):
    pass


def _raise_stop(signum, frame):
    raise _Stop()


def _file_key(path: Path) -> tuple | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


class Listener:
    def __init__(self, settings: BridgeSettings, agent: str) -> None:
        self.settings = settings
        self.agent = agent
        self.paths = AgentPaths.of(settings, agent).ensure()
        self.config_path = settings.config_path()
        self.config: BridgeConfig | None = None
        self.config_error: str | None = None
        self._config_key: tuple | None = ()
        self._progress: dict = {"stage": "starting", "current": None, "last": None, "error": None, "auto": None}
        self._lock_fd: int | None = None
        self._written = False

    # -- progress ---------------------------------------------------------------------
    def _set(self, **changes) -> None:
        """Update the progress document; rewrite it only when something changed."""
        updated = {**self._progress, **changes}
        if updated != self._progress or not self._written:
            self._progress, self._written = updated, True
            write_progress(self.paths.progress, agent=self.agent, listener_pid=os.getpid(), **updated)

    # -- configuration ------------------------------------------------------------------
    def _reload_config(self) -> None:
        key = _file_key(self.config_path)
        if key == self._config_key:
            return
        self._config_key = key
        try:
            config = load_config(self.config_path)
            if self.agent not in config.agents:
                raise ConfigError(self.config_path, f"agent {self.agent!r} is not declared")
        except ConfigError as exc:
            self.config, self.config_error = None, exc.reason
            log.warning("config_invalid", agent=self.agent, path=str(self.config_path))
            self._set(stage="error", error=f"config: {exc.reason}")
            return
        self.config, self.config_error = config, None
        self._set(error=None, auto=config.agents[self.agent].auto)

    # -- main loop ------------------------------------------------------------------------
    def run(self) -> int:
        self._lock_fd = os.open(self.paths.lock, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = flock_holder(self.paths.lock)
            print(f"agent-bridge: the {self.agent} listener is already running (pid {holder}).", file=sys.stderr)
            return 0
        os.ftruncate(self._lock_fd, 0)
        os.write(self._lock_fd, f"{os.getpid()}\n".encode())
        if self.paths.disabled_marker.exists():
            print(
                f"agent-bridge: the {self.agent} listener is disabled; run `agent-bridge listener enable "
                f"--agent {self.agent}`.",
                file=sys.stderr,
            )
            self._set(stage="stopped")
            return 0
        signal.signal(signal.SIGTERM, _raise_stop)
        signal.signal(signal.SIGINT, _raise_stop)
        log.info("listener_started", agent=self.agent, pid=os.getpid())
        self._set(stage="starting")
        store = Store(self.settings.db)
        try:
            self._loop_while_store_missing(store)
        except _Stop:
            log.info("listener_stopping", agent=self.agent, reason="signal")
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            self._set(stage="stopped", current=None)
            store.close()
        return 0

    def _loop_while_store_missing(self, store: Store) -> None:
        """Run the loop; while the store file is deleted or being replaced, say so and wait.

        Exiting instead would have systemd start a fresh listener, which would create a new,
        empty store next to the old file's -wal/-shm (or read the old store through them).
        """
        while True:
            try:
                return self._loop(store)
            except BridgeError as exc:
                if exc.code != "store_missing":
                    raise
                log.warning("store_missing", agent=self.agent)
                self._set(stage="error", current=None, error=str(exc))
            while not self.paths.disabled_marker.exists():
                time.sleep(STORE_RETRY_SECONDS)
                try:
                    store.connection()
                except BridgeError as exc:
                    if exc.code != "store_missing":
                        raise
                    continue
                self._set(error=f"config: {self.config_error}" if self.config_error else None)
                break

    def _loop(self, store: Store) -> None:
        while not self.paths.disabled_marker.exists():
            self._reload_config()
            conn = store.connection()
            # Read the change counter before looking, so a commit landing in between still wakes us.
            seen = conn.execute("PRAGMA data_version").fetchone()[0]
            if self.config is None:
                self._wait_for_change(store, seen)
                continue
            if reconcile(conn, self.paths):
                self._set(stage="supervising")  # an orphaned worker from before is still running
                self._wait_for_change(store, seen, timeout=1.0)
                continue
            picked = None
            if self.config.agents[self.agent].auto:
                picked = queue.dispatchable(conn, self.agent, time.time(), self.config.dispatch_max_age_seconds)
            if picked:
                self._dispatch(store, picked[0])
                continue
            self._set(stage="idle", current=None)
            self._wait_for_change(store, seen)
        log.info("listener_stopping", agent=self.agent, reason="disabled")

    def _wait_for_change(self, store: Store, seen: int, timeout: float = RESCAN_SECONDS) -> None:
        marker = self.paths.disabled_marker
        deadline = time.monotonic() + timeout
        conn, polls = store.connection(), 0
        while time.monotonic() < deadline:
            time.sleep(POLL_SECONDS)
            polls += 1
            # Files change by hand, so they are looked at less often than the store.
            if polls % FILE_CHECK_EVERY == 0:
                if marker.exists() or _file_key(self.config_path) != self._config_key:
                    return
                conn = store.connection()  # notices a deleted or replaced store file
            if conn.execute("PRAGMA data_version").fetchone()[0] != seen:
                return

    def _dispatch(self, store: Store, candidate: queue.Candidate) -> None:
        current = {"message_id": candidate.message_id, "sender": candidate.sender, "supervisor_pid": None,
                   "started_at": round(time.time(), 3)}
        self._set(stage="received", current=current)
        log.info("dispatch_received", agent=self.agent, message_id=candidate.message_id, sender=candidate.sender)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            self._run_supervisor_child(candidate.message_id)
        self._set(stage="supervising", current={**current, "supervisor_pid": pid})
        _, status = os.waitpid(pid, 0)
        log.info("supervisor_exited", agent=self.agent, message_id=candidate.message_id,
                 supervisor_pid=pid, status=os.waitstatus_to_exitcode(status))
        conn = store.connection()
        reconcile(conn, self.paths)  # settles the attempt if the supervisor died mid-way
        attempt = get_attempt(conn, candidate.message_id)
        if attempt is not None and attempt["state"] == "finished":
            self._set(last={
                "message_id": candidate.message_id, "sender": candidate.sender, "result": attempt["outcome"],
                "error_kind": attempt["error_kind"], "exit_code": attempt["exit_code"],
                "duration_seconds": round(attempt["duration_seconds"] or 0.0, 1),
            })
        self._set(current=None)

    def _run_supervisor_child(self, message_id: int) -> None:
        code = 0
        try:
            os.close(self._lock_fd)  # the lock belongs to the listener alone
            os.setsid()  # a Ctrl-C or a stop aimed at the listener does not cut a dispatch short
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            supervise(self.settings, self.config, message_id)
        except DispatchRefused as exc:
            log.info("dispatch_refused", message_id=message_id, code=exc.code)
            code = 3
        except BaseException:
            log.exception("supervisor_failed", message_id=message_id)
            code = 1
        finally:
            os._exit(code)


def run_listener(settings: BridgeSettings, agent: str) -> int:
    paths = AgentPaths.of(settings, agent).ensure()
    configure_logging(stderr_level=logging.getLevelName(settings.log_level), log_file=paths.log)
    return Listener(settings, agent).run()
