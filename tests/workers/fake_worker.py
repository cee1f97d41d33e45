"""A stand-in for a headless Claude/Kimi worker, driving the real bridge over MCP stdio.

Usage (from a launcher): fake_worker.py REQUEST_FILE, with FAKE_WORKER_MODE one of
succeed, slow (succeeds after FAKE_WORKER_DELAY seconds), block, crash, hang, noop,
ignore_term; the supervisor's environment tells it which message and store. The
well-behaved path is the package's scripted worker; the rest misbehave on purpose.
With FAKE_WORKER_LAUNCHES set, it appends its message id to that file first; with
FAKE_WORKER_DIAGNOSTICS set, it writes that JSON to the diagnostics file, as a launcher would.
"""

import os
import signal
import sys
import time
from pathlib import Path

import anyio

from dispatcher.demo_worker import answer, bridge_tools

MODE = os.environ.get("FAKE_WORKER_MODE", "succeed")
MESSAGE_ID = int(os.environ["AGENT_BRIDGE_MESSAGE_ID"])


async def misbehave() -> None:
    async with bridge_tools() as call:
        message = await call("get_message", message_id=MESSAGE_ID)
        await call("claim_message", message_id=MESSAGE_ID)
        if MODE == "crash":
            os._exit(3)  # dies holding the claim, without a word
        await call("send_message", recipient=message["sender"], kind="result", reply_to=MESSAGE_ID,
                   text="blocked: the fake worker may not do this")
        await call("release_message", message_id=MESSAGE_ID)


async def behave() -> None:
    async with bridge_tools() as call:
        await answer(call, MESSAGE_ID, lambda m: f"done: handled message {m['id']}")


def main() -> int:
    if launches := os.environ.get("FAKE_WORKER_LAUNCHES"):
        with open(launches, "a") as fh:
            fh.write(f"{MESSAGE_ID}\n")
    assert f"#{MESSAGE_ID}" in Path(sys.argv[1]).read_text(), "request file does not name the message"
    if diagnostics := os.environ.get("FAKE_WORKER_DIAGNOSTICS"):  # what a CLI's result JSON yields
        Path(os.environ["AGENT_BRIDGE_DIAGNOSTICS_FILE"]).write_text(diagnostics)
    if MODE == "noop":
        return 0
    if MODE == "ignore_term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if MODE in ("hang", "ignore_term"):
        time.sleep(3600)
    if MODE == "slow":
        time.sleep(float(os.environ.get("FAKE_WORKER_DELAY", "3")))
    anyio.run(misbehave if MODE in ("crash", "block") else behave)
    return 0


if __name__ == "__main__":
    sys.exit(main())
