"""``agent-bridge demo``: two agents on a temporary store, a listener, a scripted worker.

Everything is real except the model: real server.py processes over MCP stdio, a real
listener with its flock and supervisor, a real worker process (the scripted
``dispatcher.ops.demo_worker``, launched through ``launchers/scripted_headless.sh``).
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import anyio
import click

from dispatcher.core.errors import BridgeError
from dispatcher.core.settings import PROJECT_DIR, BridgeSettings

_PRINT = threading.Lock()


def _say(actor: str, text: str) -> None:
    with _PRINT:  # the status watcher prints from its own thread
        click.echo(f"{actor:>8} | {text}")  # (click.echo flushes)


class _StatusWatcher(threading.Thread):
    """Prints the claude status line whenever it changes, as Claude Code would show it."""

    def __init__(self, settings: BridgeSettings) -> None:
        super().__init__(daemon=True)
        self.settings, self.stop = settings, threading.Event()

    def run(self) -> None:
        from dispatcher.dispatch.control import progress_line

        last, stopping = None, False
        while not stopping:
            stopping = self.stop.wait(0.05)  # once more after the stop: the final line is shown
            line = progress_line(self.settings, "claude")
            if _without_times(line) != last:  # a new stage or message, not a running clock
                _say("status", line)
                last = _without_times(line)


def _without_times(line: str) -> str:
    """The line without its durations (``12s``, ``1.8s``), which change every second."""
    return re.sub(r"\b\d+(?:\.\d+)?s\b", "", line)


def _environment(root: Path) -> dict[str, str]:
    config = {
        "agents": {
            "claude": {"auto": True, "launcher": "launchers/scripted_headless.sh", "worker_timeout_seconds": 120},
            "kimi": {"auto": False, "cli": "kimi"},
        },
        "dispatch_max_age_seconds": 86400,
    }
    (root / "config.json").write_text(json.dumps(config, indent=2))
    (root / "workspace").mkdir()  # beside the store, config and runtime: a workspace may hold none of them
    return {
        "AGENT_BRIDGE_DB": str(root / "bridge.db"),
        "AGENT_BRIDGE_CONFIG": str(root / "config.json"),
        "AGENT_BRIDGE_RUNTIME_DIR": str(root / "runtime"),
        "AGENT_BRIDGE_WORKSPACE": str(root / "workspace"),
        "PYTHONPATH": str(PROJECT_DIR),
    }


async def _script(env: dict[str, str]) -> str:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    def server(agent: str) -> Client:
        params = StdioServerParameters(
            command=sys.executable,
            args=[str(PROJECT_DIR / "server.py")],
            env={**env, "AGENT_ID": agent},
            cwd=str(PROJECT_DIR),
        )
        return Client(params)

    async with server("kimi") as kimi, server("claude") as claude:

        async def call(client, who, tool, **args):
            # Printed before the call: the status watcher may report the message it sends at once.
            shown = ", ".join(f"{k}={v!r}" for k, v in args.items())
            _say(who, f"{tool}({shown})")
            result = await client.call_tool(tool, args)
            if result.is_error:
                raise RuntimeError(f"{tool}: {result.content[0].text}")
            return result.structured_content

        async def settled(client, message_id):
            """get_message until the dispatch attempt on it has an outcome (the worker may still be exiting)."""
            for _ in range(600):
                seen = (await client.call_tool("get_message", {"message_id": message_id})).structured_content
                if (seen.get("dispatch") or {}).get("outcome"):
                    return seen
                await anyio.sleep(0.1)
            raise RuntimeError(f"the dispatch of message #{message_id} did not settle within 60 s")

        _say("demo", "1. kimi hands claude a task; claude has no interactive session, its listener wakes a worker")
        task = await call(
            kimi,
            "kimi",
            "send_message",
            recipient="claude",
            kind="task",
            dedup_key="demo-task-1",
            text="Count the words in this request and report back.",
        )
        inbox = await call(kimi, "kimi", "receive_messages", wait_seconds=30)
        reply = inbox["messages"][0]
        _say("kimi", f"  <- result #{reply['id']} (reply_to #{reply['reply_to']}): {reply['text']}")
        await call(kimi, "kimi", "mark_read", message_ids=[reply["id"]])
        seen = await settled(kimi, task["id"])
        _say(
            "kimi",
            f"  task #{task['id']}: acknowledged_at={seen['acknowledged_at']} dispatch={seen['dispatch']['outcome']}",
        )

        _say("demo", "2. a bounded conversation: kimi sets a goal, claude's workers take the turns")
        conv = await call(
            kimi,
            "kimi",
            "start_conversation",
            recipient="claude",
            max_turns=4,
            goal="Propose a name for the bridge's status command.",
        )
        cid = conv["conversation_id"]
        first = (await call(kimi, "kimi", "receive_messages", wait_seconds=30))["messages"][0]
        _say("kimi", f"  <- result #{first['id']}: {first['text']}")
        follow = await call(
            kimi,
            "kimi",
            "send_message",
            recipient="claude",
            kind="task",
            reply_to=first["id"],
            text="Good. Now make it shorter.",
        )
        await call(kimi, "kimi", "mark_read", message_ids=[first["id"]])
        second = (await call(kimi, "kimi", "receive_messages", wait_seconds=30))["messages"][0]
        _say("kimi", f"  <- result #{second['id']} (reply_to #{follow['id']}): {second['text']}")
        await call(kimi, "kimi", "mark_read", message_ids=[second["id"]])
        done = await call(kimi, "kimi", "conversation", action="complete", conversation_id=cid)
        _say("kimi", f"  conversation #{cid}: {done['state']} after {done['turn_count']}/{done['max_turns']} turns")
        await settled(kimi, follow["id"])
        listener = await call(claude, "claude", "listener", action="progress")
        _say("claude", f"  {listener['line']}")
        return f"done: 3 tasks dispatched to claude's workers, each answered; conversation #{cid} {done['state']}"


def run_demo(keep: bool = False) -> None:
    """Raises ``BridgeError("demo_failed")`` (after cleaning up) when a step fails."""
    root = Path(tempfile.mkdtemp(prefix="agent-bridge-demo-"))
    settings = _environment(root)
    env = {**os.environ, **settings}
    os.environ.update(settings)  # the status watcher reads the same settings
    _say("demo", f"temporary store and runtime in {root}")
    listener = subprocess.Popen(
        [sys.executable, "-m", "dispatcher", "listener", "run", "--agent", "claude"],
        cwd=PROJECT_DIR,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    watcher = _StatusWatcher(BridgeSettings())
    watcher.start()
    try:
        summary = anyio.run(_script, env)
        watcher.stop.set()
        watcher.join()  # its last status line comes before the summary
        _say("demo", summary)
        _say("demo", "next: your own machine in five minutes, `agent-bridge init --scripted` (README: Quick start)")
    except Exception as exc:
        hint = f"its files are in {root}" if keep else "run it again with --keep to inspect its files"
        raise BridgeError("demo_failed", f"{type(exc).__name__}: {exc}; {hint}.") from exc
    finally:
        watcher.stop.set()
        listener.terminate()
        listener.wait(30)
        if keep:
            _say("demo", f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
