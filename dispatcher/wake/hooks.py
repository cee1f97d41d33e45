"""`agent-bridge hook <cli> <event>`: a CLI hook that tells a session, payload-free, that mail waits.

It reads the hook's JSON on stdin, reads the store read-only (``open_read_only``), builds the
one payload-free line (``inbox.wake_line``: count, ids, senders, kinds; never a message's
text), asks ``hook_rules.decide`` whether to say it now, and answers in the exact shape the
CLI honours for that event:

- Claude Code ``UserPromptSubmit`` / ``PostToolUse``: stdout
  ``{"hookSpecificOutput": {"hookEventName": <event>, "additionalContext": <line>}}``, exit 0;
- Claude Code ``Stop``: the line on stderr and exit 2 (registered with ``asyncRewake: true``:
  in an interactive or streaming-input session the hook runs in the background and exit 2 wakes
  the idle model; in ``-p`` Claude runs it in the foreground and exit 2 keeps the turn going).
  Registered with ``--wait SECONDS``: in the background it then stays and waits for new mail
  (``hook_wait``);
- Codex (0.171, ``[features] hooks = true``, hooks trusted): the same two shapes for
  ``UserPromptSubmit`` (a developer message) and ``Stop`` (exit 2: the stderr line comes back as a
  ``<hook_prompt>`` user message; Codex has no cap on Stop blocks, so the once-per-id rule matters);
- Gemini CLI (0.61) ``BeforeAgent`` (its UserPromptSubmit): stdout ``{"hookSpecificOutput":
  {"hookEventName": "BeforeAgent", "additionalContext": <line>}}``; ``AfterAgent`` (its Stop):
  stdout ``{"decision": "block", "reason": <line>}``, exit 0 (Gemini sends the reason as the next
  request; it passes ``stop_hook_active`` too);
- Kimi Code ``UserPromptSubmit``: stdout ``{"message": <line>}``, exit 0 (Kimi wraps it in a
  ``<hook_result>`` block in front of the model).

A hook must never break the user's session: whatever goes wrong (no store, a bad setting,
malformed stdin, an unknown agent, a full disk) it exits 0 with no output; a payload-free line
goes to the private ``hooks.log`` in the runtime directory when that directory is usable.

What each session was told is kept per (agent, session) in
``<runtime>/hooks/<agent>/<sha256(session id)[:32]>.json`` (0600, under a flock, never
followed through a link); files untouched for ``STATE_KEEP_SECONDS`` are removed.
"""

import fcntl
import hashlib
import json
import os
import re
import sys
from collections.abc import Collection
from pathlib import Path

from dispatcher.bridge.hook_rules import SessionState, decide
from dispatcher.clis import registry
from dispatcher.clis.base import SILENT, HookAnswer
from dispatcher.core import clock

CLI_EVENTS = {cli.name: cli.hook_events for cli in registry.CLIS}
MAX_STDIN_BYTES = 1 << 20
STATE_KEEP_SECONDS = 7 * 86400
LOG_NAME = "hooks.log"
_AGENT = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")


# The answer types live with the CLIs, each of which says how its hooks answer (AgentCli.hook_answer).
__all__ = ["SILENT", "HookAnswer"]


def session_key(session_id: object) -> str:
    """A file name for a session id of any shape (ids come from the CLI; never trusted as a path)."""
    text = session_id if isinstance(session_id, str) and session_id else "unknown"
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:32]


def parse_stdin(raw: bytes) -> dict | None:
    """The hook's input object, or None when it is not a JSON object."""
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None


def render(cli: str, event: str, line: str, block: bool) -> HookAnswer:
    """The answer the pinned CLI honours for ``event`` (its module's ``hook_answer``)."""
    return registry.BY_NAME[cli].hook_answer(event, line, block)


def notice(line: str) -> str:
    return f"[agent-bridge] {line} (the message text is only in the bridge)."


def run_hook(cli: str, event: str, agent: str | None, raw_stdin: bytes, now: float | None = None) -> HookAnswer:
    """Never raises: every failure is SILENT (and, when possible, one payload-free log line)."""
    runtime = None
    why = "internal_error"
    try:
        from dispatcher.core.locations import Locations

        locations = Locations.from_env()
        runtime = locations.private_dir()
        answer, why = _answer(cli, event, agent, raw_stdin, locations, now)
        if why not in ("empty", "no_store"):
            _log(runtime, cli, event, agent, why)
        return answer
    except Exception as exc:  # noqa: BLE001 - a hook must never break the session
        why = f"error {type(exc).__name__}"
    _log(runtime, cli, event, agent, why)
    return SILENT


def _answer(
    cli: str, event: str, agent: str | None, raw_stdin: bytes, locations, now: float | None
) -> tuple[HookAnswer, str]:
    """``now``: None for the clock (the decision then reads it under the session's lock, so two
    hooks of one session never decide out of order)."""
    if event not in CLI_EVENTS.get(cli, ()):
        return SILENT, "unsupported_event"
    agent = agent or os.environ.get("AGENT_ID") or ""
    if not _AGENT.fullmatch(agent):
        return SILENT, "no_agent"
    if agent not in _declared_agents(locations, agent):
        return SILENT, "unknown_agent"  # a hook written for an agent config.json no longer declares
    hook_input = parse_stdin(raw_stdin)
    if hook_input is None:
        return SILENT, "stdin_invalid"
    from dispatcher.bridge.inbox import inbox_summary, wake_line
    from dispatcher.store.readonly import open_read_only
    from dispatcher.store.store_clock import store_now

    conn = open_read_only(locations.db)
    if conn is None:
        return SILENT, "no_store"
    key = session_key(hook_input.get("session_id", hook_input.get("sessionId")))
    mark_session(locations, agent)
    try:
        summary = inbox_summary(conn, agent, store_now(conn) if now is None else now)
    finally:
        conn.close()
    if summary.unread == 0:
        return SILENT, "empty"
    waiting = tuple(w.id for w in summary.first) + ((summary.newest_id,) if summary.newest_id else ())
    active = hook_input.get("stop_hook_active") is True
    verdict = _decide_with_state(
        locations.private_dir(), agent, key, registry.BY_NAME[cli].rule_event(event), waiting, now, active
    )
    if not verdict.announce:
        return SILENT, verdict.why
    return render(cli, event, notice(wake_line(summary)), verdict.block), verdict.why


def _declared_agents(locations, agent: str) -> Collection[str]:
    """config.json's agent ids, read as plain JSON (a hook imports no pydantic); when the file
    cannot be read that way, ``agent`` alone: the store decides (nothing waits for an unknown id)."""
    try:
        agents = json.loads(locations.config_path().read_text(encoding="utf-8"))["agents"]
    except (OSError, ValueError, TypeError, KeyError):
        return (agent,)
    return agents if isinstance(agents, dict) else (agent,)


def mark_session(locations, agent: str) -> int | None:
    """The agent's MCP session whose CLI runs this hook gets the wake path "hook", so it counts as
    wakeable (``interactive_grace_seconds``). Decided per MCP session, at every hook: a new MCP
    session of the same CLI session (an ``/mcp`` reconnect, a server restart) is marked at the
    next hook, and one still starting at a later one. A read-only look; a write only to mark.
    Returns the session's id, None when no such session runs (yet)."""
    from dispatcher.bridge.presence import mark_from_descendant

    return mark_from_descendant(locations.db, agent, "hook")


def _decide_with_state(
    runtime: Path, agent: str, key: str, event: str, waiting: tuple[int, ...], now: float | None, stop_hook_active: bool
):
    def rule(state: SessionState):
        return decide(event, waiting, state, clock.now() if now is None else now, stop_hook_active=stop_hook_active)

    verdict, _ = update_state(runtime, agent, key, rule, touch=True)
    return verdict


def state_dir(runtime: Path, agent: str) -> Path:
    """The agent's directory of session states, created private if missing."""
    from dispatcher.core.private_files import ensure_private_dir

    return ensure_private_dir(runtime / "hooks" / agent, "hook state directory")


def state_path(runtime: Path, agent: str, key: str) -> Path:
    return runtime / "hooks" / agent / f"{key}.json"


def state_mtime(runtime: Path, agent: str, key: str) -> int | None:
    """When the session's state last changed (a cheap look for the waiting hook), None if never."""
    try:
        return os.stat(state_path(runtime, agent, key), follow_symlinks=False).st_mtime_ns
    except OSError:
        return None


def update_state(runtime: Path, agent: str, key: str, rule, touch: bool = False) -> tuple:
    """``rule(state) -> Verdict`` under the session's flock; the new state is written when it
    changed (``touch``: always, which keeps an active session's file from being forgotten).
    Returns the verdict and the file's mtime afterwards."""
    from dispatcher.core.private_files import open_private_lock

    directory = state_dir(runtime, agent)
    path = directory / f"{key}.json"
    fd = open_private_lock(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        raw = _read_all(fd)
        if not raw:
            _forget_old_sessions(directory, clock.now())
        try:
            state = SessionState.from_json(json.loads(raw)) if raw else SessionState()
        except ValueError:
            state = SessionState()
        verdict = rule(state)
        if touch or verdict.state != state or not raw:
            data = json.dumps(verdict.state.as_json()).encode()
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)
        return verdict, os.fstat(fd).st_mtime_ns
    finally:
        os.close(fd)


def _read_all(fd: int) -> bytes:
    chunks: list[bytes] = []
    offset = 0
    while True:
        chunk = os.pread(fd, 65536, offset)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        offset += len(chunk)
        if offset > MAX_STDIN_BYTES:
            return b""  # not ours: start over


def _forget_old_sessions(directory: Path, now: float) -> None:
    for entry in os.scandir(directory):
        try:
            if (
                entry.is_file(follow_symlinks=False)
                and now - entry.stat(follow_symlinks=False).st_mtime > STATE_KEEP_SECONDS
            ):
                os.unlink(entry.path)
        except OSError:
            pass


def valid_agent(agent: object) -> bool:
    return isinstance(agent, str) and _AGENT.fullmatch(agent) is not None


def _log(runtime: Path | None, cli: str, event: str, agent: str | None, why: str) -> None:
    """One payload-free line (ids of nothing, no text): when, which hook, which agent, the verdict."""
    if runtime is None:
        return
    try:
        from dispatcher.core.private_files import ensure_private_dir, open_private_append

        ensure_private_dir(runtime, "runtime directory")
        shown_agent = agent if agent and _AGENT.fullmatch(agent) else "-"
        line = (
            f"{clock.utc_stamp()} hook {cli} "
            f"{event if event in CLI_EVENTS.get(cli, ()) else '?'} agent={shown_agent} {why}\n"
        )
        fd = open_private_append(runtime / LOG_NAME)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    except Exception:  # noqa: BLE001, S110 - logging must not break the hook either
        pass


log_line = _log


def read_stdin() -> bytes:
    """The hook's stdin, bounded (too long or unreadable: empty, that is malformed)."""
    try:
        raw = sys.stdin.buffer.read(MAX_STDIN_BYTES + 1)
    except Exception:  # noqa: BLE001 - a closed or unreadable stdin is malformed input
        raw = b""
    return b"" if len(raw) > MAX_STDIN_BYTES else raw


def main(cli: str, event: str, agent: str | None) -> int:
    """The command's body: read stdin (bounded), answer, return the exit code. (Claude's Stop
    with ``--wait`` is ``hook_wait.main_wait``, which answers through this module first.)"""
    return emit_told(cli, event, agent, run_hook(cli, event, agent, read_stdin()))


def emit_told(cli: str, event: str, agent: str | None, answer: HookAnswer) -> int:
    """``emit``, and when the answer tells the session of mail (anything but ``SILENT``), count
    the wake after it is out (``count_told``)."""
    code = emit(answer)
    if answer != SILENT:
        count_told(cli, event, agent)
    return code


def count_told(cli: str, event: str, agent: str | None) -> None:
    """One more wake by the path ``hook`` (docs/metrics.md), once the session has been told; never
    raises: a count that fails is dropped, with a line in ``hooks.log``."""
    runtime = None
    try:
        from dispatcher.bridge.counters import count_wake_at
        from dispatcher.core.locations import Locations

        locations = Locations.from_env()
        runtime = locations.private_dir()
        why = count_wake_at(locations.db, agent or os.environ.get("AGENT_ID") or "", "hook")
    except Exception as exc:  # noqa: BLE001 - a hook must never break the session
        why = type(exc).__name__
    if why is not None:
        _log(runtime, cli, event, agent, f"count_dropped {why}")


def emit(answer: HookAnswer) -> int:
    """Print the answer; its exit code (0 when the CLI closed our pipe)."""
    try:
        if answer.stdout:
            sys.stdout.write(answer.stdout)
            sys.stdout.flush()
        if answer.stderr:
            sys.stderr.write(answer.stderr)
            sys.stderr.flush()
    except Exception:  # noqa: BLE001 - the CLI closed our pipe: nothing to tell it
        return 0
    return answer.exit_code
