"""The scripted model: what a worker's model does in one headless turn, whatever the API.

It is a script, not a mock of the bridge: it reads the tools the CLI offers, calls the
bridge's tools by name through the real CLI, and reacts to the task text. Each API adapter
(anthropic.py, openai_responses.py, gemini.py) turns a request into a ``Turn`` and the
``Step`` back into that API's response; the script is stateless, the CLI's own
conversation history (how many tool results came back) tells it where it is.

Modes, chosen by a line ``MODE=<mode>`` in the task text (default ``succeed``):
- ``succeed``: receive_messages -> claim_message -> send_message(result) -> mark_read;
- ``block``: claim_message -> send_message("blocked: ...") -> release_message;
- ``silent``: says it is done without calling any tool;
- ``workspace``: claim_message, then each ``DO={...}`` line of the task in order through the
  CLI's own workspace tools (``tests/models/workspace.py`` maps each action to the tool the CLI
  named by ``TOOLKIT=<cli>`` offers), then one result: ``done: ...`` with mark_read when every
  action went through, else ``blocked: denied <Tool>: ...`` (the first tool that was denied or
  not offered at all) with release_message.
- ``spend``: a runaway: ``receive_messages`` again and again (``SPEND_CALLS`` times), never
  answering, then says it is done. With a line ``USAGE=<n>`` in the task, every model response
  reports ``n`` more input tokens (``extra_usage``): a worker past its token cap.
A task for a review turn is not scripted (the CLI tests send standalone tasks).
"""

import json
import re
from dataclasses import dataclass, field, replace

BRIDGE_TOOLS = (
    "send_message",
    "receive_messages",
    "claim_message",
    "release_message",
    "mark_read",
    "get_message",
    "conversation",
    "start_conversation",
    "listener",
)
# What a headless worker is offered (the tests' own statement of it, not read from the code):
# not `listener` (a task must not switch dispatching off), not `start_conversation`.
WORKER_TOOLS = tuple(t for t in BRIDGE_TOOLS if t not in ("start_conversation", "listener"))
_MESSAGE = re.compile(r"Message #(\d+) from ([a-z0-9][a-z0-9_-]*) is a task")
_MODE = re.compile(r"^MODE=(\w+)\s*$", re.MULTILINE)
RESULT_PREFIX = "done: "
_USAGE = re.compile(r"^USAGE=(\d+)\s*$", re.MULTILINE)
SPEND_CALLS = 30


def extra_usage(prompt: str) -> int:
    """The input tokens a ``USAGE=<n>`` line of the task adds to every response's usage (0 without)."""
    found = _USAGE.search(prompt)
    return int(found.group(1)) if found else 0


@dataclass(frozen=True)
class Turn:
    """What the script needs from one model request."""

    prompt: str  # all user-visible text of the request (system prompt excluded), joined
    tools: tuple[str, ...]  # tool names as the CLI offered them
    tool_results: tuple[str, ...] = ()  # the text of each tool result so far, oldest first


@dataclass(frozen=True)
class ToolCall:
    name: str  # as the CLI offered it
    arguments: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Final:
    text: str


Step = ToolCall | Final


def bridge_name(offered: str) -> str | None:
    """The bridge tool behind a CLI's name for it (mcp__agent_bridge__x, mcp_agent_bridge_x, x)."""
    for tool in BRIDGE_TOOLS:
        if offered == tool or offered.endswith(f"__{tool}") or offered.endswith(f"agent_bridge_{tool}"):
            return tool
    return None


def _offered(turn: Turn, tool: str) -> str | None:
    return next((name for name in turn.tools if bridge_name(name) == tool), None)


def _task(prompt: str) -> tuple[int, str, str]:
    found = _MESSAGE.search(prompt)
    if found is None:
        raise ValueError("the prompt names no bridge task (no 'Message #N from X is a task')")
    mode = _MODE.search(prompt)
    return int(found.group(1)), found.group(2), mode.group(1) if mode else "succeed"


def _plan(message_id: int, sender: str, mode: str) -> list[tuple[str, dict]]:
    if mode == "silent":
        return []
    if mode == "spend":
        return [("receive_messages", {"limit": 1})] * SPEND_CALLS
    if mode == "block":
        return [
            ("claim_message", {"message_id": message_id}),
            (
                "send_message",
                {
                    "recipient": sender,
                    "kind": "result",
                    "reply_to": message_id,
                    "text": "blocked: the scripted model was told to stop here",
                },
            ),
            ("release_message", {"message_id": message_id}),
        ]
    return [
        ("receive_messages", {"limit": 5}),
        ("claim_message", {"message_id": message_id}),
        (
            "send_message",
            {
                "recipient": sender,
                "kind": "result",
                "reply_to": message_id,
                "text": f"{RESULT_PREFIX}handled message {message_id}",
            },
        ),
        ("mark_read", {"message_ids": [message_id]}),
    ]


def _workspace_plan(turn: Turn, message_id: int, sender: str) -> list[tuple[str, dict]]:
    """claim, the mapped actions, then a result judged from their tool results, then ack or release."""
    from .workspace import denied, plan_actions

    calls, missing = plan_actions(turn)
    plan = [("claim_message", {"message_id": message_id}), *calls]
    results = turn.tool_results[1 : 1 + len(calls)]
    if len(results) < len(calls):  # not there yet: the rest of the plan is not needed to go on
        return [*plan, ("send_message", {})]
    refused = [name for (name, _), result in zip(calls, results, strict=True) if denied(result)]
    blocked = [*missing, *refused]
    if blocked:
        text = f"blocked: denied {blocked[0]}: the workspace action needed it"
        ending = ("release_message", {"message_id": message_id})
    else:
        text = f"{RESULT_PREFIX}workspace actions done for message {message_id}"
        ending = ("mark_read", {"message_ids": [message_id]})
    reply = {"recipient": sender, "kind": "result", "reply_to": message_id, "text": text}
    return [*plan, ("send_message", reply), ending]


def next_step(turn: Turn, tool_search: str | None = None) -> Step:
    """The next step of the worker's turn.

    ``tool_search``: the name of a tool-search tool the CLI offers (Claude Code's
    ``ToolSearch``) when it defers MCP tools behind it; the script first asks it to load the
    bridge's tools, and that call counts as one tool result.
    """
    message_id, sender, mode = _task(turn.prompt)
    deferred = bool(tool_search) and _offered(turn, "claim_message") is None
    if mode == "workspace":  # its plan reads the results of its own calls: the search's is not one
        own = replace(turn, tool_results=turn.tool_results[1:]) if deferred else turn
        plan = _workspace_plan(own, message_id, sender)
    else:
        plan = _plan(message_id, sender, mode)
    done = len(turn.tool_results)
    if plan and tool_search and _offered(turn, plan[0][0]) is None:
        if done == 0:
            names = ",".join(f"mcp__agent_bridge__{tool}" for tool, _ in plan)
            return ToolCall(tool_search, {"query": f"select:{names}", "max_results": len(plan)})
        done -= 1  # the search's own result
    if done >= len(plan):
        return Final(f"{mode}: finished message {message_id}")
    tool, arguments = plan[done]
    if tool not in BRIDGE_TOOLS:  # a workspace tool, already named as the CLI offers it
        return ToolCall(tool, arguments)
    name = _offered(turn, tool) or f"mcp__agent_bridge__{tool}"  # deferred tools keep their full name
    return ToolCall(name, arguments)


def arguments_json(call: ToolCall) -> str:
    return json.dumps(call.arguments)
