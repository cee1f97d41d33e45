"""A stand-in for a headless Claude/Kimi worker, driving the real bridge over MCP stdio.

Usage (from a launcher): fake_worker.py REQUEST_FILE, with FAKE_WORKER_MODE one of
succeed, slow (succeeds after FAKE_WORKER_DELAY seconds), block, crash, hang, noop,
ignore_term; the supervisor's environment tells it which message and store. Like a
real CLI it starts server.py as its MCP server. With FAKE_WORKER_LAUNCHES set, it
appends its message id to that file first, so tests can count launches.
"""

import os
import signal
import sys
import time
from pathlib import Path

MODE = os.environ.get("FAKE_WORKER_MODE", "succeed")
MESSAGE_ID = int(os.environ["AGENT_BRIDGE_MESSAGE_ID"])


def main() -> int:
    if launches := os.environ.get("FAKE_WORKER_LAUNCHES"):
        with open(launches, "a") as fh:
            fh.write(f"{MESSAGE_ID}\n")
    request = Path(sys.argv[1])
    assert f"#{MESSAGE_ID}" in request.read_text(), "request file does not name the message"
    if MODE == "noop":
        return 0
    if MODE == "slow":
        time.sleep(float(os.environ.get("FAKE_WORKER_DELAY", "3")))
    if MODE == "hang":
        time.sleep(3600)
    if MODE == "ignore_term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(3600)
    import anyio

    anyio.run(work)
    return 3 if MODE == "crash" else 0


async def work() -> None:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    server = StdioServerParameters(
        command=os.environ["AGENT_BRIDGE_PYTHON"],
        args=[str(Path(os.environ["AGENT_BRIDGE_PROJECT"]) / "server.py")],
        env={k: v for k, v in os.environ.items() if k.startswith(("AGENT_", "XDG_", "PATH", "HOME"))},
    )
    async with Client(server) as bridge:
        async def call(tool, **args):
            result = await bridge.call_tool(tool, args)
            if result.is_error:
                raise RuntimeError(f"{tool}: {result.content[0].text}")
            return result.structured_content

        message = await call("get_message", message_id=MESSAGE_ID)
        await call("claim_message", message_id=MESSAGE_ID)
        if MODE == "crash":
            os._exit(3)  # dies holding the claim, without a word
        if message["kind"] == "result":  # a review turn: decide, then acknowledge
            await call("conversation", action="complete", conversation_id=message["conversation_id"])
            await call("mark_read", message_ids=[MESSAGE_ID])
            return
        reply = {"recipient": message["sender"], "kind": "result", "reply_to": MESSAGE_ID}
        if MODE == "block":
            await call("send_message", text="blocked: the fake worker may not do this", **reply)
            await call("release_message", message_id=MESSAGE_ID)
            return
        await call("send_message", text=f"done: handled message {MESSAGE_ID}", **reply)
        await call("mark_read", message_ids=[MESSAGE_ID])


if __name__ == "__main__":
    sys.exit(main())
