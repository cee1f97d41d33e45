"""The server's wake paths: the ``bridge://inbox`` resource and the opt-in Claude channel ping.

Installed by one call from ``mcp_server.build_server``. Both only hint: every signal is
payload-free (counts, ids, senders, kinds) and asks the model to call ``receive_messages``;
the store stays the truth, so a dropped notification loses nothing.

- ``bridge://inbox``: reading it returns the inbox summary (``InboxSummary.as_dict``).
  ``resources/subscribe`` / ``resources/unsubscribe`` are served; a subscribed client gets
  ``notifications/resources/updated`` whenever the unread set changes (a message arrives, is
  acknowledged or claimed). Claude Code and Codex receive these but start no turn on them.
  A 2026-07-28 client gets the same through ``subscriptions/listen`` naming ``bridge://inbox``.
- Claude channel (``AGENT_BRIDGE_CLAUDE_CHANNEL=1``, interactive sessions only): the server
  declares the experimental ``claude/channel`` capability and sends
  ``notifications/claude/channel`` ``{content: <wake line>, meta: {ids, count}}`` when new
  messages arrive. Claude Code shows it only in sessions started with
  ``--dangerously-load-development-channels server:agent_bridge``, and drops it otherwise.

Subscription state lives in this process only (``InboxWake``), for the one client of this
stdio server; nothing is written to the store. The watcher starts with the first subscription,
listen stream or (channel on) completed 2025 handshake, sleeps on the store's file events
(``core.file_events``: inotify, a slow poll as the fallback), reads ``PRAGMA data_version`` on
its own read-only connection after each while one of those wants it, and stops with the server. The
channel is sent only after the 2025 handshake (where the capability is declared). It writes
nothing to stdout but protocol messages.
"""

import json
from collections.abc import Callable
from typing import Any, Final

import mcp_types as types
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import ResourceUpdated

from dispatcher.bridge.counters import count_wake
from dispatcher.bridge.inbox import InboxSummary, wake_line
from dispatcher.clis import registry
from dispatcher.clis.base import Channel
from dispatcher.core.clock import now as clock_now
from dispatcher.core.file_events import RECHECK_SECONDS
from dispatcher.core.locations import StoreLocation
from dispatcher.core.logs import get_logger
from dispatcher.mcp.lifespan import run_alongside
from dispatcher.mcp.sdk_private import lowlevel_server, resource_subscriptions
from dispatcher.store import Connection
from dispatcher.store.changes import StoreChanges
from dispatcher.wake.inbox_watch import InboxReader

RESOURCE_URI = "bridge://inbox"
# The channel a CLI declares (its AgentCli.channel, today Claude Code's), or none.
CHANNEL: Final[Channel | None] = registry.channel()
CHANNEL_CAPABILITY: Final = CHANNEL.capability if CHANNEL else ""
CHANNEL_METHOD: Final = CHANNEL.method if CHANNEL else ""

log = get_logger("agent_bridge.wake")


class _ChannelNotification(types.Notification[dict[str, Any], str]):
    method: str = CHANNEL_METHOD


def channel_setting(settings: object) -> bool:
    """Whether the channel's own setting (``Channel.setting``, a ``BridgeSettings`` field) is on."""
    return CHANNEL is not None and bool(getattr(settings, CHANNEL.setting, False))


def channel_enabled(channel: bool, role: str) -> bool:
    """The channel ping is opt-in, and only for an interactive session's server (a headless
    worker runs its CLI non-interactively, where channels never load)."""
    return bool(channel) and role == "session"


def resource_signature(summary: InboxSummary) -> tuple:
    """What a ``bridge://inbox`` reader would see change (its age field aside)."""
    return summary.unread, summary.newest_id, tuple(w.id for w in summary.first)


def channel_params(summary: InboxSummary) -> dict[str, Any] | None:
    """The channel notification's params for newly arrived messages, or None for none.

    ``meta`` values are strings: Claude Code turns each meta entry into an attribute of the
    ``<channel>`` tag. Ids and counts only, never text.
    """
    if summary.unread == 0:
        return None
    return {
        "content": wake_line(summary, new=True),
        "meta": {"ids": ",".join(str(w.id) for w in summary.first), "count": str(summary.unread)},
    }


class InboxWake:
    """Per-process wake state for the one client of this stdio server.

    Three audiences, each with its own baseline: a 2025-era client subscribed with
    ``resources/subscribe`` (``subscribed``/``signature``), 2026-era ``subscriptions/listen``
    streams asking for ``bridge://inbox`` (``listening``/``listen_signature``, told through the
    SDK's subscription bus), and the channel (``channel_session``/``announced``).
    """

    def __init__(
        self,
        db: StoreLocation,
        agent: str,
        *,
        channel: bool,
        bus: Any = None,
        on_armed: Callable[[str], None] | None = None,
        on_told: Callable[[str], None] | None = None,
    ) -> None:
        self.db = db
        # Told "resource" or "channel" when that path is armed (the session row's wake paths).
        self.on_armed = on_armed or (lambda path: None)
        # Told "resource" or "channel" once that path has told the client of new mail (the count).
        self.on_told = on_told or (lambda path: None)
        self.told_through = 0  # the highest id a resource update has told of (new mail, not a read)
        self.agent = agent
        self.channel = channel
        self.bus = bus
        self.subscribed = False
        self.signature: tuple | None = None  # what the resources/subscribe client last saw
        self.session: Any = None  # that client's session (its connection's own channel)
        self.listening = 0  # open subscriptions/listen streams that asked for bridge://inbox
        self.listen_signature: tuple | None = None
        self.channel_session: Any = None  # set once the 2025 handshake completed, when the channel is on
        self.announced = 0  # highest id the channel has covered
        self._task_group: Any = None
        self._started = False

    def _current(self) -> InboxSummary:
        reader = InboxReader(self.db, self.agent)
        try:
            reader.changed()
            return reader.summary()
        finally:
            reader.close()

    def read(self) -> str:
        try:
            return json.dumps(self._current().as_dict(clock_now()))
        except Exception as exc:  # noqa: BLE001 - store errors and the like: a short refusal, never a traceback
            raise ResourceError(
                f"store_unavailable: cannot read the inbox ({type(exc).__name__}); try again or run `agent-bridge doctor`."
            ) from None

    def _baseline(self) -> InboxSummary:
        try:
            return self._current()
        except Exception as exc:  # noqa: BLE001 - best effort: the next poll reads again
            log.info("wake_read_failed", error=type(exc).__name__, agent=self.agent)
            return InboxSummary(self.agent, 0, None, None)

    def subscribe(self, session: Any) -> None:
        """From now on, tell ``session`` whenever the unread set differs from what it is now."""
        baseline = self._baseline()
        self.signature = resource_signature(baseline)
        self.told_through = max(self.told_through, baseline.newest_id or 0)  # (mail already there is not news)
        self.session = session
        self.subscribed = True
        self.on_armed("resource")
        self._start()

    def listen_opened(self) -> None:
        if self.listening == 0:
            baseline = self._baseline()
            self.listen_signature = resource_signature(baseline)
            self.told_through = max(self.told_through, baseline.newest_id or 0)
        self.listening += 1
        self.on_armed("resource")
        self._start()

    def initialized(self, session: Any) -> None:
        """The 2025 handshake completed: the channel (when on) covers what arrives from now on."""
        if self.channel and self.channel_session is None:
            self.announced = self._baseline().newest_id or 0
            self.channel_session = session
            self.on_armed("channel")
            self._start()

    def _start(self) -> None:
        if not self._started and self._task_group is not None:
            self._started = True
            self._task_group.start_soon(self._watch)

    async def _notify(self, session: Any, notification: Any) -> bool:
        """Whether the notification went out."""
        try:
            await session.send_notification(notification)
        except Exception as exc:  # noqa: BLE001 - best effort: the queue is the truth
            log.info("wake_notification_dropped", error=type(exc).__name__, agent=self.agent)
            return False
        return True

    async def _watch(self) -> None:
        reader = InboxReader(self.db, self.agent)
        # Watched before the first look (the baseline was read before this task started): a
        # commit the look misses is an event for the wait after it.
        events = StoreChanges(self.db, self.agent)
        generation = 0
        try:
            while True:
                if self.subscribed or self.listening or self.channel_session is not None:
                    generation = await self._look(reader, generation)
                await events.next_change(RECHECK_SECONDS)  # every commit writes the -wal: an event
        finally:
            events.close()
            reader.close()

    async def _look(self, reader: InboxReader, generation: int) -> int:
        """Tell whoever wants it what changed since they last heard; the store's generation now."""
        channel = self.channel_session is not None
        try:
            if not reader.changed():
                return generation
            if reader.generation != generation:  # a new store file: ids start again
                self.announced = 0 if generation else self.announced
                self.told_through = 0 if generation else self.told_through
                generation = reader.generation
            summary = reader.summary()
            fresh = reader.summary(after_id=self.announced) if channel else None
        except Exception as exc:  # noqa: BLE001 - locked or replaced store: look again next time
            log.info("wake_read_failed", error=type(exc).__name__, agent=self.agent)
            reader.close()
            return generation
        now_signature = resource_signature(summary)
        updated = False  # a resource update went out (to a subscriber, or to a listen stream)
        if self.subscribed and now_signature != self.signature:
            self.signature = now_signature
            updated = await self._notify(
                self.session,
                types.ResourceUpdatedNotification(params=types.ResourceUpdatedNotificationParams(uri=RESOURCE_URI)),
            )
        if self.listening and now_signature != self.listen_signature and self.bus is not None:
            self.listen_signature = now_signature
            await self.bus.publish(ResourceUpdated(uri=RESOURCE_URI))
            updated = True
        if updated and (summary.newest_id or 0) > self.told_through:  # new mail, not a read or a claim
            self.told_through = summary.newest_id or 0
            self.on_told("resource")
        if fresh is not None:
            if (params := channel_params(fresh)) is not None and await self._notify(
                self.channel_session, _ChannelNotification(params=params)
            ):
                self.on_told("channel")
            self.announced = max(self.announced, summary.newest_id or 0, fresh.newest_id or 0)
        return generation


def counting(agent: str, connect: Callable[[], Connection]) -> Callable[[str], None]:
    """An ``on_told`` that adds one to the agent's count of wakes by that path (docs/metrics.md),
    on the server's own store connection; a count that fails is logged and dropped."""

    def told(path: str) -> None:
        if (why := count_wake(connect, agent, path)) is not None:
            log.info("count_dropped", agent=agent, counter="wakes", path=path, error=why)

    return told


def _listens_to_inbox(params: Any) -> bool:
    """Whether a ``subscriptions/listen`` request's filter names ``bridge://inbox``."""
    try:
        return RESOURCE_URI in (params["notifications"].get("resourceSubscriptions") or ())
    except (KeyError, TypeError, AttributeError):
        return False


def install(
    mcp: MCPServer,
    agent: str,
    db: StoreLocation,
    *,
    channel: bool,
    role: str,
    on_armed: Callable[[str], None] | None = None,
    on_told: Callable[[str], None] | None = None,
) -> InboxWake:
    """Add ``bridge://inbox`` (+ subscribe) and, when ``channel`` (``channel_setting``), the channel to ``mcp``."""
    wake = InboxWake(
        db,
        agent,
        channel=channel_enabled(channel, role),
        bus=resource_subscriptions(mcp),
        on_armed=on_armed,
        on_told=on_told,
    )
    low = lowlevel_server(mcp)

    @mcp.resource(
        RESOURCE_URI,
        name="inbox",
        description="Your unread messages, payload-free: count, oldest age, newest id and the first ids with "
        "sender and kind. Subscribe to be told when it changes; then call receive_messages.",
        mime_type="application/json",
    )
    def inbox() -> str:
        return wake.read()

    def _check_uri(uri: str) -> None:
        if str(uri) != RESOURCE_URI:
            raise MCPError(
                code=types.INVALID_PARAMS,
                message=f"unknown_resource: only {RESOURCE_URI} can be subscribed to; got {str(uri)[:200]!r}.",
            )

    async def subscribe(ctx: Any, params: types.SubscribeRequestParams) -> types.EmptyResult:
        _check_uri(params.uri)
        wake.subscribe(ctx.session)
        return types.EmptyResult()

    async def unsubscribe(ctx: Any, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        _check_uri(params.uri)
        wake.subscribed = False
        return types.EmptyResult()

    async def watch_sessions(ctx: Any, call_next: Any) -> Any:
        # A middleware, not handlers: notifications/initialized and subscriptions/listen keep theirs.
        if ctx.method == "subscriptions/listen" and _listens_to_inbox(ctx.params):
            wake.listen_opened()
            try:
                return await call_next(ctx)  # returns when the stream ends
            finally:
                wake.listening -= 1
        result = await call_next(ctx)
        if ctx.method == "notifications/initialized":
            wake.initialized(ctx.session)
        return result

    low.add_request_handler("resources/subscribe", types.SubscribeRequestParams, subscribe)
    low.add_request_handler("resources/unsubscribe", types.UnsubscribeRequestParams, unsubscribe)
    low.middleware.append(watch_sessions)

    # The watcher runs in a task group that lives exactly as long as the server's run.
    def enter(tg: Any) -> None:
        wake._task_group = tg

    def leave() -> None:
        wake._task_group = None

    run_alongside(low, enter, leave)

    if wake.channel:
        # Declared through the initialization options the stdio runner asks for.
        create_options = low.create_initialization_options

        def with_channel(notification_options=None, experimental_capabilities=None, extensions=None):
            experimental = {**(experimental_capabilities or {}), CHANNEL_CAPABILITY: {}}
            return create_options(notification_options, experimental, extensions)

        # This server's instance only: the SDK offers no other way to add an experimental capability.
        low.create_initialization_options = with_channel  # per instance, on purpose
    return wake
