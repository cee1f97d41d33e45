"""The waiting hook: ``agent-bridge hook CLI Stop|SessionStart --wait SECONDS``, to wake an idle session.

Hooks fire on events, so mail that arrives while a session sits idle would wait for the user's
next prompt. Registered as an ``asyncRewake`` Stop hook (a CLI's ``wait_events``), this command first answers
``Stop`` exactly like the plain hook (a never-announced id: exit 2 at once). When it did not block
and the CLI runs it in the background, it stays: it watches the store read-only (one ``live``
connection, asleep on file events in between: ``file_events``, and on a pidfd of the CLI) until a
message never announced to this session arrives, then prints the payload-free line on stderr and exits 2: the CLI puts
it in front of the model as a new turn. ``hook_rules.decide_wait`` decides (one waiter per
session, a new id only, at most one wake per 10 s, one wake per waiter).

Registered as an ``asyncRewake`` ``SessionStart`` hook, the same waiter starts with the session,
so a session that has had no turn yet (no ``Stop`` hook has run) is woken too. It gives no
``SessionStart`` answer of its own: in the background its first look wakes at once for an id
never announced (its exit 2 starts the first turn); in the foreground (a headless run) it exits 0
silently and the first prompt's ``UserPromptSubmit`` hook names the mail. The session's MCP server
may start after the hook, so this waiter marks the session's wake path ``hook`` as soon as it
finds the server (for ``MARK_WITHIN_SECONDS``).

Which process the waiter waits beside, and whether it may wait at all, is the CLI's own
(``AgentCli.background_process``; what the CLI does with such a hook: its own module's wake.py);
a CLI that says None gets the plain answer and no wait. Nothing here names a CLI.

Never breaks the session: every failure exits 0 silently with one payload-free line in
``hooks.log``; SIGTERM, SIGHUP and SIGINT end it silently (exit 0).
"""

import os
import secrets
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dispatcher.bridge.hook_rules import Verdict, decide_wait, release_wait
from dispatcher.clis import registry
from dispatcher.core import clock, processes
from dispatcher.core.file_events import RECHECK_SECONDS
from dispatcher.core.locations import StoreLocation
from dispatcher.store.changes import StoreChanges, data_version, store_file_id
from dispatcher.store.store_clock import store_now
from dispatcher.wake import hooks

if TYPE_CHECKING:
    from dispatcher.store import Connection

WAIT_DEFAULT_SECONDS = 3600
WAIT_MIN_SECONDS = 1
WAIT_MAX_SECONDS = 86400
GAP_POLL_SECONDS = 0.25  # while a wake waits out the gap between notices: a look this often
PARENT_CHECK_SECONDS = 1.0  # how often the CLI is looked for when no pidfd tells of its end
MARK_WITHIN_SECONDS = 120.0  # how long a SessionStart waiter looks for its session's MCP server
_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


class _Ended(BaseException):
    """A signal asked us to stop (BaseException: no ``except Exception`` swallows it)."""


def parse_wait(value: object) -> int | None:
    """The ``--wait`` value in seconds, or None when it is not a whole number in range (no waiting)."""
    if not isinstance(value, str) or not value.isdigit() or len(value) > 6:
        return None
    seconds = int(value)
    return seconds if WAIT_MIN_SECONDS <= seconds <= WAIT_MAX_SECONDS else None


def background_process(cli: str, environ) -> tuple[int, str] | None:
    """(pid, start time) of the CLI's process that runs this hook in the background, as the CLI
    tells it (``AgentCli.background_process``); None: no waiting (the foreground, unsure, no such CLI)."""
    found = registry.get(cli)
    return None if found is None else found.background_process(environ)


def _raise_ended(signum, frame) -> None:
    raise _Ended()


def _blocked():
    """A context in which our stop signals wait (the state update and the final answer are whole)."""

    class _Block:
        def __enter__(self):
            signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)

        def __exit__(self, *exc):
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGNALS)
            return False

    return _Block()


def main_wait(cli: str, agent: str | None, wait: str | None, event: str = "Stop") -> int:
    """``hook CLI Stop --wait N``: the Stop answer, then (in the background) the wait.
    ``hook CLI SessionStart --wait N``: in the background the wait alone, else nothing."""
    for signum in _SIGNALS:
        signal.signal(signum, _raise_ended)
    try:
        told: int | None = None  # the Stop answer's exit code, when it told the session of mail
        seconds, parent = None, None
        with _blocked():
            raw = hooks.read_stdin()
            if event == "Stop":
                answer = hooks.run_hook(cli, "Stop", agent, raw)
                if answer.exit_code == 2 or answer.stdout:
                    told = hooks.emit(answer)
            if told is None:
                seconds = parse_wait(wait)
                parent = background_process(cli, os.environ) if seconds is not None else None
        if told is not None:
            _count_told(cli, "Stop", agent)
            return told
        if parent is None or seconds is None:  # (parent is None whenever seconds is)
            return 0
        return _wait(cli, agent, raw, seconds, parent, event)
    except _Ended:  # before the wait began (a signal during the Stop answer)
        why = "wait_signal"
    except Exception as exc:  # noqa: BLE001 - a hook must never break the session
        why = f"wait_error {type(exc).__name__}"
    try:
        from dispatcher.core.locations import Locations

        hooks.log_line(Locations.from_env().private_dir(), cli, event, agent, why)
    except Exception:  # noqa: BLE001, S110 - nothing more to do: exit 0
        pass
    return 0


def _wait(cli: str, agent: str | None, raw: bytes, seconds: int, parent: tuple[int, str], event: str) -> int:
    """Never raises (but ``_Ended``): a failure is exit 0 and one log line."""

    runtime = None
    why = "internal_error"
    try:
        from dispatcher.core.locations import Locations

        locations = Locations.from_env()
        runtime = locations.private_dir()
        code, why = _watch(locations, runtime, agent, raw, seconds, parent, event, cli)
        hooks.log_line(runtime, cli, event, agent, why)
        if code == 2:  # the session was told (the line is out): one more wake by a hook
            _count_told(cli, event, agent)
        return code
    except _Ended:
        hooks.log_line(runtime, cli, event, agent, "wait_signal")
        return 0
    except Exception as exc:  # noqa: BLE001 - a hook must never break the session
        why = f"wait_error {type(exc).__name__}"
    hooks.log_line(runtime, cli, event, agent, why)
    return 0


def _count_told(cli: str, event: str, agent: str | None) -> None:
    """``hooks.count_told``, once the answer is out (outside ``_blocked``: a stop signal is not held
    back for a count); a stop signal during it ends the count, never the wake's exit code."""
    try:
        hooks.count_told(cli, event, agent)
    except _Ended:
        return  # the count is dropped (a counter may undercount); the exit 2 stands


@dataclass
class _Waiter:
    """What one waiting hook watches: its session, its store, its CLI's process, and the events it sleeps on."""

    conn: "Connection"
    db: StoreLocation
    inode: tuple[int, int] | None
    runtime: Path
    agent: str
    key: str
    deadline: float
    cli: str
    parent: tuple[int, str]  # the CLI's process (pid, start time): its end ends the wait
    events: StoreChanges
    mark: Callable[[], bool] | None = None  # a SessionStart waiter marking its session, until it is
    next_mark: float = 0.0  # (monotonic) the next try at it


def _watch(
    locations, runtime: Path, agent: str | None, raw: bytes, seconds: int, parent: tuple[int, str], event: str, cli: str
) -> tuple[int, str]:
    from dispatcher.bridge.inbox import inbox_summary, wake_line
    from dispatcher.store.readonly import open_read_only

    agent = agent or os.environ.get("AGENT_ID") or ""
    hook_input = hooks.parse_stdin(raw)
    if not hooks.valid_agent(agent) or hook_input is None:
        return 0, "wait_refused"
    key = hooks.session_key(hook_input.get("session_id", hook_input.get("sessionId")))
    deadline = clock.monotonic() + seconds
    mark = _marker(locations, agent) if event == "SessionStart" else None
    token = f"{os.getpid()}-{secrets.token_hex(6)}"
    conn = open_read_only(locations.db, live=True)
    if conn is None:
        return 0, "wait_no_store"
    events = None
    try:
        inode = store_file_id(locations.db)
        hooks.state_dir(runtime, agent)  # (watched below: it must exist)
        # Watching starts before the version is read: no commit falls between the two.
        events = StoreChanges(locations.db, agent, [hooks.state_path(runtime, agent, key)])

        def look(start: bool):
            summary = inbox_summary(conn, agent, store_now(conn))
            waiting = tuple(w.id for w in summary.first) + ((summary.newest_id,) if summary.newest_id else ())
            with _blocked():  # the clock is read under the session's lock: hooks decide in order
                verdict, mtime = hooks.update_state(
                    runtime, agent, key, lambda state: decide_wait(waiting, state, clock.now(), token, start=start)
                )
                if verdict.announce:
                    hooks.emit(hooks.render(cli, "Stop", hooks.notice(wake_line(summary)), True))
            return verdict, mtime, set(waiting)

        # The version before the first look (as ``inbox watch`` does): a commit between the two
        # then shows as a change at the first wake instead of waiting for the next commit.
        version = data_version(conn)
        try:  # from the first look on: a signal held back during it is raised as soon as it returns
            verdict, mtime, _ = look(True)
            if verdict.announce:
                return 2, verdict.why
            waiter = _Waiter(conn, locations.db, inode, runtime, agent, key, deadline, cli, parent, events, mark)
            return _poll(waiter, look, verdict, mtime, version)
        finally:
            with _blocked():  # an ending waiter frees its slot (a woken one already did)
                hooks.update_state(
                    runtime, agent, key, lambda state: Verdict(False, False, "released", release_wait(state, token))
                )
    finally:
        if events is not None:
            events.close()
        conn.close()


def _marker(locations, agent: str) -> Callable[[], bool]:
    """Marks the session whose CLI runs this waiter (wake path ``hook``); each call tries once and
    says whether to stop trying: marked, or ``MARK_WITHIN_SECONDS`` passed (no server of the agent)."""
    until = clock.monotonic() + MARK_WITHIN_SECONDS

    def mark() -> bool:
        return hooks.mark_session(locations, agent) is not None or clock.monotonic() >= until

    if mark():  # a server already up is marked at once
        return lambda: True
    return mark


def _poll(waiter: _Waiter, look, verdict, mtime, version: int) -> tuple[int, str]:
    """Watch until a wake, the bound, a superseding waiter, the CLI gone or the store replaced."""
    parent_fd = processes.process_handle(*waiter.parent)  # readable once the CLI has ended
    try:
        return _until_woken(waiter, () if parent_fd is None else (parent_fd,), look, verdict, mtime, version)
    finally:
        if parent_fd is not None:
            os.close(parent_fd)


def _until_woken(waiter: _Waiter, also: tuple[int, ...], look, verdict, mtime, version: int) -> tuple[int, str]:
    from dispatcher.bridge.inbox import inbox_summary

    known = set(verdict.state.announced)
    while True:
        # Asleep until a commit, the session's state file changes, the CLI ends or a look is due.
        limit = GAP_POLL_SECONDS if verdict.why == "wait_gap" else RECHECK_SECONDS if also else PARENT_CHECK_SECONDS
        if waiter.mark is not None:  # its session's MCP server may come up at any moment
            limit = min(limit, PARENT_CHECK_SECONDS)
        waiter.events.wait(min(limit, max(0.0, waiter.deadline - clock.monotonic())), also=also)
        if clock.monotonic() >= waiter.deadline:
            return 0, "wait_bound"
        if not processes.is_same_process(*waiter.parent):
            return 0, f"wait_{waiter.cli}_gone"
        if waiter.mark is not None and clock.monotonic() >= waiter.next_mark:
            waiter.next_mark = clock.monotonic() + PARENT_CHECK_SECONDS
            if waiter.mark():
                waiter.mark = None
        if store_file_id(waiter.db) != waiter.inode:
            return 0, "wait_store_replaced"
        new_version = data_version(waiter.conn)
        new_mtime = hooks.state_mtime(waiter.runtime, waiter.agent, waiter.key)
        if new_version == version and new_mtime == mtime and verdict.why != "wait_gap":
            continue
        version = new_version
        if new_mtime == mtime and verdict.why != "wait_gap":
            # only the store moved: look under the lock only when an unknown id waits
            summary = inbox_summary(waiter.conn, waiter.agent, store_now(waiter.conn))
            waiting = {w.id for w in summary.first} | ({summary.newest_id} if summary.newest_id else set())
            if waiting <= known:
                continue
        verdict, mtime, _ = look(False)
        if verdict.why == "superseded":
            return 0, "wait_superseded"
        if verdict.announce:
            return 2, verdict.why
        known = set(verdict.state.announced)
