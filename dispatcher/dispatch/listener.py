"""The long-running listener: one per agent per store, running up to ``max_workers`` supervisors at once.

It holds an exclusive flock for its agent (per runtime directory) and the agent's row in
``listeners`` (per store), wakes on any commit to the store (``PRAGMA data_version``,
asleep on file events in between: ``file_events``) or a change to config.json or the disabled
marker, and forks a
supervisor for the oldest dispatchable message while the agent's ``max_workers`` and the machine's
``max_workers_total`` (``worker_slots``) leave room, one at a time through the barrier; it reaps
each supervisor when it ends (``supervisors``) and looks again.
Each round it observes, asks the pure ``step`` what to do, and does it. Transient store
and supervisor failures back off (capped, exponential) with stage ``error``; signals only
set a flag the loop checks, so nothing is cut short mid-transaction. No store connection
is open across the fork: the listener closes its own before and reopens after. When idle,
at most once an hour, it prunes old attempt directories (``retention``).

It stays light, as one runs per agent for as long as the machine is up (README, "The listener's
footprint"): it never loads pydantic, pydantic-settings, asyncio, rich or the MCP SDK. What needs
them runs in forked children that exit right after, so each rule stays defined once: its settings
and config.json are validated by ``BridgeSettings`` and ``BridgeConfig`` in a child (``checked``,
at start and on each change of config.json's file key), and it keeps their frozen views
(``SettingsView``, ``ConfigView``); a supervisor records its attempt and launches its worker
from that view, without pydantic either (``supervisor``). Loading pydantic in the listener instead would triple its
resident memory; validating without it would be a second, hand-made definition of the file.
"""

import contextlib
import fcntl
import logging
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from dispatcher.bridge.counters import count_notice
from dispatcher.core import clock, processes
from dispatcher.core.config_view import ConfigView, max_workers, use_worktree
from dispatcher.core.errors import BridgeError, ConfigError, DispatchRefused
from dispatcher.core.file_events import RECHECK_SECONDS
from dispatcher.core.locations import PROJECT_DIR, shown
from dispatcher.core.logs import configure_logging, get_logger
from dispatcher.core.notices import Notice, attempt_notice
from dispatcher.core.private_files import open_private_lock
from dispatcher.core.processes import flock_holder
from dispatcher.core.protected import git_dirs
from dispatcher.core.reasons import failure_reason
from dispatcher.core.settings_view import ListenerSettings
from dispatcher.dispatch import lease, notify, queue
from dispatcher.dispatch.attempts import get_attempt
from dispatcher.dispatch.checked import CheckFailed, checked_config, environment_record
from dispatcher.dispatch.leftovers import remove_request
from dispatcher.dispatch.paths import AgentPaths
from dispatcher.dispatch.procs import fork_without_store, return_freed_memory
from dispatcher.dispatch.progress import render_line, write_progress
from dispatcher.dispatch.reconcile import reconcile, supervisor_grace
from dispatcher.dispatch.retention import PRUNE_EVERY_SECONDS, prune_attempt_dirs
from dispatcher.dispatch.step import BackOff, Dispatch, Observation, Stop, Wait, step
from dispatcher.dispatch.supervisors import Supervisor, Supervisors
from dispatcher.dispatch.worker_slots import take_slot
from dispatcher.store import (
    STORE_ERRORS,
    Connection,
    StoreHandle,
    open_handle,
    store_corruption,
    store_errors,
    write_transaction,
)
from dispatcher.store.changes import StoreChanges, data_version
from dispatcher.store.connection import prepare_store_dir, shrink_wal
from dispatcher.store.messages import cap_far_leases
from dispatcher.store.metrics import record_budget_hold
from dispatcher.store.roles import refuse_another_agents_role
from dispatcher.store.store_clock import store_now
from dispatcher.store.worktrees import worktrees_on_disk

if TYPE_CHECKING:  # (only a type: prometheus_client loads with metrics on alone)
    from dispatcher.dispatch.metrics import ListenerTextfile

# Supervisor exit codes (the listener's only channel from its forked child).
EXIT_REFUSED, EXIT_STORE = 3, 4
log = get_logger("agent_bridge.listener")
# How often a listener with metrics on rewrites its textfile (the node exporter reads it at each scrape).
METRICS_EVERY_SECONDS = 5.0


class _AlreadyRunning(Exception):
    def __init__(self, pid: int | None, host: str | None = None) -> None:
        self.pid, self.host = pid, host  # host: another host's listener holds the store's lease


def _file_key(path: Path) -> tuple | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


class Listener:
    def __init__(self, settings: ListenerSettings, agent: str) -> None:
        self.settings = settings
        self.agent = agent
        self.paths = AgentPaths.of(settings, agent).ensure()
        self.config_path = settings.config_path()
        self.config: ConfigView | None = None
        self._max_workers = 1  # of the config in use (_workers_allowed)
        self.config_error: str | None = None
        self.workspace_error: str | None = None
        self._config_key: tuple | None = ()
        self._progress: dict = {
            "stage": "starting",
            "current": None,  # the oldest running attempt (``running`` has them all)
            "running": [],
            "held": None,  # why a dispatchable task waits for a worker (step.HELD_*)
            "max_workers": None,
            "last": None,
            "error": None,
            "auto": None,
        }
        self._lock_fd: int | None = None
        self._written = False
        self._progress_failing = False
        self._stop_requested = False
        self._lease_held = False
        self._lease_renew_at = 0.0  # monotonic
        self._seen: int | None = None  # PRAGMA data_version read before the last observation
        self._candidate: queue.Candidate | None = None
        self._held_until: float | None = None  # a message held for an interactive session is released then
        self._failures = 0  # consecutive transient failures
        self._fresh_failure: str | None = None  # a failure not yet backed off from
        self._backoff_until = 0.0
        self._next_prune = 0.0  # monotonic: the first idle moment prunes, then once an hour
        self._metrics_due = 0.0  # monotonic: with metrics on, the textfile is written then (_write_metrics)
        self._metrics: ListenerTextfile | None = None  # with metrics on: the textfile's writer
        self._metrics_config: ConfigView | None = None  # the config it was made for
        self._events: StoreChanges | None = None  # while running: what an idle wait sleeps on
        self._supervisors = Supervisors()
        self._ended: list[tuple[Supervisor, int]] = []  # reaped, their attempts not looked at yet
        self._slot: int | None = None  # a machine slot taken for the dispatch this round decides
        self._from_before: list[int] = []  # attempts running that no supervisor of ours runs
        self._notices: list[int] = []  # notice runners started and not yet reaped (dispatch.notify)
        self._budget_noticed_day: float | None = None  # the budget day a budget_held notice went out for
        self._store: StoreHandle | None = None  # while running: where a notice is counted (_notify)

    def _request_stop(self, signum, frame) -> None:
        self._stop_requested = True  # only a flag: the loop stops at its next check
        if self._events is not None:
            self._events.interrupt()  # (a waiting poll(2) would otherwise sleep on)

    # -- progress ---------------------------------------------------------------------
    def _set(self, **changes) -> None:
        """Update the progress document; rewrite it only when something changed. A failed
        write (a full or read-only runtime directory) is logged, never fatal: it is retried
        with the next change."""
        updated = {**self._progress, **changes}
        if updated == self._progress and self._written:
            return
        self._progress = updated
        try:
            write_progress(self.paths.progress, agent=self.agent, listener_pid=os.getpid(), **updated)
        except (OSError, BridgeError) as exc:  # full, read-only, or no longer ours (unsafe_path)
            self._written = False
            if not self._progress_failing:
                log.warning(
                    "progress_write_failed",
                    agent=self.agent,
                    error=type(exc).__name__,
                    errno=getattr(exc, "errno", None),
                    code=getattr(exc, "code", None),
                )
            self._progress_failing = True
            return
        self._written, self._progress_failing = True, False

    # -- configuration ------------------------------------------------------------------
    def _reload_config(self, store: StoreHandle) -> None:
        key = _file_key(self.config_path)
        if key == self._config_key:
            return
        self._config_key = key
        store.close()  # validated in a forked child (checked): no store connection crosses a fork
        try:
            config = checked_config(self.config_path)
            if self.agent not in config.agents:
                raise ConfigError(self.config_path, f"agent {self.agent!r} is not declared")
        except ConfigError as exc:
            self.config, self.config_error = None, exc.reason
            log.warning("config_invalid", agent=self.agent, path=str(self.config_path))
            return
        except CheckFailed as exc:  # not the file's fault: the config in use stays, and it is checked again
            self._config_key = ()
            self._note_failure(f"config.json could not be checked: {exc.reason}", event="config_check_failed")
            return
        self.config, self.config_error = config, None
        self._max_workers = self._workers_allowed(config)
        self._set(auto=config.agents[self.agent].auto)

    def _workers_allowed(self, config: ConfigView) -> int:
        """This agent's ``max_workers``, its default resolved once per config: 2 where its attempts
        each get a worktree (``auto`` resolved: is the workspace in a repository? read, no git run)."""
        rules = config.agents[self.agent]
        workspace = config.workspace(self.agent, self.settings.workspace)
        in_repo = bool(git_dirs(workspace))
        return max_workers(rules, use_worktree(rules.isolation, config.permissions(self.agent).writes, in_repo) is True)

    # -- main loop ------------------------------------------------------------------------
    def run(self) -> int:
        self._lock_fd = open_private_lock(self.paths.lock)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return self._already_running(flock_holder(self.paths.lock))
        os.ftruncate(self._lock_fd, 0)
        os.write(self._lock_fd, f"{os.getpid()}\n".encode())
        if self.paths.disabled_marker.exists():
            print(  # noqa: T201 - the listener's one stderr line; it also runs under systemd, outside click
                f"agent-bridge: the {self.agent} listener is disabled (marker {self.paths.disabled_marker}); "
                f"`agent-bridge listener enable --agent {self.agent}` starts it detached, or to run it here in "
                f"the foreground: `rm {self.paths.disabled_marker}`, then rerun this command.",
                file=sys.stderr,
            )
            self._set(stage="stopped")
            return 0
        # Names (and a salted fingerprint), never values; made in a forked child, before the store is open.
        taken = environment_record()
        signal.signal(signal.SIGTERM, self._request_stop)
        signal.signal(signal.SIGINT, self._request_stop)
        store = open_handle(self.settings.db)
        self._store = store
        # Watching starts before the first data_version read: no commit falls between the two.
        self._events = StoreChanges(store.location, self.agent, [self.config_path, self.paths.disabled_marker])
        other: _AlreadyRunning | None = None
        try:
            self._first_lease(store)  # before any progress write: a running listener's file is not ours
            log.info("listener_started", agent=self.agent, pid=os.getpid(), environment=taken["names"])
            self._set(stage="starting", environment=taken)
            return_freed_memory()  # what start-up freed (its imports' compiling, the checks' JSON)
            self._loop(store)
        except _AlreadyRunning as exc:
            other = exc
        except Exception as exc:
            self._notify(Notice("listener_stopped", self.agent, error_kind=type(exc).__name__))
            raise
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            self._write_metrics(store, up=False)
            self._release_lease(store)
            store.close()
            self._store = None
            self._events.close()
            self._events = None
            self._supervisors.let_go()  # they carry on alone, each in its own session
            if other is None:
                self._set(stage="stopped", current=None, running=[], held=None)
        return 0 if other is None else self._already_running(other.pid, other.host)

    def _say(self, line: str) -> None:
        """One payload-free line on stderr whatever the log level: a dispatch, a verdict (in the
        foreground they are what a person watches; detached, stderr is /dev/null)."""
        with contextlib.suppress(OSError):  # no one reads it (a closed pipe): the progress document has the same
            print(f"agent-bridge: {line}", file=sys.stderr, flush=True)  # noqa: T201 - see the docstring

    def _already_running(self, pid: int | None, host: str | None = None) -> int:
        where = f"pid {pid}" if host is None else f"pid {pid} on host {host}"
        message = f"agent-bridge: the {self.agent} listener is already running ({where})."
        print(message, file=sys.stderr)  # noqa: T201 - the listener's stderr line; it also runs under systemd, outside click
        return 0

    def _loop(self, store: StoreHandle) -> None:
        while True:
            observation = self._observe(store)
            self._write_metrics(store)
            action = step(observation, self._now)
            if isinstance(action, Stop):
                log.info("listener_stopping", agent=self.agent, reason=action.reason)
                self._release_slot()
                return
            if isinstance(action, BackOff):
                self._back_off(action)
            elif isinstance(action, Dispatch) and self._candidate is not None:  # (step dispatches only it)
                self._dispatch(store, self._candidate)
            elif isinstance(action, Wait):
                self._release_slot()  # taken for a dispatch this round did not decide
                if action.wake_on_commit:  # (a backoff keeps showing its reason)
                    self._show_waiting(action.stage, action.held)
                if action.stage == "idle":
                    self._prune(store)
                    self._shrink_wal(store)
                self._wait(store, action.timeout, watch_store=action.wake_on_commit)

    # -- observing ------------------------------------------------------------------------
    def _observe(self, store: StoreHandle) -> Observation:
        self._now = clock.now()  # the store's clock (store_now) once the store answers
        disabled = self.paths.disabled_marker.exists()
        if self._stop_requested or (disabled and not self._supervisors):  # (else: until they end)
            return Observation(stop_requested=self._stop_requested, disabled=disabled)
        if (left := self._backoff_until - clock.monotonic()) > 0:  # monotonic: no clock step stalls it
            return Observation(backoff_left=left, failures=self._failures)
        self._reload_config(store)
        self.workspace_error = self._workspace_error()
        self._candidate, self._held_until = None, None
        self._release_slot()  # (each round takes the one it dispatches with)
        self._supervisors.kill_overdue()
        self._ended += self._supervisors.reap()
        self._notices = notify.reap(self._notices)
        ours = self._supervisors.message_ids()
        try:
            with store_errors():
                conn = store.connection()
                # Read the change counter before looking, so a commit landing in between still wakes us.
                self._seen = data_version(conn)
                self._now = store_now(conn)
                self._take_lease(store, conn)
                busy = set(reconcile(conn, self.paths))  # settles an ended supervisor's attempt left mid-way
                self._after_supervisors(conn)
                # A supervisor of ours with no attempt yet is on its way to the barrier (or refused there).
                starting = any(get_attempt(conn, m) is None for m in ours - busy)
                running = busy | ours
                self._from_before = sorted(busy - ours)
                self._show_running()
                if self.config is None or self.workspace_error:
                    # A missing or unsafe workspace is refused like a bad config: nothing is dispatched.
                    return Observation(
                        config_error=self.config_error or self.workspace_error,
                        failures=self._failures,
                        failure_reason=self._fresh_failure,  # (config.json could not be checked)
                        running=len(running),
                        disabled=disabled,
                    )
                self._candidate = self._next_candidate(conn, self.config, skip=ours)
        except BridgeError as exc:
            self._failures += 1
            self._seen = None
            log.warning("store_error", agent=self.agent, code=exc.code, failures=self._failures)
            return Observation(store_error=str(exc), failures=self._failures, disabled=disabled)
        if not running and self._candidate is None and self._fresh_failure is None:
            self._failures = 0  # nothing pending and nothing failing
        allowed = self._max_workers
        machine_full = False
        if self._candidate is not None and not starting and len(running) < allowed:
            try:
                self._slot = take_slot(self.paths.root, self.config.max_workers_total)
            except (OSError, BridgeError) as exc:  # a planted link or FIFO, a full or read-only directory
                self._note_failure(f"the worker slots cannot be used: {exc}", event="worker_slots_failed")
                return Observation(failures=self._failures, failure_reason=self._fresh_failure, disabled=disabled)
            machine_full = self._slot is None
        return Observation(
            disabled=disabled,
            running=len(running),
            starting=starting,
            max_workers=allowed,
            machine_full=machine_full,
            candidate=self._candidate.message_id if self._candidate else None,
            failures=self._failures,
            failure_reason=self._fresh_failure,
            held_until=self._held_until,
        )

    def _show_running(self) -> None:
        """Every running attempt in the progress document: ours with their supervisors, oldest
        first, then any still running from before this listener (an orphaned worker)."""
        shown = self._supervisors.shown() + [
            {"message_id": m, "sender": None, "supervisor_pid": None, "started_at": None} for m in self._from_before
        ]
        allowed = self._max_workers if self.config is not None else None
        self._set(running=shown, current=shown[0] if shown else None, max_workers=allowed)

    def _release_slot(self) -> None:
        if self._slot is not None:
            os.close(self._slot)
            self._slot = None

    def _workspace_error(self) -> str | None:
        if self.config is None:
            return None
        problem = self.config.workspace_problem(self.agent, self.settings.workspace, self.settings)
        return None if problem is None else f"{problem[0]}: {problem[1]}"  # doctor's code first

    def _next_candidate(self, conn: Connection, config: ConfigView, skip: frozenset[int]) -> queue.Candidate | None:
        """The dispatch rule (``auto`` and the age window included), called in this one place;
        ``skip``: the messages our supervisors run (or are about to record)."""
        now = self._now
        cap_far_leases(conn, self.agent, now)  # a lease from a clock far ahead must not hide a task for long
        candidate, self._held_until = queue.next_action(conn, self.agent, config, now, skip)
        if candidate is None and self._held_until is not None:  # something waits: a daily budget's hold?
            day = queue.budget_hold_day(conn, self.agent, config, now)
            if day is not None and day != self._budget_noticed_day:  # once per budget day (docs/notices.md)
                # The day's record (docs/metrics.md), then the notice. The record is once per day
                # in the store (recording the day again changes nothing); the notice is once per
                # day in this process's memory. So a crash between the two loses no notice: the
                # listener started again finds the task still held, records the day again (no
                # change) and starts the notice (tests/dispatch/test_notices.py). The other order
                # would lose nothing either; this one never counts a hold day twice.
                with write_transaction(conn):
                    record_budget_hold(conn, self.agent, day)
                self._budget_noticed_day = day
                self._notify(Notice("budget_held", self.agent))
        return candidate

    def _take_lease(self, store: StoreHandle, conn: Connection) -> None:
        """Take the store's lease once; on a store several hosts share, renew it when due (a
        listener elsewhere that took it over meanwhile makes this one stop)."""
        if self._lease_held and not (store.spans_hosts and clock.monotonic() >= self._lease_renew_at):
            return
        take = lease.renew if self._lease_held else lease.acquire
        holder = take(conn, self.agent, str(self.paths.root), store_now(conn))
        if holder is not None:
            raise _AlreadyRunning(holder.pid, None if holder.host == processes.this_host() else holder.host)
        self._lease_held = True
        self._lease_renew_at = clock.monotonic() + lease.renew_every()

    def _renew_lease_while_supervising(self, store: StoreHandle) -> None:
        try:
            with store_errors():
                self._take_lease(store, store.connection())
        except BridgeError as exc:  # the next round tries again, well within the lease
            log.warning("lease_renewal_failed", agent=self.agent, code=exc.code)

    def _first_lease(self, store: StoreHandle) -> None:
        try:
            with store_errors():
                conn = store.connection()
                refuse_another_agents_role(conn, self.agent, shown(self.settings.db))
                self._take_lease(store, conn)
        except BridgeError as exc:
            # A store that waiting cannot fix (not a database, damaged, newer than this code, a
            # database role of another agent) ends the listener with one line; the loop reports
            # anything else (full, locked, missing), backs off and takes the lease later.
            if exc.code in ("schema_too_new", "wrong_agent_role") or store_corruption(exc) is not None:
                raise

    def _release_lease(self, store: StoreHandle) -> None:
        if not self._lease_held:
            return
        try:
            with store_errors():
                lease.release(store.connection(), self.agent)
        except BridgeError as exc:  # the row names a dead pid now; the next listener takes it over
            log.warning("lease_release_failed", agent=self.agent, code=exc.code)

    # -- acting ---------------------------------------------------------------------------
    def _show_waiting(self, stage: str, held: str | None = None) -> None:
        # Named by doctor's codes, so the status line, `listener status` and doctor say the same.
        error = f"config_invalid: {self.config_error}" if self.config_error else self.workspace_error
        if stage == "supervising":
            self._set(stage=stage, error=error, held=held)  # (``running`` shows which)
        else:
            self._set(stage="error" if error else stage, error=error, held=held)

    def _prune(self, store: StoreHandle) -> None:
        """The retention schedule: finished attempts' directories past ``attempt_retention_days``."""
        if clock.monotonic() < self._next_prune or self.config is None:
            return
        self._next_prune = clock.monotonic() + PRUNE_EVERY_SECONDS
        try:
            with store_errors():
                prune_attempt_dirs(
                    store.connection(),
                    self.paths.root / "attempts",
                    self.agent,
                    clock.now(),
                    self.config.attempt_retention_days,
                )
                if worktrees_on_disk(store.connection(), self.agent):  # (git and its modules load only then)
                    from dispatcher.dispatch.worktree_retention import prune_kept_worktrees

                    prune_kept_worktrees(
                        store.connection(),
                        self.agent,
                        clock.now(),
                        self.config.attempt_retention_days,
                        self.config.kept_worktrees_max_mb,
                    )
                pool_dir = self.paths.root / "worktree-pool"  # (worktree_pool.POOL_DIR; git loads only with one)
                if pool_dir.is_dir() and any(pool_dir.iterdir()):
                    from dispatcher.dispatch.retention import DAY_SECONDS
                    from dispatcher.dispatch.worktree_pool import clear

                    retention = self.config.attempt_retention_days * DAY_SECONDS
                    clear(self.paths.root, self.config.worktree_pool_size, clock.now() - retention)
        except (BridgeError, OSError) as exc:  # tried again in an hour; never stops the listener
            log.warning("attempt_prune_failed", agent=self.agent, error=type(exc).__name__)

    def _write_metrics(self, store: StoreHandle, up: bool = True) -> None:
        """With ``metrics_textfile_dir`` set, this agent's figures in its textfile every
        ``METRICS_EVERY_SECONDS`` (and once more at the stop, ``up`` 0). prometheus_client loads
        only then: with metrics off the listener never imports it (docs/metrics.md)."""
        config = self.config
        directory = None if config is None else config.metrics_textfile_dir
        if (
            config is None
            or directory is None
            or not self._lease_held
            or (up and clock.monotonic() < self._metrics_due)
        ):
            return
        self._metrics_due = clock.monotonic() + METRICS_EVERY_SECONDS
        try:
            if self._metrics is None or self._metrics_config is not config:  # (a new config.json: made anew)
                from dispatcher.dispatch.metrics import ListenerTextfile

                self._metrics = ListenerTextfile(
                    store.connection, Path(directory), self.agent, processes.this_host(), config
                )
                self._metrics_config = config
            with store_errors():
                self._metrics.write(up=up, held=self._progress["held"])
        except ImportError:  # tried again at the next write; never stops the listener
            log.warning(
                "metrics_write_failed",
                agent=self.agent,
                error="prometheus_client is missing: install agent-bridge[metrics]",
            )
        except (BridgeError, OSError) as exc:
            log.warning("metrics_write_failed", agent=self.agent, error=type(exc).__name__)

    def _shrink_wal(self, store: StoreHandle) -> None:
        """Idle: a -wal that a burst grew past its bound is truncated now (SQLite alone trims it
        only at the next write after a full checkpoint, and an idle store has none)."""
        try:
            with store_errors():
                if shrink_wal(store.connection()):
                    log.info("wal_truncated", agent=self.agent)
        except BridgeError as exc:  # busy or missing: the next idle moment tries again
            log.warning("wal_truncate_failed", agent=self.agent, code=exc.code)

    def _back_off(self, action: BackOff) -> None:
        self._backoff_until = clock.monotonic() + action.seconds
        self._fresh_failure = None
        log.warning("listener_backoff", agent=self.agent, seconds=action.seconds, failures=self._failures)
        self._set(stage="error", error=action.reason)

    def _wait(self, store: StoreHandle, timeout: float, watch_store: bool) -> None:
        """Until the timeout, a stop, the disabled marker, a config change or (if watched) a commit.
        Asleep in between: each file event (or ``RECHECK_SECONDS``) is one look."""
        events = self._events
        if events is None:  # (never: run() watches before the loop starts)
            raise RuntimeError("the listener waits only while running")
        marker = self.paths.disabled_marker
        deadline = clock.monotonic() + timeout
        if store.spans_hosts and self._lease_held:  # back in time to renew the lease
            deadline = min(deadline, self._lease_renew_at)
        watch_store = watch_store and self._seen is not None
        while not self._stop_requested and (left := deadline - clock.monotonic()) > 0:
            events.wait(min(left, RECHECK_SECONDS))
            if self._stop_requested or marker.exists() or _file_key(self.config_path) != self._config_key:
                return
            if not watch_store:
                continue
            try:  # the handle's lookup also notices a deleted or replaced store file
                conn = store.connection()
            except (OSError, BridgeError):
                return  # the next observation reports it
            try:
                with store_errors():
                    if data_version(conn) != self._seen:
                        return
            except BridgeError as exc:  # (a dropped connection: the next observation connects again)
                log.warning("store_error", agent=self.agent, code=exc.code, failures=self._failures)
                return

    def _dispatch(self, store: StoreHandle, candidate: queue.Candidate) -> None:
        if _file_key(self.config_path) != self._config_key:
            # config.json changed after this round read it, and the task was found after that: it
            # may have been sent under the new config. Look again with it (the loop observes at once).
            self._release_slot()
            return
        started_at = round(clock.now(), 3)
        self._set(stage="received", error=None)
        log.info("dispatch_received", agent=self.agent, message_id=candidate.message_id, sender=candidate.sender)
        sys.stdout.flush()
        sys.stderr.flush()
        store.close()  # no SQLite connection may cross a fork (reopened lazily after)
        pid = fork_without_store()
        if pid == 0:
            self._run_supervisor_child(candidate.message_id)
        self._release_slot()  # the supervisor holds the slot now, for as long as it lives
        self._supervisors.add(pid, candidate.message_id, candidate.sender, started_at, self._supervisor_limit())
        self._show_running()
        self._set(stage="supervising")
        self._say(render_line(self.agent, "supervising", {"running": self._supervisors.shown()[-1:]}))

    def _after_supervisors(self, conn: Connection) -> None:
        """Look at the attempt of each supervisor reaped since (reconciliation settled it first, if
        it died mid-way); kept for the next round when the store fails meanwhile."""
        if not self._ended:
            return
        while self._ended:
            supervisor, code = self._ended[0]
            log.info(
                "supervisor_exited",
                agent=self.agent,
                message_id=supervisor.message_id,
                supervisor_pid=supervisor.pid,
                status=code,
            )
            self._after_supervisor(conn, supervisor, code)
            self._ended.pop(0)
        return_freed_memory()  # what the dispatch freed (reconciliation, the attempt's rows)

    def _after_supervisor(self, conn: Connection, supervisor: Supervisor, code: int) -> None:
        message_id = supervisor.message_id
        attempt = get_attempt(conn, message_id)
        if attempt is None or attempt["state"] == "finished":  # (an orphaned worker may still read it)
            remove_request(self.paths, message_id)  # even if it died after its verdict
        if attempt is None:  # refused, or could not record its attempt: try again later, not at once
            self._note_failure(_supervisor_failure(message_id, code))
            return
        self._failures = 0
        if attempt["state"] == "finished":
            self._set(
                last={
                    "message_id": message_id,
                    "sender": supervisor.sender,
                    "result": attempt["outcome"],
                    "error_kind": attempt["error_kind"],
                    "exit_code": attempt["exit_code"],
                    "duration_seconds": round(attempt["duration_seconds"] or 0.0, 1),
                    "permission_level": attempt["permission_level"],
                    "denied_tools": attempt["denied_tools"],
                    **self._spawn_path(attempt["error_kind"]),
                    **self._why(attempt),
                }
            )
            self._say(render_line(self.agent, "finished", {"last": self._progress["last"]}))
            # Once per attempt: a supervisor is reaped, and its attempt looked at, once.
            if (
                notice := attempt_notice(self.agent, message_id, attempt["outcome"], attempt["error_kind"])
            ) is not None:
                self._notify(notice)

    def _notify(self, notice: Notice) -> None:
        """Start the agent's ``notify_command`` for ``notice`` in the background (docs/notices.md)."""
        command = self.config.notify_command_of(self.agent) if self.config is not None else None
        if command is None:
            return
        timeout = self.config.notify_timeout_seconds if self.config is not None else 10
        log.info("notice", agent=self.agent, notice_event=notice.event, message_id=notice.message_id)
        if (pid := notify.spawn_notice(command, notice, timeout, self.paths.log)) is not None:
            self._notices.append(pid)
        # Counted once started (docs/metrics.md): a count that fails is logged and dropped.
        if self._store is not None and (why := count_notice(self._store.connection, notice, pid is not None)):
            log.info("count_dropped", agent=self.agent, counter="notices", notice_event=notice.event, error=why)

    def _why(self, attempt) -> dict:
        """The CLI's status, and for a failure the one-line reason and where its files are."""
        reason = failure_reason(attempt["outcome"], attempt["error_kind"], attempt["cli_status"])
        why: dict = {"cli_status": attempt["cli_status"]}
        if reason is not None:
            attempt_dir = self.paths.attempt_dir(attempt["message_id"])
            why.update(reason=reason, attempt_dir=str(attempt_dir) if attempt_dir.is_dir() else None)
        return why

    def _spawn_path(self, error_kind: str | None) -> dict:
        """For a failed spawn, the configured path it names (the launcher, or the workspace):
        configuration, never payload. The supervisor's ``spawn_failed`` log line has the same."""
        if self.config is None or not (error_kind or "").startswith("spawn:"):
            return {}
        if error_kind == "spawn:NotADirectoryError":
            return {"path": str(self.config.workspace(self.agent, self.settings.workspace))}
        return {"path": str(self.config.launcher_path(self.agent, PROJECT_DIR))}

    def _note_failure(self, reason: str, event: str = "dispatch_failed") -> None:
        self._failures += 1
        self._fresh_failure = reason
        log.warning(event, agent=self.agent, reason=reason, failures=self._failures)

    def _supervisor_limit(self) -> float:
        """The monotonic time by which a supervisor forked now must be done: its worker's budget,
        then the grace a supervisor has to end the worker and settle (``reconcile``)."""
        timeout = self.config.agents[self.agent].worker_timeout_seconds if self.config else 0
        return clock.monotonic() + timeout + supervisor_grace()

    def _run_supervisor_child(self, message_id: int) -> None:
        code = 0
        try:
            if self._lock_fd is not None:  # (always: run() took the lock before dispatching)
                os.close(self._lock_fd)  # the lock belongs to the listener alone
            if self._events is not None:
                self._events.close_in_child()  # the listener's watch, not the supervisor's
            self._supervisors.let_go()  # the other supervisors' pidfds: the listener's
            os.setsid()  # a Ctrl-C or a stop aimed at the listener does not cut a dispatch short
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            if self.config is None:  # never: the listener dispatches nothing without a valid config
                raise RuntimeError("a supervisor was started without a valid config")
            # Loaded here, in the supervisor's process alone (with the verdict's modules and
            # subprocess): the listener stays without them.
            from dispatcher.dispatch.supervisor import supervise

            supervise(self.settings, self.config, message_id)
        except DispatchRefused as exc:
            log.info("dispatch_refused", message_id=message_id, code=exc.code)
            code = EXIT_REFUSED
        except STORE_ERRORS as exc:
            log.warning("supervisor_store_error", message_id=message_id, error=type(exc).__name__)
            code = EXIT_STORE
        except BaseException:
            log.exception("supervisor_failed", message_id=message_id)
            code = 1
        finally:
            os._exit(code)


def _supervisor_failure(message_id: int, code: int) -> str:
    why = {EXIT_REFUSED: "its dispatch was refused", EXIT_STORE: "the store refused the attempt record"}
    return (
        f"supervisor for msg#{message_id} exited {code} without recording an attempt "
        f"({why.get(code, 'see dispatcher.log')}); retrying after a pause"
    )


def run_listener(settings: ListenerSettings, agent: str) -> int:
    if isinstance(settings.db, Path):
        prepare_store_dir(settings.db)  # a store path that must be refused is refused now, before any lock
    paths = AgentPaths.of(settings, agent).ensure()
    configure_logging(stderr_level=logging.getLevelName(settings.log_level), log_file=paths.log)
    return Listener(settings, agent).run()
