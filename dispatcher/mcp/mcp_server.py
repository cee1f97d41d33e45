"""The MCP server: the table of tools each role's server offers, refusals as coded tool errors,
and ``build_server``, which registers the table (the tools themselves: ``tools.BridgeTools``).

This, ``tools``, ``wake_mcp`` (the inbox resource and the channel ping), ``mcp_stdio`` and
``jsonrpc_guard`` are the only modules that import the MCP SDK. Every tool returns a JSON object;
every refusal is a tool error whose text starts with a stable code: ``code: message``.
"""

import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import MethodType
from typing import Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from pydantic import ValidationError

from dispatcher.core.config import BridgeConfig
from dispatcher.core.settings import BridgeSettings
from dispatcher.mcp.sdk_private import lowlevel_server, registered_tool
from dispatcher.mcp.session_renewal import install as install_renewal
from dispatcher.mcp.tools import BridgeTools
from dispatcher.store import StoreHandle

INSTRUCTIONS = (
    "Agent Bridge: a local inbox shared with other coding agents. Your identity is fixed by "
    "the server. Check receive_messages when you start and between steps; claim a task "
    "before working on it; answer with send_message(kind='result', reply_to=id), or a "
    "result starting 'blocked:' plus release_message if you cannot finish; then mark_read."
)


_SDK_PREFIX = re.compile(r"^Error executing tool [\w-]+: ?")
_OUR_CODE = re.compile(r"^[a-z][a-z_]+: ")


def _error_code_for(text: str) -> str:
    return "unknown_tool" if text.startswith("Unknown tool") else "internal_error"


async def _coded_tool_errors(ctx: Any, call_next: Callable[[Any], Any]) -> Any:
    """Make every tool error start with a stable code, including the SDK's own refusals.

    Our refusals already read ``code: message``; the SDK prefixes them with
    "Error executing tool X:", and its own refusals (an unknown tool, a crash) carry no code.
    """
    result = await call_next(ctx)
    if ctx.method == "tools/call" and isinstance(result, dict) and result.get("isError"):
        for block in result.get("content") or []:
            if block.get("type") == "text":
                text = _SDK_PREFIX.sub("", block["text"], count=1)
                if not _OUR_CODE.match(text):
                    text = f"{_error_code_for(text)}: {text or 'the tool failed unexpectedly; see the server log.'}"
                block["text"] = text
    return result


MAX_ARGUMENT_PROBLEMS = 5


def _argument_problems(exc: ValidationError) -> str:
    """``field: problem; ...`` on one line, without the rejected values or pydantic's links."""
    problems = []
    for err in exc.errors(include_url=False, include_input=False, include_context=False):
        field = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in err["loc"]).lstrip(".")
        problems.append(f"{field or 'arguments'}: {' '.join(err['msg'].split())}")
    more = len(problems) - MAX_ARGUMENT_PROBLEMS
    return "; ".join(problems[:MAX_ARGUMENT_PROBLEMS]) + (f"; and {more} more" if more > 0 else "")


def unknown_arguments(arguments: dict[str, Any], parameters: dict[str, Any]) -> list[str]:
    """The argument names a tool's input schema does not declare, sorted (a typo such as
    ``knd`` would otherwise be dropped silently and the call would do something else)."""
    return sorted(set(arguments) - set(parameters.get("properties") or {}))


class _BridgeMCPServer(MCPServer):
    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        """Arguments the input schema refuses become one clean ``invalid_arguments`` line; so does
        an argument name the tool does not have."""
        tool = registered_tool(self, name)
        if tool is not None and (unknown := unknown_arguments(arguments or {}, tool.parameters)):
            known = ", ".join(tool.parameters.get("properties") or {}) or "none"
            raise ToolError(
                f"invalid_arguments: unknown argument {', '.join(unknown)}; {name} takes {known}. "
                "Nothing was changed; fix the argument name and call again."
            )
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc, UnexpectedToolError) or not isinstance(exc.__cause__, ValidationError):
                raise
            raise ToolError(
                f"invalid_arguments: {_argument_problems(exc.__cause__)}. Nothing was changed; ids and "
                "counts are JSON integers (not strings, booleans or decimals): see the tool's input schema."
            ) from exc.__cause__

    def add_strict_tool(self, fn: Callable[..., Any]) -> None:
        """Register a tool whose published input schema, like ``call_tool``, admits no other names."""
        self.add_tool(fn)
        registered_tool(self, fn.__name__).parameters["additionalProperties"] = False


Role = Literal["session", "worker"]
EVERY_ROLE: frozenset[Role] = frozenset({"session", "worker"})
SESSION_ONLY: frozenset[Role] = frozenset({"session"})


@dataclass(frozen=True)
class ToolSpec:
    """One tool: a ``BridgeTools`` method (its signature is the input schema, its docstring the
    description, its body one domain call) and the roles whose server offers it."""

    method: Callable[..., Awaitable[dict[str, Any]]]
    roles: frozenset[Role]


# Every tool, in tools/list order. A worker's server (AGENT_BRIDGE_ROLE=worker) has neither `who`
# nor `listener`: a headless worker must not be able to switch its own listener off. Which of a
# worker's tools its model is offered is core.permissions.WORKER_BRIDGE_TOOLS (tests/mcp checks
# that the two agree).
TOOLS = (
    ToolSpec(BridgeTools.send_message, EVERY_ROLE),
    ToolSpec(BridgeTools.receive_messages, EVERY_ROLE),
    ToolSpec(BridgeTools.claim_message, EVERY_ROLE),
    ToolSpec(BridgeTools.release_message, EVERY_ROLE),
    ToolSpec(BridgeTools.mark_read, EVERY_ROLE),
    ToolSpec(BridgeTools.get_message, EVERY_ROLE),
    ToolSpec(BridgeTools.start_conversation, EVERY_ROLE),
    ToolSpec(BridgeTools.conversation, EVERY_ROLE),
    ToolSpec(BridgeTools.who, SESSION_ONLY),
    ToolSpec(BridgeTools.listener, SESSION_ONLY),
)


def build_server(
    agent: str, store: StoreHandle, config: BridgeConfig, settings: BridgeSettings, presence: Any = None
) -> MCPServer:
    mcp = _BridgeMCPServer(
        name="agent_bridge", instructions=INSTRUCTIONS, version="0.1.0", middleware=[_coded_tool_errors]
    )
    logging.getLogger("mcp").setLevel(logging.WARNING)
    if presence is not None:  # this process's session row (dispatcher.bridge.presence): client name, last call
        mcp.middleware.append(presence.middleware)
        if store.spans_hosts:  # other hosts judge it by its renewals
            install_renewal(lowlevel_server(mcp), presence)

    tools = BridgeTools(agent, store, config, settings)
    for spec in TOOLS:
        if settings.role in spec.roles:
            mcp.add_strict_tool(MethodType(spec.method, tools))
    if tools.ask:  # a worker whose profile sets ask: Claude's --permission-prompt-tool (docs/approvals.md)
        mcp.add_tool(MethodType(BridgeTools.approval_prompt, tools), structured_output=False)

    from dispatcher.mcp.wake_mcp import channel_setting, counting
    from dispatcher.mcp.wake_mcp import install as install_wake

    install_wake(
        mcp,
        agent,
        settings.db,
        channel=channel_setting(settings),
        role=settings.role,
        on_armed=None if presence is None else presence.wake_path,
        on_told=counting(agent, store.connection),
    )
    return mcp
