"""Wake-ups lost while the Monitor watch is killed and re-armed: the queue is the truth.

For ``--seconds`` (default 600): a sender commits messages for ``claude`` at random
(exponential) intervals; a real ``agent-bridge inbox watch --agent claude`` runs and is
killed with SIGKILL every ``--rearm-every`` seconds (default 30) and started again at once, as
a model re-arms Claude Code's Monitor; a consumer acts on each wake line the way the model
would: receive_messages, then mark_read of everything received. The sender and the consumer
are each a ``bench/wake_agent.py`` process with its own connection (the domain layer, as a
server would call it). At the end the sender stops, the watch is re-armed one last time and
the consumer gets ``--drain-seconds`` to act on what it says.

Per message it records how the consumer learned of it:
- ``new_line``: named on a ``N new`` line of a running watch;
- ``rearm_line``: named on the ``N unread`` line a re-armed watch prints first (it arrived
  while no watch was running, or before the previous watch named it);
- ``swept``: received and acknowledged while acting on another message's line before its own
  line came (nothing to lose);
- ``never_woken``: acknowledged by nobody and named on no line (a lost wake-up).
``named_by_no_line`` counts the messages no line ever named, however they were acknowledged
(a wake-up the watch itself lost; a sweep only rescued it because other mail came).
``left_unread`` counts unacknowledged messages at the end (the goal is 0).

``--system dlb`` runs the same loop against the peer dlb-mcp 0.6.5: its Monitor command
``dlb-monitor --name claude`` (default 2 s poll) is killed and re-armed the same way; the
sender commits with ``dlb_mcp.store.send`` and the consumer acts on a line with
``dlb_mcp.store.read`` as the registered owner (which marks read), each in its own
``bench/wake_agent.py`` process under dlb's interpreter. dlb's lines carry no id, so a message
is recognised by a nonce in its body (never printed). dlb-monitor starts from the newest id
already in the inbox and never prints a first "unread" line, so for it ``rearm_line`` is 0.

``uv run python -m bench.wake_lost [--seconds 600] [--rearm-every 30] [--mean-gap 2] [--system ours|dlb]``
"""

import argparse
import json
import os
import queue
import random
import resource
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.wake import Agent, Watch, cpu_seconds, setup
from bench.wake_lines import dlb_nonce, ours_line

TEXT = "bench payload"  # bench/wake_agent.py's body prefix


@dataclass
class Inbox:
    """One system's watch command, how to start an agent process on its store, and what a
    watch line names (as the keys ``drain`` answers: our ids, dlb's body nonces)."""

    system: str
    watch_cmd: list[str]
    env: dict[str, str]
    agent: Callable[[], Agent]
    line_keys: Callable[[str], tuple[str, list[str]]]
    key: Callable[[str, int], str]  # (nonce, id) of a sent message -> its key

    def left_unread(self) -> int:
        agent = self.agent()
        try:
            return int(agent.ask("unread claude")[0])
        finally:
            agent.close()


def ours_inbox(root: Path) -> Inbox:
    env = setup(root)

    def line_keys(line: str) -> tuple[str, list[str]]:
        kind, ids = ours_line(line)
        return kind, [str(i) for i in ids]

    return Inbox(
        "ours",
        [sys.executable, "-m", "dispatcher", "inbox", "watch", "--agent", "claude"],
        env,
        lambda: Agent.ours(env),
        line_keys,
        lambda nonce, mid: str(mid),
    )


def dlb_inbox(venv: Path, db: Path) -> Inbox:
    """dlb-monitor at its default poll; a line carries no id, so a message is known by its nonce."""

    def line_keys(line: str) -> tuple[str, list[str]]:
        nonce = dlb_nonce(line, TEXT)
        return ("new", [nonce]) if nonce else ("other", [])

    return Inbox(
        "dlb",
        [str(venv / "bin" / "dlb-monitor"), "--name", "claude"],
        {**os.environ, "DLB_STORE": str(db)},
        lambda: Agent.dlb(venv, db),
        line_keys,
        lambda nonce, mid: nonce,
    )


class Run:
    def __init__(self, inbox: Inbox, seed: int) -> None:
        self.inbox = inbox
        self.rng = random.Random(seed)
        self.lines: queue.Queue[tuple[float, str]] = queue.Queue()
        self.sent: list[str] = []
        self.how: dict[str, str] = {}
        self.named: set[str] = set()  # every key any line named
        self.lines_seen = {"new": 0, "unread": 0, "other": 0}
        self.watches = 0
        self.watch_cpu = 0.0  # CPU seconds of every watch process, read just before it is stopped
        self.lock = threading.Lock()

    # --- the watch ----------------------------------------------------------------------
    def start_watch(self) -> Watch:
        self.watches += 1
        return Watch(self.inbox.watch_cmd, self.inbox.env, self.lines)

    def stop(self, watch: Watch, sig: int = signal.SIGKILL) -> None:
        self.watch_cpu += cpu_seconds(watch.proc.pid)
        watch.stop(sig)

    # --- sender and consumer -------------------------------------------------------------
    def sender(self, stop: threading.Event, mean_gap: float) -> None:
        agent = self.inbox.agent()
        try:
            while not stop.wait(self.rng.expovariate(1 / mean_gap)):
                nonce, mid, _ = agent.send(
                    "claude", self.rng.choice(["kimi", "codex"]), self.rng.choice(["task", "notice", None])
                )
                with self.lock:
                    self.sent.append(self.inbox.key(nonce, mid))
        finally:
            agent.close()

    def consumer(self, stop: threading.Event) -> None:
        agent = self.inbox.agent()
        agent.ask("register claude")  # dlb: the owner's read marks read; ours: nothing to do
        try:
            while not stop.is_set():
                try:
                    _, line = self.lines.get(timeout=0.2)
                except queue.Empty:
                    continue
                kind, keys = self.inbox.line_keys(line)
                self.lines_seen[kind] += 1
                if kind == "other":
                    continue
                with self.lock:
                    self.named.update(keys)
                    for key in keys:
                        self.how.setdefault(key, f"{kind}_line" if kind == "new" else "rearm_line")
                # Act on it as the model would: take everything waiting, acknowledge it.
                got = agent.ask("drain claude")  # ours: receive_messages + mark_read; dlb: read
                with self.lock:
                    for key in got:
                        self.how.setdefault(key, "swept")
        finally:
            agent.close()


def run(
    seconds: float,
    rearm_every: float,
    mean_gap: float,
    drain_seconds: float,
    seed: int,
    system: str = "ours",
    cache_dir: Path | None = None,
) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-wake-lost-") as tmp:
        if system == "dlb":
            from bench.targets import default_cache_dir, ensure_dlb

            inbox = dlb_inbox(ensure_dlb(cache_dir or default_cache_dir()), Path(tmp) / "dlb" / "store.sqlite3")
        else:
            inbox = ours_inbox(Path(tmp))
        bench = Run(inbox, seed)
        stop_sender, stop_consumer = threading.Event(), threading.Event()
        load_before = os.getloadavg()
        cpu_before = resource.getrusage(resource.RUSAGE_SELF)
        started = time.monotonic()
        consumer = threading.Thread(target=bench.consumer, args=(stop_consumer,), daemon=True)
        sender = threading.Thread(target=bench.sender, args=(stop_sender, mean_gap), daemon=True)
        consumer.start()
        watch = bench.start_watch()
        sender.start()
        end = started + seconds
        while time.monotonic() < end:
            time.sleep(min(rearm_every, max(0.0, end - time.monotonic())))
            bench.stop(watch)
            watch = bench.start_watch()  # re-armed at once, as the model does on the expiry line
        stop_sender.set()
        sender.join(30)
        bench.stop(watch)
        watch = bench.start_watch()  # the last re-arm announces whatever is still unread
        time.sleep(drain_seconds)
        stop_consumer.set()
        consumer.join(30)
        bench.stop(watch, signal.SIGTERM)
        elapsed = time.monotonic() - started
        self_after = resource.getrusage(resource.RUSAGE_SELF)
        load_after = os.getloadavg()
        counts = {"new_line": 0, "rearm_line": 0, "swept": 0}
        for mid in bench.sent:
            how = bench.how.get(mid)
            if how:
                counts[how] += 1
        never = [mid for mid in bench.sent if mid not in bench.how]

        def cpu(before, after) -> float:
            return round(100 * ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) / elapsed, 2)

        return {
            "system": system,
            "watch": " ".join([Path(inbox.watch_cmd[0]).name, *inbox.watch_cmd[1:]]),
            "seconds": round(elapsed, 1),
            "rearm_every": rearm_every,
            "mean_gap_seconds": mean_gap,
            "seed": seed,
            "sent": len(bench.sent),
            **counts,
            "never_woken": len(never),
            "never_woken_keys": never[:20],
            "named_by_no_line": sum(key not in bench.named for key in bench.sent),
            "left_unread": inbox.left_unread(),
            "watches_started": bench.watches,
            "lines": bench.lines_seen,
            "cpu_percent_of_a_core": {
                "bench_process": cpu(cpu_before, self_after),
                "watch_processes": round(100 * bench.watch_cpu / elapsed, 2),
            },
            "loadavg_before": [round(x, 2) for x in load_before],
            "loadavg_after": [round(x, 2) for x in load_after],
            "cpus": os.cpu_count(),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--rearm-every", type=float, default=30.0)
    parser.add_argument("--mean-gap", type=float, default=2.0, help="mean seconds between messages")
    parser.add_argument("--drain-seconds", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=10)
    parser.add_argument(
        "--system",
        choices=["ours", "dlb"],
        default="ours",
        help="ours: agent-bridge inbox watch; dlb: the peer dlb-mcp's dlb-monitor",
    )
    parser.add_argument("--cache-dir", type=Path, default=None, help="where the dlb-mcp venv lives (bench's default)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    result = run(
        args.seconds, args.rearm_every, args.mean_gap, args.drain_seconds, args.seed, args.system, args.cache_dir
    )
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
