"""A scripted headless worker: what a Claude or Kimi worker does, without a model.

It is what the demo dispatches (through ``launchers/scripted_headless.sh``) and what the
tests' misbehaving fake workers build on. Like a real CLI it starts ``server.py`` as its
only MCP server and follows the worker protocol from the request file: claim, answer
(a result, or for a review turn a decision), acknowledge.

Run: ``python -m dispatcher.ops.demo_worker REQUEST_FILE`` with the supervisor's environment.
"""

import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

Call = Callable[..., Awaitable[dict[str, Any]]]


@asynccontextmanager
async def bridge_tools() -> AsyncIterator[Call]:
    """The bridge as this worker's MCP server, yielding ``call(tool, **arguments)``."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters
    from mcp.types import TextContent

    server = StdioServerParameters(
        command=os.environ["AGENT_BRIDGE_PYTHON"],
        args=[str(Path(os.environ["AGENT_BRIDGE_PROJECT"]) / "server.py")],
        env={k: v for k, v in os.environ.items() if k.startswith(("AGENT_", "XDG_", "PATH", "HOME"))},
    )
    async with Client(server) as client:

        async def call(tool: str, **arguments: Any) -> dict[str, Any]:
            result = await client.call_tool(tool, arguments)
            if result.is_error:
                first = result.content[0]
                raise RuntimeError(f"{tool} refused: {first.text if isinstance(first, TextContent) else first}")
            return result.structured_content

        yield call


async def answer(call: Call, message_id: int, reply: Callable[[dict], str]) -> None:
    """The success path of the worker protocol for a task or a review turn."""
    message = await call("get_message", message_id=message_id)
    await call("claim_message", message_id=message_id)
    if message["kind"] == "result":  # review turn: this worker accepts the result
        await call("conversation", action="complete", conversation_id=message["conversation_id"])
    else:
        await call("send_message", recipient=message["sender"], kind="result", reply_to=message_id, text=reply(message))
    await call("mark_read", message_ids=[message_id])


def _demo_reply(message: dict) -> str:
    words = len(message["text"].split())
    return f"done: read your {words}-word task (message #{message['id']}) and handled it."


async def _main(message_id: int) -> None:
    async with bridge_tools() as call:
        await answer(call, message_id, _demo_reply)


if __name__ == "__main__":
    message_id = int(os.environ["AGENT_BRIDGE_MESSAGE_ID"])
    if f"#{message_id}" not in Path(sys.argv[1]).read_text():
        sys.exit("demo_worker: the request file does not name this message")
    anyio.run(_main, message_id)
