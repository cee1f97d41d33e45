"""A person's command line to the bridge: ``send``, ``inbox``, ``conversation``.

The tools are for agents; these commands give a person the same from a shell, through the
same domain functions and the same identity rule: the sender (``--from``, or ``--agent``
for a conversation) must be an agent config.json declares. That is the local trust
model: whoever can run ``agent-bridge`` as this user can act as any agent of this config.
"""

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from dispatcher.bridge import conversations, messages
from dispatcher.core import clock
from dispatcher.core.config import BridgeConfig, load_config, require_agent
from dispatcher.core.errors import BridgeError, RequestRefused, StoreUnavailable
from dispatcher.core.lifecycle import FAILURE_OUTCOMES
from dispatcher.core.settings import BridgeSettings
from dispatcher.ops.show import attempt_headline, message_fields, message_report, reason_lines
from dispatcher.store import Connection, data_version, open_handle, open_store, store_errors
from dispatcher.store.attempts import get_attempt
from dispatcher.store.messages import fetch_message, inbox_rows
from dispatcher.store.readonly import open_read_only
from dispatcher.store.views import replies_to

WAIT_CHECK_SECONDS = 0.1
INBOX_LIMIT = 50


def _config(settings: BridgeSettings, agent: str, source: str) -> BridgeConfig:
    """The identity rule: ``agent`` must be declared (``unknown_agent`` names the declared ones)."""
    config = load_config(settings.config_path())
    require_agent(config, agent, settings.config_path(), source)
    return config


@contextmanager
def _store(settings: BridgeSettings) -> Iterator[Connection]:
    """The store, read-write; a rule's refusal becomes ``RequestRefused`` (exit status 2)."""
    with store_errors():
        conn = open_store(settings.db)
    try:
        with _refusals():
            yield conn
    finally:
        conn.close()


@contextmanager
def _refusals() -> Iterator[None]:
    """Store failures as ``store_errors`` names them; a rule's refusal as ``RequestRefused``."""
    try:
        with store_errors():
            yield
    except StoreUnavailable:
        raise
    except BridgeError as exc:
        raise RequestRefused.of(exc) from None


def _read_stdin(size: int) -> bytes:
    return sys.stdin.buffer.read(size)


def read_text(text: str, max_bytes: int, stdin: Callable[[int], bytes] = _read_stdin) -> str:
    """TEXT as given, or standard input for ``-``: at most ``max_bytes`` and one more are read, so
    a larger (or endless) input is refused without being held; an empty text is refused too."""
    body = _limited(stdin(max_bytes + 1), max_bytes) if text == "-" else text
    if not body.strip():
        where = "standard input was empty" if text == "-" else "the text is empty"
        raise RequestRefused("empty_text", f"{where}; give the text as an argument, or `-` and pipe it in.")
    return body


def _limited(data: bytes, max_bytes: int) -> str:
    if len(data) > max_bytes:
        raise RequestRefused(
            "text_too_large",
            f"standard input holds more than {max_bytes} bytes, the limit (AGENT_BRIDGE_MAX_BODY_BYTES); nothing was "
            "sent. Send a shorter text, or a file's path instead of its content.",
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise RequestRefused("invalid_text", "standard input is not UTF-8 text; nothing was sent.") from None


def send(
    settings: BridgeSettings,
    *,
    sender: str,
    recipient: str,
    text: str,
    kind: str | None,
    dedup_key: str | None = None,
) -> dict[str, Any]:
    """``send_message`` as the tool does it (``send_once``: a lost answer is retried with the
    send's key, and an unknown outcome names it), with ``sender`` declared in config.json."""
    config = _config(settings, sender, "--from")
    store = open_handle(settings.db)
    try:
        with store_errors():
            store.connection()  # a store that cannot be opened is no rule's refusal
        with _refusals():
            return messages.send_once(
                store.connection,  # a broken connection is opened again for the retry
                sender=sender,
                recipient=recipient,
                text=text,
                agents=frozenset(config.agents),
                max_body_bytes=settings.max_body_bytes,
                dedup_key=dedup_key,
                kind=kind,
            )
    finally:
        store.close()


def _settled(conn: Connection, message_id: int) -> bool:
    """A task settles when its attempt has an outcome, or when the recipient acknowledged it
    and answered with a result (an interactive session took it: no attempt is coming)."""
    attempt = get_attempt(conn, message_id)
    if attempt is not None:
        return attempt["outcome"] is not None
    row = fetch_message(conn, message_id)
    if row is None:
        raise BridgeError("message_not_found", f"message #{message_id} is gone (pruned?); nothing to wait for.")
    if row["acknowledged_at"] is None:
        return False
    return any(reply["kind"] == "result" for reply in replies_to(conn, message_id))


def wait_settled(settings: BridgeSettings, message_id: int, timeout: float) -> dict[str, Any]:
    """Block until task ``message_id`` settles (see ``_settled``), then return ``show``'s report.

    Looks again only when the store changed (``data_version``), at most every 0.1 s.
    """
    deadline = clock.monotonic() + timeout
    with store_errors():
        conn = open_store(settings.db)
    try:
        seen = None
        while True:
            with store_errors():
                version = data_version(conn)
                if version != seen and _settled(conn, message_id):
                    return message_report(settings, message_id)
            seen = version
            if clock.monotonic() >= deadline:
                raise BridgeError(
                    "wait_timeout",
                    f"task #{message_id} has not settled after {timeout:g} s; it is still queued. "
                    f"Follow it with `agent-bridge show {message_id}` or `agent-bridge top`.",
                )
            time.sleep(WAIT_CHECK_SECONDS)
    finally:
        conn.close()


def render_settled(report: dict[str, Any]) -> str:
    """The outcome, then each reply in full: what a person waited for."""
    attempt = report["dispatch"]
    if attempt is None:
        head = f"task #{report['id']}: answered by an interactive session of {report['recipient']} (no dispatch)"
    else:
        head = "\n".join([f"task #{report['id']}: {attempt_headline(attempt)}", *reason_lines(attempt)])
    lines = [head]
    for reply in report["replies"]:
        lines += ["", f"{reply['kind'] or 'message'} #{reply['id']} from {reply['sender']}:", reply["text"]]
    return "\n".join(lines)


def failed_outcome(report: dict[str, Any]) -> str | None:
    """The failure outcome of the task's attempt, if it failed."""
    attempt = report["dispatch"]
    if attempt is not None and attempt["outcome"] in FAILURE_OUTCOMES:
        return str(attempt["outcome"])
    return None


def inbox(settings: BridgeSettings, agent: str, *, unread: bool) -> list[dict[str, Any]]:
    """``agent``'s latest messages (newest last), read-only: never marks anything read."""
    _config(settings, agent, "--agent")
    conn = open_read_only(settings.db, named_rows=True)
    if conn is None:
        return []
    try:
        with store_errors():
            rows = inbox_rows(conn, agent, unread_only=unread, limit=INBOX_LIMIT)
    finally:
        conn.close()
    return [message_fields(row) for row in rows]


def render_inbox(agent: str, rows: list[dict[str, Any]], *, unread: bool) -> str:
    if not rows:
        return f"no {'unread ' if unread else ''}messages for {agent}"
    lines = []
    for row in rows:
        first = row["text"].splitlines()[0] if row["text"] else ""
        first = first if len(first) <= 80 else first[:80] + " …"
        state = "read" if row["acknowledged_at"] else "unread"
        lines.append(
            f"#{row['id']} {row['kind'] or 'message'} from {row['sender']} {row['created_at']} {state}: {first}"
        )
    lines.append(f"(`agent-bridge show ID` prints one in full; the last {INBOX_LIMIT} at most)")
    return "\n".join(lines)


def start_conversation(
    settings: BridgeSettings,
    *,
    initiator: str,
    recipient: str,
    goal: str,
    max_turns: int,
    expires_in_seconds: int,
    max_cost_usd: float | None,
    dedup_key: str | None,
) -> dict[str, Any]:
    config = _config(settings, initiator, "--from")
    with _store(settings) as conn:
        return conversations.start_conversation(
            conn,
            initiator=initiator,
            recipient=recipient,
            goal=goal,
            agents=frozenset(config.agents),
            max_body_bytes=settings.max_body_bytes,
            max_turns=max_turns,
            expires_in_seconds=expires_in_seconds,
            dedup_key=dedup_key,
            max_cost_usd=max_cost_usd,
        )


def conversation_action(settings: BridgeSettings, *, agent: str, action: str, conversation_id: int) -> dict[str, Any]:
    _config(settings, agent, "--agent")
    with _store(settings) as conn:
        return conversations.conversation_action(conn, agent=agent, action=action, conversation_id=conversation_id)
