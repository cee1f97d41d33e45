"""Send -> wake visible: the Monitor line side by side with the peer's, and our MCP paths.

- the Monitor line: a real ``agent-bridge inbox watch --agent claude`` process and, in the
  same run, the peer dlb-mcp's own Monitor command, ``dlb-monitor --name claude``, at its
  default 2 s poll and at ``--interval 0.1`` (our poll interval); the time from just before a
  message's commit to the moment the line naming it is read from the watch's stdout. Each
  system commits through the function its own MCP send tool calls, outside MCP, in a
  process of its own (``bench/wake_agent.py`` under that system's interpreter): ours
  ``dispatcher.bridge.messages.send_message``, dlb ``dlb_mcp.store.send`` (its ``send`` tool is a
  thin wrapper around it). The rungs take turns message by message; each watch's
  idle CPU is measured over one common window; each line's shape is reported with the
  message text replaced, and whether the text was on it. Before the timed messages, one
  message is committed while no watch runs: does a fresh (re-armed) watch name it?
- the Claude channel ping and the ``bridge://inbox`` resource-updated notification: a real
  ``server.py`` (``AGENT_BRIDGE_CLAUDE_CHANNEL=1``) driven by the real mcp Client over stdio
  (2025 handshake, as Claude Code speaks it), subscribed to ``bridge://inbox``; the time from
  just before the commit to the notification's arrival in the client.

Messages are sent one at a time, each after the previous one's wake-up (50 ms plus a random
part of the watch's poll interval later: 50..150 ms for ours), so that each gets its own. The hook rung is measured with the hooks (``bench.hooks``).

``uv run python -m bench.wake [--messages N] [--idle-seconds S] [--systems ours,dlb] [--no-mcp] [--json PATH]``
"""

import argparse
import asyncio
import json
import os
import queue
import random
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.stats import summarize
from bench.wake_lines import dlb_nonce, line_shape, ours_line

PROJECT = Path(__file__).resolve().parent.parent
AGENTS = {"claude", "kimi", "codex"}
TIMEOUT = 30.0
DLB_DEFAULT_POLL = 2.0  # dlb_mcp.monitor.DEFAULT_INTERVAL_SECONDS in 0.6.5
TEXT = "bench payload"  # every message's body (dlb's: TEXT and a nonce); never printed


def setup(root: Path) -> dict[str, str]:
    agents = {a: {"auto": False, "launcher": "launchers/claude_headless.sh"} for a in sorted(AGENTS)}
    (root / "config.json").write_text(json.dumps({"agents": agents}))
    return {
        **os.environ,
        "AGENT_BRIDGE_DB": str(root / "state" / "bridge.db"),
        "AGENT_BRIDGE_CONFIG": str(root / "config.json"),
        "AGENT_BRIDGE_RUNTIME_DIR": str(root / "runtime"),
        "AGENT_BRIDGE_WORKSPACE": str(root),
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def cpu_seconds(pid: int) -> float:
    """utime + stime of a live process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def idle_cpu_percent(pids: list[int], seconds: float) -> list[float]:
    """Each process's CPU over one common window of ``seconds``, in % of a core."""
    before = [cpu_seconds(pid) for pid in pids]
    time.sleep(seconds)
    return [round(100 * (cpu_seconds(pid) - b) / seconds, 2) for pid, b in zip(pids, before, strict=True)]


class Agent:
    """``bench/wake_agent.py`` for one system, under its own interpreter, on one store: that
    system's send and read paths in a process of their own (see there)."""

    def __init__(self, system: str, python: str, env: dict[str, str]) -> None:
        self.env = env
        self.proc = subprocess.Popen(
            [python, str(PROJECT / "bench" / "wake_agent.py"), system],
            cwd=PROJECT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        if self.proc.stdout.readline() != "ready\n":
            self.close()
            raise RuntimeError(f"bench/wake_agent.py {system} did not start under {python}")
        self.nonce = 0

    @classmethod
    def ours(cls, env: dict[str, str]) -> "Agent":
        return cls("ours", sys.executable, env)

    @classmethod
    def dlb(cls, venv: Path, db: Path) -> "Agent":
        return cls("dlb", str(venv / "bin" / "python"), {**os.environ, "DLB_STORE": str(db)})

    def ask(self, command: str) -> list[str]:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().split()
        if not answer or answer[0] != "ok":
            raise RuntimeError(f"wake agent: {command.split()[0]}: {' '.join(answer) or 'no answer'}")
        return answer[1:]

    def send(self, recipient: str, sender: str = "codex", kind: str | None = "task") -> tuple[str, int, float]:
        """Commit one message whose body is ``TEXT <nonce>``: (nonce, id, monotonic just before)."""
        self.nonce += 1
        sent_at, mid = self.ask(f"send {sender} {recipient} {kind or '-'} {self.nonce}")
        return str(self.nonce), int(mid), float(sent_at)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.stdin = None
        self.proc.communicate(timeout=TIMEOUT)


class Watch:
    """A watch command running with its stdout read line by line; each line is queued with
    ``time.monotonic()`` of the moment it was read (several watches may share one queue)."""

    def __init__(
        self, cmd: list[str], env: dict[str, str], lines: queue.Queue[tuple[float, str]] | None = None
    ) -> None:
        self.cmd = cmd
        self.proc = subprocess.Popen(
            cmd, cwd=PROJECT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        self.lines: queue.Queue[tuple[float, str]] = queue.Queue() if lines is None else lines
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        with self.proc.stdout:  # ends at EOF, also when the watch is killed
            for line in self.proc.stdout:
                self.lines.put((time.monotonic(), line))

    def next_line(self, timeout: float = TIMEOUT) -> tuple[float, str]:
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            raise RuntimeError(f"{shlex.join(self.cmd)} printed no line within {timeout:g} s") from None

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        self.proc.wait(TIMEOUT)
        self._reader.join(TIMEOUT)


@dataclass
class MonitorRung:
    """One system's Monitor-line wake path: the watch command, how a message for the watched
    agent is committed (``send() -> (key, monotonic just before the commit)``), whether a line
    names that key, and the body text (to tell whether a line carries it)."""

    label: str
    cmd: list[str]
    env: dict[str, str]
    send: Callable[[], tuple[Any, float]]
    names: Callable[[str, Any], bool]
    text: Callable[[Any], str]
    poll: float  # the watch's poll interval, seconds: the pacing spans one of them


def ours_rung(agent: Agent) -> MonitorRung:
    def send() -> tuple[tuple[str, int], float]:
        nonce, mid, sent_at = agent.send("claude")
        return (nonce, mid), sent_at

    return MonitorRung(
        "agent-bridge inbox watch",
        [sys.executable, "-m", "dispatcher", "inbox", "watch", "--agent", "claude"],
        agent.env,
        send=send,
        names=lambda line, key: key[1] in ours_line(line)[1],
        text=lambda key: f"{TEXT} {key[0]}",
        poll=0.1,
    )


def dlb_rung(venv: Path, agent: Agent, interval: float | None = None) -> MonitorRung:
    def send() -> tuple[str, float]:
        nonce, _, sent_at = agent.send("claude")
        return nonce, sent_at

    cmd = [str(venv / "bin" / "dlb-monitor"), "--name", "claude"]
    if interval is not None:
        cmd += ["--interval", f"{interval:g}"]
    label = "dlb-monitor" + (f" --interval {interval:g}" if interval is not None else " (default 2 s poll)")
    return MonitorRung(
        label,
        cmd,
        agent.env,
        send=send,
        names=lambda line, nonce: dlb_nonce(line, TEXT) == nonce,
        text=lambda nonce: f"{TEXT} {nonce}",
        poll=DLB_DEFAULT_POLL if interval is None else interval,
    )


def monitor_lines(rungs: list[MonitorRung], n: int, idle_seconds: float, settle: float = 5.0) -> dict[str, dict]:
    """Send -> Monitor line for every rung in one run, interleaved message by message.

    First one message is committed for each while no watch runs; then all watches start and
    get ``settle`` seconds: does a fresh (re-armed) watch name mail that was already waiting?
    Then ``n`` rounds: each rung in turn (the order rotating) commits one message and waits for
    the line naming it, then waits 50 ms plus a random part of that watch's poll interval
    (50..150 ms for a 0.1 s poll), so sends fall at random points of every watch's poll
    cycle instead of locking to it (a fixed 50..150 ms gap after a line from a 2 s poller
    would always land ~1.9 s before its next poll). Last, every watch's idle CPU over one common window.
    """
    waiting = [rung.send()[0] for rung in rungs]
    watches = [Watch(rung.cmd, rung.env) for rung in rungs]
    results: dict[str, dict] = {}
    try:
        time.sleep(settle)
        for rung, watch, key in zip(rungs, watches, waiting, strict=True):
            early = []
            while not watch.lines.empty():
                early.append(watch.lines.get()[1])
            results[rung.label] = {
                "cmd": shlex.join(rung.cmd),
                "samples": [],
                "lines": 0,
                "lines_with_text": 0,
                "shape": None,
                "names_waiting_mail_at_start": any(rung.names(x, key) for x in early),
            }
        for i in range(n):
            k = i % len(rungs)
            for rung, watch in zip(rungs[k:] + rungs[:k], watches[k:] + watches[:k], strict=True):
                key, sent_at = rung.send()
                seen_at, line = watch.next_line()
                if not rung.names(line, key):
                    raise RuntimeError(f"{rung.label}: a line that does not name the message just sent")
                r = results[rung.label]
                r["samples"].append(seen_at - sent_at)
                r["lines"] += 1
                r["lines_with_text"] += rung.text(key) in line
                r["shape"] = r["shape"] or line_shape(line, rung.text(key))
                time.sleep(0.05 + random.uniform(0, rung.poll))
        idle = idle_cpu_percent([w.proc.pid for w in watches], idle_seconds)
    finally:
        for watch in watches:
            watch.stop()
    for rung, cpu in zip(rungs, idle, strict=True):
        r = results[rung.label]
        r["send_to_line"] = summarize(r.pop("samples"))
        r["idle_cpu_percent"] = cpu
    return results


async def mcp_paths(env: dict[str, str], sender: Agent, n: int, idle_seconds: float) -> dict:
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

    params = StdioServerParameters(
        command=sys.executable,
        args=[str(PROJECT / "server.py")],
        env={**env, "AGENT_ID": "kimi", "AGENT_BRIDGE_CLAUDE_CHANNEL": "1"},
        cwd=str(PROJECT),
    )
    errlog = open(os.devnull, "w")  # noqa: SIM115 - closed in the finally below
    channel, updated, idle = [], [], None
    try:
        async with Client(
            stdio_client(params, errlog=errlog),
            mode="legacy",
            message_handler=on_message,
            extensions=[Observer()],
            read_timeout_seconds=TIMEOUT,
        ) as client:
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                await client.subscribe_resource("bridge://inbox")
            await asyncio.sleep(1.0)
            for _ in range(n):
                c0, u0 = len(channel_at), len(updated_at)
                _, mid, sent_at = sender.send("kimi")
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


def measure(
    n: int = 200,
    idle_seconds: float = 10.0,
    systems: tuple[str, ...] = ("ours", "dlb"),
    mcp: bool = True,
    cache_dir: Path | None = None,
) -> dict:
    dlb_venv = None
    if "dlb" in systems:
        from bench.targets import DLB_VERSION, default_cache_dir, ensure_dlb

        dlb_venv = ensure_dlb(cache_dir or default_cache_dir())
    with tempfile.TemporaryDirectory(prefix="bench-wake-") as tmp:
        env = setup(Path(tmp))
        sender = Agent.ours(env)
        agents = [sender]
        try:
            rungs = [ours_rung(sender)] if "ours" in systems else []
            if dlb_venv is not None:
                for interval in (None, 0.1):  # its default, and our poll interval
                    store = Path(tmp) / f"dlb-{interval or 'default'}" / "store.sqlite3"
                    agents.append(Agent.dlb(dlb_venv, store))
                    rungs.append(dlb_rung(dlb_venv, agents[-1], interval))
            load_before = os.getloadavg()
            monitor = monitor_lines(rungs, n, idle_seconds)
            paths = asyncio.run(mcp_paths(env, sender, n, idle_seconds)) if mcp and "ours" in systems else {}
            load_after = os.getloadavg()
        finally:
            for agent in agents:
                agent.close()
    return {
        "messages": n,
        "idle_seconds": idle_seconds,
        "monitor_line": monitor,
        **paths,
        "peer": f"dlb-mcp {DLB_VERSION}" if dlb_venv else None,
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in load_after],
        "cpus": os.cpu_count(),
    }


def _ms(stats: dict) -> str:
    return f"p50 {stats['median'] * 1000:.1f} ms, p99 {stats['p99'] * 1000:.1f} ms (n={stats['n']})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--systems", default="ours,dlb", help="comma-separated: ours, dlb (the peer's dlb-monitor)")
    parser.add_argument("--no-mcp", action="store_true", help="skip the channel and resources/updated paths")
    parser.add_argument("--cache-dir", type=Path, default=None, help="where the dlb-mcp venv lives (bench's default)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    systems = tuple(s.strip() for s in args.systems.split(",") if s.strip())
    if unknown := set(systems) - {"ours", "dlb"}:
        parser.error(f"unknown system(s) {', '.join(sorted(unknown))}; known: ours, dlb")
    result = measure(args.messages, args.idle_seconds, systems, not args.no_mcp, args.cache_dir)
    for label, r in result["monitor_line"].items():
        print(f"send -> Monitor line, {label}: {_ms(r['send_to_line'])}")
        print(
            f"    idle CPU {r['idle_cpu_percent']}% of a core; lines carrying the message text: "
            f"{r['lines_with_text']}/{r['lines']}; names mail already waiting when (re)started: "
            f"{'yes' if r['names_waiting_mail_at_start'] else 'no'}; line shape: {r['shape']}"
        )
    if "channel" in result:
        print(f"send -> notifications/claude/channel:      {_ms(result['channel'])}")
        print(f"send -> notifications/resources/updated:   {_ms(result['resource_updated'])}")
        print(f"idle CPU: server watcher (channel on, subscribed) {result['server_idle_cpu_percent']}%")
    print(f"load average before/after: {result['loadavg_before']} / {result['loadavg_after']} on {result['cpus']} CPUs")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
