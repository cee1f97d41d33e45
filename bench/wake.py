"""Send -> wake visible, for the wake paths this checkout serves itself:

- the Monitor line: a real ``agent-bridge inbox watch`` process; the time from just before a
  message's commit to the moment its line is read from the watch's stdout;
- the Claude channel ping and the ``bridge://inbox`` resource-updated notification: a real
  ``server.py`` (``AGENT_BRIDGE_CLAUDE_CHANNEL=1``) driven by the real mcp Client over stdio
  (2025 handshake, as Claude Code speaks it), subscribed to ``bridge://inbox``; the time from
  just before the commit to the notification's arrival in the client.

Messages are sent through the domain layer (another connection's commit, as a peer's
server makes it), one at a time, 50..150 ms apart so that each gets its own wake-up.
Also reports the idle CPU of the watch and of the server's watcher (both poll
``PRAGMA data_version`` every 0.1 s). The hook rung is measured with the hooks.

``uv run python -m bench.wake [--messages N] [--idle-seconds S] [--json PATH]``
"""

import argparse
import asyncio
import json
import os
import queue
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.stats import summarize

PROJECT = Path(__file__).resolve().parent.parent
AGENTS = {"claude", "kimi", "codex"}
TIMEOUT = 30.0


def setup(root: Path) -> dict[str, str]:
    agents = {a: {"auto": False, "launcher": "launchers/claude_headless.sh"} for a in sorted(AGENTS)}
    (root / "config.json").write_text(json.dumps({"agents": agents}))
    return {**os.environ, "AGENT_BRIDGE_DB": str(root / "state" / "bridge.db"),
            "AGENT_BRIDGE_CONFIG": str(root / "config.json"), "AGENT_BRIDGE_RUNTIME_DIR": str(root / "runtime"),
            "AGENT_BRIDGE_WORKSPACE": str(root), "PYTHONDONTWRITEBYTECODE": "1"}


def cpu_seconds(pid: int) -> float:
    """utime + stime of a live process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def idle_cpu_percent(pid: int, seconds: float) -> float:
    before = cpu_seconds(pid)
    time.sleep(seconds)
    return round(100 * (cpu_seconds(pid) - before) / seconds, 2)


class Sender:
    def __init__(self, db: Path) -> None:
        sys.path.insert(0, str(PROJECT))
        from dispatcher import messages
        from dispatcher.store import Store

        self._send = messages.send_message
        self.store = Store(db)

    def send(self, recipient: str, sender: str = "codex", kind: str = "task") -> tuple[int, float]:
        sent_at = time.monotonic()
        mid = self._send(self.store.connection(), sender=sender, recipient=recipient, text="bench payload",
                         agents=AGENTS, kind=kind)["id"]
        return mid, sent_at


def monitor_line(env: dict[str, str], sender: Sender, n: int, idle_seconds: float) -> dict:
    proc = subprocess.Popen([sys.executable, "-m", "dispatcher", "inbox", "watch", "--agent", "claude"],
                            cwd=PROJECT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[tuple[float, str]] = queue.Queue()

    def read() -> None:
        for line in proc.stdout:
            lines.put((time.monotonic(), line))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        time.sleep(1.0)  # started and looking
        samples = []
        for _ in range(n):
            mid, sent_at = sender.send("claude")
            seen_at, line = lines.get(timeout=TIMEOUT)
            assert f"#{mid} " in line, line
            samples.append(seen_at - sent_at)
            time.sleep(random.uniform(0.05, 0.15))
        idle = idle_cpu_percent(proc.pid, idle_seconds)  # after start-up, with a store to watch
    finally:
        proc.terminate()
        proc.wait(TIMEOUT)
        reader.join(TIMEOUT)
        proc.communicate(timeout=TIMEOUT)
    return {"send_to_line": summarize(samples), "idle_cpu_percent": idle}


async def mcp_paths(env: dict[str, str], sender: Sender, n: int, idle_seconds: float) -> dict:
    import mcp_types as types
    from mcp import Client
    from mcp.client.extension import ClientExtension, NotificationBinding
    from mcp.client.stdio import StdioServerParameters, stdio_client
    from pydantic import BaseModel, ConfigDict

    channel_at: list[tuple[float, dict]] = []
    updated_at: list[float] = []

    class Params(BaseModel):
        model_config = ConfigDict(extra="allow")

    class Observer(ClientExtension):
        identifier = "bench.agent-bridge/channel-observer"

        def notifications(self):
            async def on_channel(params: Params) -> None:
                channel_at.append((time.monotonic(), params.model_dump()))

            return [NotificationBinding(method="notifications/claude/channel", params_type=Params, handler=on_channel)]

    async def on_message(message) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            updated_at.append(time.monotonic())

    params = StdioServerParameters(command=sys.executable, args=[str(PROJECT / "server.py")],
                                   env={**env, "AGENT_ID": "kimi", "AGENT_BRIDGE_CLAUDE_CHANNEL": "1"},
                                   cwd=str(PROJECT))
    errlog = open(os.devnull, "w")
    channel, updated, idle = [], [], None
    try:
        async with Client(stdio_client(params, errlog=errlog), mode="legacy", message_handler=on_message,
                          extensions=[Observer()], read_timeout_seconds=TIMEOUT) as client:
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                await client.subscribe_resource("bridge://inbox")
            await asyncio.sleep(1.0)
            for _ in range(n):
                c0, u0 = len(channel_at), len(updated_at)
                mid, sent_at = sender.send("kimi")
                deadline = time.monotonic() + TIMEOUT
                while (len(channel_at) == c0 or len(updated_at) == u0) and time.monotonic() < deadline:
                    await asyncio.sleep(0.001)
                assert channel_at[c0][1]["meta"]["ids"] == str(mid), channel_at[c0]
                channel.append(channel_at[c0][0] - sent_at)
                updated.append(updated_at[u0] - sent_at)
                await asyncio.sleep(random.uniform(0.05, 0.15))
            server_pid = _server_pid()
            if server_pid:
                before = cpu_seconds(server_pid)
                await asyncio.sleep(idle_seconds)
                idle = round(100 * (cpu_seconds(server_pid) - before) / idle_seconds, 2)
    finally:
        errlog.close()
    return {"channel": summarize(channel), "resource_updated": summarize(updated), "server_idle_cpu_percent": idle}


def _server_pid() -> int | None:
    """Our server.py child (the only one)."""
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                cmd = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if int(stat[1]) == me and b"server.py" in cmd:
                return int(entry.name)
    return None


def measure(n: int = 200, idle_seconds: float = 10.0) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-wake-") as tmp:
        env = setup(Path(tmp))
        sender = Sender(Path(env["AGENT_BRIDGE_DB"]))
        try:
            load_before = os.getloadavg()
            monitor = monitor_line(env, sender, n, idle_seconds)
            mcp = asyncio.run(mcp_paths(env, sender, n, idle_seconds))
            load_after = os.getloadavg()
        finally:
            sender.store.close()
    return {"messages": n, "monitor_line": monitor, **mcp,
            "loadavg_before": [round(x, 2) for x in load_before], "loadavg_after": [round(x, 2) for x in load_after],
            "cpus": os.cpu_count()}


def _ms(stats: dict) -> str:
    return f"p50 {stats['median'] * 1000:.1f} ms, p99 {stats['p99'] * 1000:.1f} ms (n={stats['n']})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    result = measure(args.messages, args.idle_seconds)
    print(f"send -> Monitor line (inbox watch):        {_ms(result['monitor_line']['send_to_line'])}")
    print(f"send -> notifications/claude/channel:      {_ms(result['channel'])}")
    print(f"send -> notifications/resources/updated:   {_ms(result['resource_updated'])}")
    print(f"idle CPU: inbox watch {result['monitor_line']['idle_cpu_percent']}% of a core, "
          f"server watcher (channel on, subscribed) {result['server_idle_cpu_percent']}%")
    print(f"load average before/after: {result['loadavg_before']} / {result['loadavg_after']} on {result['cpus']} CPUs")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
