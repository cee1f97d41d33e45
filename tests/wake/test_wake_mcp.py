"""The server's wake paths over real stdio with the real mcp Client (2025 handshake, as
Claude Code and Codex speak it): ``bridge://inbox`` with subscribe / resources-updated, and
the opt-in ``notifications/claude/channel`` ping. Payload-free, and never tools/list_changed.

Messages are sent by the test process straight into the store (another connection's commit,
exactly what a peer's server does)."""

import asyncio
import contextlib
import json
import sys
import threading
import time
import warnings
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from harness import PROJECT, bridge_env, inotify_descriptors, on_backend, server_pid, write_config
from mcp import Client
from mcp.client.extension import ClientExtension, NotificationBinding
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, ConfigDict

from dispatcher.bridge import messages
from dispatcher.bridge.inbox import InboxSummary, Waiting
from dispatcher.core.file_events import MODE_VARIABLE
from dispatcher.mcp.wake_mcp import (
    CHANNEL_CAPABILITY,
    CHANNEL_METHOD,
    RESOURCE_URI,
    InboxWake,
    _listens_to_inbox,
    channel_enabled,
    channel_params,
    resource_signature,
)
from dispatcher.store import StoreHandle, open_handle
from dispatcher.store.metrics import counter_totals

pytestmark = pytest.mark.both_backends  # the tests on ``world``; the rest need no store or plant one

TIMEOUT = 60.0
SECRET = "the-secret-payload-41"
AGENTS = {"claude", "kimi", "codex"}


class _ChannelParams(BaseModel):
    model_config = ConfigDict(extra="allow")  # anything extra the server sent stays visible


class _ChannelObserver(ClientExtension):
    identifier = "test.agent-bridge/channel-observer"

    def __init__(self, seen: list) -> None:
        self._seen = seen

    def notifications(self):
        async def handler(params: _ChannelParams) -> None:
            self._seen.append((time.monotonic(), params.model_dump()))

        return [NotificationBinding(method=CHANNEL_METHOD, params_type=_ChannelParams, handler=handler)]


class WakeClient:
    """One server process and a legacy-handshake client recording every notification."""

    def __init__(self, agent: str, env: dict[str, str], errlog: Path, mode: str = "legacy") -> None:
        self.mode = mode
        self.events: list[Any] = []
        self.notifications: list[tuple[float, Any]] = []
        self.channel: list[tuple[float, dict]] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._ready: Future = Future()
        self._errlog = open(errlog, "a")  # noqa: SIM115 - the server's stderr for its whole life; close() closes it
        params = StdioServerParameters(
            command=sys.executable, args=[str(PROJECT / "server.py")], env={**env, "AGENT_ID": agent}, cwd=str(PROJECT)
        )
        self._main = asyncio.run_coroutine_threadsafe(self._run(params), self._loop)

    async def _on_message(self, message: Any) -> None:
        self.notifications.append((time.monotonic(), message))

    async def _run(self, params: StdioServerParameters) -> None:
        self._stop = asyncio.Event()
        try:
            async with Client(
                stdio_client(params, errlog=self._errlog),
                mode=self.mode,
                read_timeout_seconds=TIMEOUT,
                message_handler=self._on_message,
                extensions=[_ChannelObserver(self.channel)],
            ) as client:
                self.client = client
                self._ready.set_result(True)
                await self._stop.wait()
        except BaseException as exc:
            if not self._ready.done():
                self._ready.set_exception(exc)
            raise

    def run(self, coro_fn, *args: Any) -> Any:
        self._ready.result(TIMEOUT)
        return asyncio.run_coroutine_threadsafe(coro_fn(self.client, *args), self._loop).result(TIMEOUT)

    def listen_in_background(self) -> None:
        """A 2026-07-28 ``subscriptions/listen`` stream for bridge://inbox, collecting its events."""
        listening: Future = Future()

        async def go() -> None:
            async with self.client.listen(resource_subscriptions=[RESOURCE_URI]) as sub:
                listening.set_result(True)
                async for event in sub:
                    self.events.append(event)

        self._ready.result(TIMEOUT)
        self._listen = asyncio.run_coroutine_threadsafe(go(), self._loop)
        listening.result(TIMEOUT)

    def updates(self) -> list[float]:
        return [
            t
            for t, m in self.notifications
            if isinstance(m, types.ResourceUpdatedNotification) and m.params.uri == RESOURCE_URI
        ]

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        # Whatever the server's task ended with (closing is all that is left), the loop must stop.
        with contextlib.suppress(BaseException):
            self._main.result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()
        self._errlog.close()


def wait_for(predicate, what: str, timeout: float = TIMEOUT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def world(tmp_path_factory, backend, request):
    root = tmp_path_factory.mktemp("wake")
    agents = {a: {"auto": False, "launcher": "launchers/claude_headless.sh"} for a in sorted(AGENTS)}
    env = on_backend(bridge_env(root, write_config(root / "config.json", agents)), backend, request)
    plain = WakeClient("claude", env, root / "claude.err")  # channel off (default)
    channel = WakeClient("kimi", {**env, "AGENT_BRIDGE_CLAUDE_CHANNEL": "1"}, root / "kimi.err")
    modern = WakeClient("codex", {**env, "AGENT_BRIDGE_CLAUDE_CHANNEL": "1"}, root / "codex.err", mode="auto")
    store = open_handle(env["AGENT_BRIDGE_DB"])
    try:
        yield {"plain": plain, "channel": channel, "modern": modern, "store": store}
    finally:
        for client in (plain, channel, modern):
            client.close()
        store.close()


def send(store: StoreHandle, recipient: str, sender: str = "codex", kind: str | None = "task") -> int:
    return messages.send_message(
        store.connection(), sender=sender, recipient=recipient, text=SECRET, agents=AGENTS, kind=kind
    )["id"]


def told(store: StoreHandle, agent: str, path: str) -> int:
    """How many times ``path`` told ``agent``'s session of new mail, by the store's counter."""
    return counter_totals(store.connection(), "wakes", agent).get((agent, path, ""), 0)


def ack(store: StoreHandle, agent: str, ids: list[int]) -> None:
    done = messages.mark_read(store.connection(), agent=agent, worker_id="test", message_ids=ids)
    assert done["acknowledged"] == ids


# --- pure decisions ---------------------------------------------------------------------


def test_channel_only_when_asked_and_only_for_a_session():
    assert channel_enabled(True, "session")
    assert not channel_enabled(False, "session")
    assert not channel_enabled(True, "worker")  # a worker's claude -p never loads channels


def test_channel_params_carry_ids_and_counts_only():
    summary = InboxSummary("kimi", 12, 1.0, 52, tuple(Waiting(i, "codex", "task") for i in range(41, 51)))
    params = channel_params(summary)
    assert params["meta"] == {"ids": "41,42,43,44,45,46,47,48,49,50", "count": "12"}
    assert params["content"].startswith("12 new for kimi: #41 from codex (task)")
    assert params["content"].endswith("and 2 more — call receive_messages")
    assert channel_params(InboxSummary("kimi", 0, None, None)) is None


def test_resource_signature_changes_with_the_unread_set_not_the_clock():
    one = InboxSummary("a", 1, 1.0, 5, (Waiting(5, "b", None),))
    assert resource_signature(one) == resource_signature(InboxSummary("a", 1, 99.0, 5, (Waiting(5, "b", None),)))
    assert resource_signature(one) != resource_signature(InboxSummary("a", 1, 1.0, 6, (Waiting(6, "b", None),)))
    assert resource_signature(one) != resource_signature(InboxSummary("a", 0, None, None))


@pytest.mark.parametrize(
    "params, wanted",
    [
        ({"notifications": {"resourceSubscriptions": [RESOURCE_URI]}}, True),
        ({"notifications": {"resourceSubscriptions": ["bridge://other"], "toolsListChanged": True}}, False),
        ({"notifications": {}}, False),
        ({"notifications": {"resourceSubscriptions": None}}, False),
        ({"notifications": True}, False),
        ({}, False),
        (None, False),
    ],
)
def test_which_listen_streams_want_the_inbox(params, wanted):
    assert _listens_to_inbox(params) is wanted


def test_reading_a_store_that_is_not_a_database_is_a_short_refusal(tmp_path):
    from mcp.server.mcpserver.exceptions import ResourceError

    bad = tmp_path / "bridge.db"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(ResourceError, match=r"^store_unavailable: cannot read the inbox \(DatabaseError\)"):
        InboxWake(bad, "claude", channel=False).read()
    missing = json.loads(InboxWake(tmp_path / "none.db", "claude", channel=False).read())
    assert missing == {"agent": "claude", "unread": 0, "oldest_age_seconds": None, "newest_id": None, "messages": []}
    assert not (tmp_path / "none.db").exists()


def test_a_resource_update_counts_a_wake_only_for_mail_newer_than_it_told_of(tmp_path):
    """Mail already unread when the client subscribed is not news; an update for a read is not
    new mail; one for a newer message is counted once (``on_told``)."""
    from dispatcher.store import open_store
    from dispatcher.wake.inbox_watch import InboxReader

    db = tmp_path / "bridge.db"
    conn = open_store(db)
    old = [
        messages.send_message(conn, sender="kimi", recipient="claude", text=SECRET, agents=AGENTS, kind="task")["id"]
        for _ in range(2)
    ]
    sent: list[Any] = []
    told: list[str] = []

    class Session:
        async def send_notification(self, notification: Any) -> None:
            sent.append(notification)

    wake = InboxWake(db, "claude", channel=False, on_told=told.append)
    wake.subscribe(Session())
    reader = InboxReader(db, "claude")
    try:
        generation = asyncio.run(wake._look(reader, 0))  # the first look: nothing changed since the baseline
        messages.mark_read(conn, agent="claude", worker_id="t", message_ids=old[:1])
        generation = asyncio.run(wake._look(reader, generation))
        assert (len(sent), told) == (1, [])  # the reader is told of the read; it is no wake
        messages.send_message(conn, sender="kimi", recipient="claude", text=SECRET, agents=AGENTS, kind="task")
        asyncio.run(wake._look(reader, generation))
        assert (len(sent), told) == (2, ["resource"])
    finally:
        reader.close()
        conn.close()


# --- over stdio -------------------------------------------------------------------------


def test_capabilities_subscribe_yes_list_changed_no_channel_only_when_on(world):
    plain = world["plain"].run(lambda c: asyncio.sleep(0, c.server_capabilities))
    channel = world["channel"].run(lambda c: asyncio.sleep(0, c.server_capabilities))
    assert plain.resources.subscribe is True and not plain.tools.list_changed
    assert CHANNEL_CAPABILITY not in (plain.experimental or {})
    assert channel.experimental == {CHANNEL_CAPABILITY: {}}
    assert channel.resources.subscribe is True and not channel.tools.list_changed


def test_inbox_resource_reads_the_payload_free_summary(world):
    listed = world["plain"].run(lambda c: c.list_resources())
    assert [str(r.uri) for r in listed.resources] == [RESOURCE_URI]
    first = send(world["store"], "claude", sender="kimi", kind="notice")
    try:
        read = world["plain"].run(lambda c: c.read_resource(RESOURCE_URI))
        text = read.contents[0].text
        data = json.loads(text)
        assert SECRET not in text
        assert data["agent"] == "claude" and data["unread"] >= 1 and data["newest_id"] == first
        assert {"id": first, "sender": "kimi", "kind": "notice"} in data["messages"]
    finally:
        ack(world["store"], "claude", [first])
    after = json.loads(world["plain"].run(lambda c: c.read_resource(RESOURCE_URI)).contents[0].text)
    assert first not in [m["id"] for m in after["messages"]]


def test_subscribed_client_is_told_on_arrival_and_acknowledgement_until_it_unsubscribes(world):
    client, store = world["plain"], world["store"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # resources/subscribe is deprecated for 2026 servers only
        client.run(lambda c: c.subscribe_resource(RESOURCE_URI))
    seen = len(client.updates())
    time.sleep(0.5)
    assert len(client.updates()) == seen  # nothing changed, nothing said
    counted = told(store, "claude", "resource")
    message = send(store, "claude")
    wait_for(lambda: len(client.updates()) > seen, "resources/updated after a message arrived")
    wait_for(lambda: told(store, "claude", "resource") == counted + 1, "the wake counted")
    seen = len(client.updates())
    ack(store, "claude", [message])
    wait_for(lambda: len(client.updates()) > seen, "resources/updated after the message was acknowledged")
    time.sleep(0.5)
    assert told(store, "claude", "resource") == counted + 1  # an acknowledgement is no new mail: not counted
    send(store, "kimi")  # someone else's mail: the claude inbox did not change
    time.sleep(1.0)
    seen = len(client.updates())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        client.run(lambda c: c.unsubscribe_resource(RESOURCE_URI))
    later = send(store, "claude")
    time.sleep(1.5)
    assert len(client.updates()) == seen
    ack(store, "claude", [later])


@pytest.mark.parametrize("mode", ["inotify", "poll"])
def test_a_subscribed_watcher_sleeps_on_the_store_s_file_events_and_wakes_on_a_send(tmp_path, mode):
    agents = {a: {"auto": False, "launcher": "launchers/claude_headless.sh"} for a in sorted(AGENTS)}
    env = {**bridge_env(tmp_path, write_config(tmp_path / "config.json", agents)), MODE_VARIABLE: mode}
    client, store = WakeClient("claude", env, tmp_path / "claude.err"), open_handle(env["AGENT_BRIDGE_DB"])
    try:
        client.run(lambda c: c.read_resource(RESOURCE_URI))  # the server is up
        pid = server_pid("claude", env["AGENT_BRIDGE_DB"])
        idle = inotify_descriptors(pid)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            client.run(lambda c: c.subscribe_resource(RESOURCE_URI))
        if mode == "inotify":  # the watcher sleeps on a watch of its own, not on a poll interval
            wait_for(lambda: inotify_descriptors(pid) == idle + 1, "the watcher's inotify watch")
        else:
            assert inotify_descriptors(pid) == 0
        seen = len(client.updates())
        send(store, "claude")
        wait_for(lambda: len(client.updates()) > seen, "resources/updated after a message arrived")
    finally:
        client.close()
        store.close()


def test_subscribing_to_another_uri_is_refused_with_the_one_that_exists(world):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(MCPError) as refused:
            world["plain"].run(lambda c: c.subscribe_resource("bridge://outbox"))
    assert "unknown_resource" in str(refused.value) and RESOURCE_URI in str(refused.value)


def test_channel_pings_new_messages_with_ids_and_counts_never_text(world):
    client, store = world["channel"], world["store"]
    before = len(client.channel)
    counted = told(store, "kimi", "channel")
    first = send(store, "kimi", sender="codex")
    _, params = wait_for(lambda: client.channel[before:] and client.channel[before], "a channel notification")
    assert params["meta"] == {"ids": str(first), "count": "1"}
    assert params["content"] == f"1 new for kimi: #{first} from codex (task) — call receive_messages"
    assert SECRET not in json.dumps(params)
    # The next ping names only what is new since, and acknowledging sends nothing.
    second = send(store, "kimi", sender="claude", kind="notice")
    _, params = wait_for(lambda: client.channel[before + 1 :] and client.channel[before + 1], "a second ping")
    assert params["meta"] == {"ids": str(second), "count": "1"}
    ack(store, "kimi", [first, second])
    time.sleep(1.0)
    assert len(client.channel) == before + 2
    assert told(store, "kimi", "channel") == counted + 2  # once per ping (docs/metrics.md)
    assert told(store, "kimi", "resource") == 0  # not subscribed: no resource update went out


def test_channel_off_sends_no_channel_and_nobody_gets_tools_list_changed(world):
    send(world["store"], "claude")
    time.sleep(1.0)
    assert world["plain"].channel == []
    for client in (world["plain"], world["channel"]):
        methods = {getattr(m, "method", type(m).__name__) for _, m in client.notifications}
        assert "notifications/tools/list_changed" not in methods, methods


def test_a_2026_client_listening_to_the_inbox_is_told_and_gets_no_channel(world):
    client, store = world["modern"], world["store"]
    assert client.run(lambda c: asyncio.sleep(0, c.protocol_version)) == "2026-07-28"
    client.listen_in_background()
    time.sleep(0.5)
    assert client.events == []
    counted = told(store, "codex", "resource")
    message = send(store, "codex", sender="kimi")
    wait_for(lambda: client.events, "a resource-updated event on the listen stream")
    wait_for(lambda: told(store, "codex", "resource") == counted + 1, "the wake counted")
    assert [str(e.uri) for e in client.events] == [RESOURCE_URI]
    ack(store, "codex", [message])
    wait_for(lambda: len(client.events) == 2, "an event after the acknowledgement")
    assert client.channel == []  # the channel capability belongs to the 2025 handshake


@pytest.mark.parametrize("value, expected", [("1", True), ("true", True), ("0", False), ("", False)])
def test_the_channel_setting(monkeypatch, value, expected):
    from dispatcher.core.settings import BridgeSettings

    monkeypatch.setenv("AGENT_BRIDGE_CLAUDE_CHANNEL", value)
    assert BridgeSettings().claude_channel is expected


def test_an_unusable_channel_setting_names_the_variable(monkeypatch):
    from dispatcher.core.settings import BridgeSettings, InvalidSetting

    monkeypatch.setenv("AGENT_BRIDGE_CLAUDE_CHANNEL", "maybe")
    with pytest.raises(InvalidSetting) as caught:
        BridgeSettings()
    assert caught.value.variable == "AGENT_BRIDGE_CLAUDE_CHANNEL"


def test_armed_wake_paths_are_recorded_on_each_session_row(world):
    client, store = world["plain"], world["store"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        client.run(lambda c: c.subscribe_resource(RESOURCE_URI))

    def paths(agent: str) -> list[str] | None:
        rows = (
            store.connection()
            .execute("SELECT wake_paths FROM sessions WHERE agent = ? AND role = 'interactive'", (agent,))
            .fetchall()
        )
        return json.loads(rows[0][0]) if len(rows) == 1 else None

    assert wait_for(lambda: paths("claude") == ["resource"], "claude's session marked resource")
    assert wait_for(lambda: paths("kimi") == ["channel"], "kimi's session (channel on) marked channel")
