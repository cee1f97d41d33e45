"""The bridge's tools, one method each: its typed arguments (the input schema the SDK derives),
its docstring (the description the model reads) and its one call into the domain.

``mcp_server.TOOLS`` says which role's server offers which of them. Every tool returns a JSON
object; every refusal is a tool error whose text starts with a stable code: ``code: message``.
"""

import json
import os
import secrets
from collections.abc import Callable
from functools import partial
from typing import Any

import anyio
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import StrictFloat, StrictInt, StrictStr

from dispatcher.bridge import approvals, claims, conversations, messages
from dispatcher.bridge.worker_scope import WorkerScope
from dispatcher.core import clock, traces
from dispatcher.core.config import BridgeConfig
from dispatcher.core.errors import BridgeError, StoreUnavailable
from dispatcher.core.file_events import RECHECK_SECONDS
from dispatcher.core.logs import get_logger
from dispatcher.core.notices import Notice
from dispatcher.core.settings import BridgeSettings
from dispatcher.store import StoreHandle, data_version, store_errors
from dispatcher.store import approvals as approval_rows
from dispatcher.store.changes import StoreChanges

MAX_WAIT_SECONDS = 30

log = get_logger("agent_bridge.mcp")


class BridgeTools:
    """What every tool call needs: who is calling, from which process, on which store, with which
    declared agents and settings. One per server process."""

    def __init__(self, agent: str, store: StoreHandle, config: BridgeConfig, settings: BridgeSettings) -> None:
        self.agent = agent
        self.worker_id = f"{agent}-{os.getpid()}-{secrets.token_hex(4)}"
        # A worker's server is bound to its attempt and claims as that attempt (bridge.worker_scope).
        self.scope = (
            WorkerScope(agent, settings.message_id, settings.worker_token) if settings.role == "worker" else None
        )
        if self.scope is not None:
            self.worker_id = self.scope.claim_owner
        self.store = store
        self.agents = frozenset(config.agents)
        self.config = config
        self.settings = settings
        self.max_body_bytes = settings.max_body_bytes
        # A worker whose profile sets ``ask`` is offered ``approval_prompt`` (mcp_server.build_server).
        self.ask = self.scope is not None and config.permissions(agent).ask
        self.approval_timeout = config.agents[agent].approval_timeout_seconds

    def _call(self, tool: str, fn: Callable[..., Any], **kwargs: Any) -> Any:
        return self._guarded(tool, lambda: fn(self.store.connection(), **kwargs))

    def _guarded(self, tool: str, run: Callable[[], Any]) -> Any:
        """``run``'s answer; a store failure or a rule's refusal as the tool error the model reads."""
        try:
            with store_errors():
                return run()
        except StoreUnavailable as exc:
            # Locked past the busy timeout, read-only file, full disk, corrupt file, or a
            # store file that cannot be (re)opened.
            cause = exc.__cause__
            log.warning("store_error", tool=tool, error=type(cause).__name__, detail=str(cause), agent=self.agent)
            raise ToolError(str(exc)) from None
        except BridgeError as exc:
            log.info("tool_refused", tool=tool, code=exc.code, agent=self.agent)
            raise ToolError(str(exc)) from None

    def _scoped(self, tool: str, check: Callable[..., object], **kwargs: Any) -> int | None:
        """On a worker's server, refuse (``worker_scope``) what lies outside its attempt; returns the
        attempt's message id there, None on a session's server."""
        if self.scope is None:
            return None
        self._call(tool, partial(check, self.scope), **kwargs)
        return self.scope.message_id

    async def send_message(
        self,
        recipient: StrictStr,
        text: StrictStr,
        reply_to: StrictInt | None = None,
        dedup_key: StrictStr | None = None,
        response_timeout_seconds: StrictInt | None = None,
        conversation_id: StrictInt | None = None,
        kind: StrictStr | None = None,
    ) -> dict[str, Any]:
        """Send a message to another agent; you are always the sender.

        kind: omit for a plain note; 'task' asks the recipient to do work (wakes its listener);
        'result' answers a task sent to you (reply_to = that task, goes back to its sender;
        start the text with 'blocked:' if you could not finish); 'notice' informs, never wakes.
        In a conversation, conversation_id is inherited from reply_to; a task/result must
        answer the in-flight message and takes one turn. dedup_key makes retries safe: a
        repeat returns the first id with duplicate=true (the same key to another recipient is
        dedup_conflict; keys starting 'agent-bridge:' are reserved). response_timeout_seconds (1..3600)
        only records a deadline. Returns {id, duplicate, conversation_id}. recipient='*' with
        kind='notice' (no reply_to, no conversation) sends one copy to every other agent and
        returns {broadcast_id, ids, duplicate}. Errors name the rule broken (e.g.
        unknown_recipient lists valid agents).
        """
        # Only a declared agent names the span's destination: the argument itself is the caller's input.
        destination = recipient if recipient in self.agents else None
        with traces.span("send", destination, parent=os.environ.get("TRACEPARENT")) as span:
            attempt = self._scoped(
                "send_message",
                WorkerScope.check_send,
                recipient=recipient,
                kind=kind,
                reply_to=reply_to,
                conversation_id=conversation_id,
            )
            sent = self._guarded(
                "send_message",
                partial(
                    messages.send_once,
                    self.store.connection,  # a broken connection is opened again for the retry
                    sender=self.agent,
                    recipient=recipient,
                    text=text,
                    agents=self.agents,
                    max_body_bytes=self.max_body_bytes,
                    reply_to=reply_to,
                    dedup_key=dedup_key,
                    response_timeout_seconds=response_timeout_seconds,
                    conversation_id=conversation_id,
                    kind=kind,
                    attempt=attempt,
                    traceparent=traces.current_traceparent(),
                ),
            )
            traces.annotate(span, message_id=sent.get("id"), duplicate=sent.get("duplicate"))
            return sent

    async def approval_prompt(
        self, tool_name: StrictStr, input: dict[str, Any], tool_use_id: StrictStr | None = None
    ) -> str:
        """Claude Code's permission prompt (--permission-prompt-tool): ask a person whether this
        worker may run tool_name with input, and wait for the answer. Not for the model to call.
        """
        del tool_use_id  # (Claude's id of the call; the request is recorded by its own id)
        if self.scope is None or not self.ask:
            raise ToolError("worker_scope: only a worker whose profile sets ask may ask for approval.")
        scope = self.scope
        asked = self._guarded(
            "approval_prompt",
            lambda: approvals.ask(self.store.connection(), scope, tool_name, input, clock.now(), self.approval_timeout),
        )
        approval_id, outcome = asked
        if approval_id is not None:
            from dispatcher.bridge.counters import count_notice  # noqa: PLC0415 - only when a request waits
            from dispatcher.core.notice_spawn import notify_agent  # noqa: PLC0415 - only when a request waits

            log.info("approval_waiting", agent=self.agent, approval_id=approval_id, tool=tool_name)
            notice = Notice("approval_waiting", self.agent, approval_id)
            if (started := notify_agent(self.config, notice)) is not None and (
                why := count_notice(self.store.connection, notice, started)
            ):
                log.info("count_dropped", agent=self.agent, counter="notices", notice_event=notice.event, error=why)
            outcome = await approvals.decision(
                lambda: self._guarded(
                    "approval_prompt", lambda: approval_rows.get_request(self.store.connection(), approval_id)
                ),
                clock.now,
                anyio.sleep,
            )
        log.info("approval_answered", agent=self.agent, approval_id=approval_id, tool=tool_name, outcome=outcome)
        # One text block holding the JSON: what Claude Code reads (a structured result it refuses).
        return json.dumps(approvals.prompt_answer(outcome or "expired", tool_name, input))

    async def receive_messages(self, limit: StrictInt = 20, wait_seconds: StrictFloat = 0) -> dict[str, Any]:
        """Return your unacknowledged messages, oldest first (limit 1..100).

        Messages claimed by another process are hidden. wait_seconds (0..30) long-polls:
        the call returns as soon as a message arrives. Messages stay here until mark_read.
        Each has id, sender, kind, text, reply_to, conversation_id, broadcast_id, created_at,
        response_deadline, claim_expires_at, owned_by_current_worker; cursor is the last id.
        """
        with traces.span("receive", self.agent, parent=os.environ.get("TRACEPARENT")) as span:
            received = await self._receive(limit, wait_seconds)
            traces.annotate(span, batch_message_count=len(received["messages"]))
            return received

    async def _receive(self, limit: int, wait_seconds: float) -> dict[str, Any]:
        if not wait_seconds >= 0:  # also refuses NaN
            raise ToolError("invalid_number: wait_seconds must be 0 or more (it is capped at 30).")
        deadline = clock.monotonic() + min(wait_seconds, MAX_WAIT_SECONDS)
        thread_of = self._scoped("receive_messages", WorkerScope.own_message)
        look = partial(
            self._call,
            "receive_messages",
            messages.receive_messages,
            agent=self.agent,
            worker_id=self.worker_id,
            limit=limit,
            thread_of=thread_of,
        )
        if clock.monotonic() >= deadline:
            return look()  # no wait: one query, no watch
        # Watched before the version is read, read before the look: a commit after the look wakes the wait.
        events = StoreChanges(self.store.location, self.agent)
        try:
            while True:
                seen = self._call("receive_messages", data_version)
                result = look()
                if result["messages"]:
                    return result
                # Sleep until another connection commits (its -wal changes), then look again.
                while (left := deadline - clock.monotonic()) > 0 and self._call(
                    "receive_messages", data_version
                ) == seen:
                    await events.next_change(min(left, RECHECK_SECONDS))
                if left <= 0:
                    return result
        finally:
            events.close()

    async def claim_message(self, message_id: StrictInt, lease_seconds: StrictInt = 300) -> dict[str, Any]:
        """Claim a message addressed to you before working on it, so no other process does.

        Repeat to renew. lease_seconds is clamped to 30..3600; an expired lease can be taken
        by any of your processes. Refused if another process holds an active claim, the
        message is not yours, or it is already acknowledged. Returns {claim_expires_at}.
        """
        self._scoped("claim_message", WorkerScope.check_message, message_ids=[message_id])
        return self._call(
            "claim_message",
            claims.claim_message,
            agent=self.agent,
            worker_id=self.worker_id,
            message_id=message_id,
            lease_seconds=lease_seconds,
        )

    async def release_message(self, message_id: StrictInt) -> dict[str, Any]:
        """Give up your own active claim without acknowledging (e.g. after a 'blocked:' result)."""
        self._scoped("release_message", WorkerScope.check_message, message_ids=[message_id])
        return self._call(
            "release_message", claims.release_message, agent=self.agent, worker_id=self.worker_id, message_id=message_id
        )

    async def mark_read(self, message_ids: list[StrictInt]) -> dict[str, Any]:
        """Acknowledge messages addressed to you once handled (up to 500 ids).

        Returns {acknowledged: [ids], skipped: [{id, reason}]}, reason being not_found,
        not_recipient, already_acknowledged or claimed_by_other.
        """
        self._scoped("mark_read", WorkerScope.check_message, message_ids=message_ids)
        return self._call(
            "mark_read", messages.mark_read, agent=self.agent, worker_id=self.worker_id, message_ids=message_ids
        )

    async def get_message(self, message_id: StrictInt) -> dict[str, Any]:
        """Look up one message you sent or received, with its lifecycle.

        Answers "was my task picked up?": delivered_at, acknowledged_at, active claim owner
        and expiry, reply_ids, and the dispatch attempt (state, outcome) if a worker ran.
        """
        self._scoped("get_message", WorkerScope.check_read, message_id=message_id)
        return self._call(
            "get_message", messages.get_message, agent=self.agent, worker_id=self.worker_id, message_id=message_id
        )

    async def start_conversation(
        self,
        recipient: StrictStr,
        goal: StrictStr,
        max_turns: StrictInt = 6,
        expires_in_seconds: StrictInt = 14400,
        dedup_key: StrictStr | None = None,
        max_cost_usd: StrictFloat | None = None,
    ) -> dict[str, Any]:
        """Start a bounded conversation: posts the goal as its root task (turn 1).

        The two agents then alternate task -> result -> follow-up task ... until one calls
        conversation(complete | needs_human | cancel), the turn budget (2..20) runs out
        (-> needs_human) or it expires (60..86400 s). After each result the initiator either
        completes, sends one follow-up task, or escalates. max_cost_usd (optional, > 0): once the
        recorded cost of its dispatched attempts reaches it, the conversation becomes needs_human
        and nothing more is dispatched. Returns {conversation_id, message_id}.
        """
        self._scoped("start_conversation", WorkerScope.refuse_new_conversation)
        return self._call(
            "start_conversation",
            conversations.start_conversation,
            initiator=self.agent,
            recipient=recipient,
            goal=goal,
            agents=self.agents,
            max_body_bytes=self.max_body_bytes,
            max_turns=max_turns,
            expires_in_seconds=expires_in_seconds,
            dedup_key=dedup_key,
            max_cost_usd=max_cost_usd,
        )

    async def conversation(self, action: StrictStr, conversation_id: StrictInt) -> dict[str, Any]:
        """Inspect or end one of your conversations.

        action: status (state, turns, expiry, recent transitions, in-flight message id and
        kind; never text), complete (goal achieved; from active), needs_human (a person must
        decide; from active), cancel (from active, blocked or needs_human). Repeating the
        current state is a no-op; a different final state is refused.
        """
        attempt = self._scoped("conversation", WorkerScope.check_conversation, conversation_id=conversation_id)
        return self._call(
            "conversation",
            conversations.conversation_action,
            agent=self.agent,
            action=action,
            conversation_id=conversation_id,
            attempt=attempt,
        )

    async def who(self, agent: StrictStr | None = None) -> dict[str, Any]:
        """Who is there: per declared agent (or just `agent`), its live interactive sessions
        (client, since, idle for, wake paths), whether its listener runs, unread count and
        oldest unread age. Liveness is from the process (pid + start time), never heartbeats."""
        from dispatcher.dispatch.who import who_tool

        return self._call("who", who_tool, agents=sorted(self.agents), settings=self.settings, only=agent)

    async def listener(self, action: StrictStr) -> dict[str, Any]:
        """Your own background listener (this agent only), which runs headless workers for tasks.

        action: status (enabled, running, pid, stage, last outcome), progress ({line}: the
        one-line status), enable (start it; idempotent), disable (finish the current worker,
        take nothing new, exit). Never kills a process; failures come back as {error}.
        """
        from dispatcher.dispatch import control

        actions = {
            "status": control.listener_status,
            "progress": lambda s, a: {"line": control.progress_line(s, a)},
            "enable": control.enable,
            "disable": control.disable,
        }
        if action not in actions:
            return {"error": f"invalid_action: action must be one of {', '.join(actions)}."}
        try:
            return await anyio.to_thread.run_sync(actions[action], self.settings, self.agent)
        except BridgeError as exc:  # e.g. unsafe_path: its text says what to do
            log.warning("listener_tool_failed", action=action, code=exc.code)
            return {"error": str(exc)}
        except Exception as exc:  # noqa: BLE001 - this tool reports, it never raises
            log.warning("listener_tool_failed", action=action, error=type(exc).__name__)
            return {
                "error": f"listener_unavailable: {type(exc).__name__}; try `agent-bridge listener status --agent {self.agent}`."
            }
