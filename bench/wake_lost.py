"""Wake-ups lost while the Monitor watch is killed and re-armed: the queue is the truth.

For ``--seconds`` (default 600): a sender commits messages for ``claude`` at random
(exponential) intervals; a real ``agent-bridge inbox watch --agent claude`` runs and is
killed with SIGKILL every ``--rearm-every`` seconds (default 30) and started again at once, as
a model re-arms Claude Code's Monitor; a consumer acts on each wake line the way the model
would: receive_messages, then mark_read of everything received (domain layer, another
process's connection). At the end the sender stops, the watch is re-armed one last time and
the consumer gets ``--drain-seconds`` to act on what it says.

Per message it records how the consumer learned of it:
- ``new_line``: named on a ``N new`` line of a running watch;
- ``rearm_line``: named on the ``N unread`` line a re-armed watch prints first (it arrived
  while no watch was running, or before the previous watch named it);
- ``swept``: received and acknowledged while acting on another message's line before its own
  line came (nothing to lose);
- ``never_woken``: acknowledged by nobody and named on no line (a lost wake-up).
``left_unread`` counts unacknowledged messages at the end (the goal is 0).

``uv run python -m bench.wake_lost [--seconds 600] [--rearm-every 30] [--mean-gap 2]``
"""

import argparse
import json
import os
import queue
import random
import re
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.wake import PROJECT, setup

LINE_IDS = re.compile(r"#(\d+) from ")


class Run:
    def __init__(self, env: dict[str, str], seed: int) -> None:
        sys.path.insert(0, str(PROJECT))
        from dispatcher import messages
        from dispatcher.store import Store

        self.env = env
        self.messages = messages
        self.db = Path(env["AGENT_BRIDGE_DB"])
        self.rng = random.Random(seed)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.sent: list[int] = []
        self.how: dict[int, str] = {}
        self.lines_seen = {"new": 0, "unread": 0, "other": 0}
        self.watches = 0
        self.lock = threading.Lock()
        self._store_cls = Store

    # --- the watch ----------------------------------------------------------------------
    def start_watch(self) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-m", "dispatcher", "inbox", "watch", "--agent", "claude"],
                                cwd=PROJECT, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                text=True)
        self.watches += 1

        def read() -> None:
            with proc.stdout:  # ends at EOF, also when the watch is killed
                for line in proc.stdout:
                    self.lines.put(line)

        threading.Thread(target=read, daemon=True).start()
        return proc

    @staticmethod
    def kill(proc: subprocess.Popen) -> None:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)

    # --- sender and consumer -------------------------------------------------------------
    def sender(self, stop: threading.Event, mean_gap: float) -> None:
        store = self._store_cls(self.db)
        try:
            while not stop.wait(self.rng.expovariate(1 / mean_gap)):
                sender = self.rng.choice(["kimi", "codex"])
                kind = self.rng.choice(["task", "notice", None])
                mid = self.messages.send_message(store.connection(), sender=sender, recipient="claude",
                                                 text="bench payload", agents={"claude", "kimi", "codex"},
                                                 kind=kind)["id"]
                with self.lock:
                    self.sent.append(mid)
        finally:
            store.close()

    def consumer(self, stop: threading.Event) -> None:
        store = self._store_cls(self.db)
        try:
            while not stop.is_set():
                try:
                    line = self.lines.get(timeout=0.2)
                except queue.Empty:
                    continue
                kind = "new" if " new for " in line else "unread" if " unread for " in line else "other"
                self.lines_seen[kind] += 1
                if kind == "other":
                    continue
                with self.lock:
                    for mid in map(int, LINE_IDS.findall(line)):
                        self.how.setdefault(mid, f"{kind}_line" if kind == "new" else "rearm_line")
                # Act on it as the model would: take everything waiting, acknowledge it.
                while True:
                    got = self.messages.receive_messages(store.connection(), agent="claude", worker_id="consumer",
                                                         limit=100)["messages"]
                    if not got:
                        break
                    ids = [m["id"] for m in got]
                    self.messages.mark_read(store.connection(), agent="claude", worker_id="consumer", message_ids=ids)
                    with self.lock:
                        for mid in ids:
                            self.how.setdefault(mid, "swept")
        finally:
            store.close()

    def left_unread(self) -> int:
        store = self._store_cls(self.db)
        try:
            return store.connection().execute(
                "SELECT COUNT(*) FROM messages WHERE recipient = 'claude' AND acknowledged_at IS NULL").fetchone()[0]
        finally:
            store.close()


def run(seconds: float, rearm_every: float, mean_gap: float, drain_seconds: float, seed: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-wake-lost-") as tmp:
        env = setup(Path(tmp))
        bench = Run(env, seed)
        stop_sender, stop_consumer = threading.Event(), threading.Event()
        load_before = os.getloadavg()
        cpu_before = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.monotonic()
        consumer = threading.Thread(target=bench.consumer, args=(stop_consumer,), daemon=True)
        sender = threading.Thread(target=bench.sender, args=(stop_sender, mean_gap), daemon=True)
        consumer.start()
        watch = bench.start_watch()
        sender.start()
        end = started + seconds
        while time.monotonic() < end:
            time.sleep(min(rearm_every, max(0.0, end - time.monotonic())))
            bench.kill(watch)
            watch = bench.start_watch()  # re-armed at once, as the model does on the expiry line
        stop_sender.set()
        sender.join(30)
        bench.kill(watch)
        watch = bench.start_watch()  # the last re-arm announces whatever is still unread
        time.sleep(drain_seconds)
        stop_consumer.set()
        consumer.join(30)
        watch.terminate()
        watch.wait(30)
        elapsed = time.monotonic() - started
        self_after, children_after = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
            resource.RUSAGE_CHILDREN)
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
            "seconds": round(elapsed, 1), "rearm_every": rearm_every, "mean_gap_seconds": mean_gap, "seed": seed,
            "sent": len(bench.sent), **counts, "never_woken": len(never), "never_woken_ids": never[:20],
            "left_unread": bench.left_unread(), "watches_started": bench.watches, "lines": bench.lines_seen,
            "cpu_percent_of_a_core": {"bench_process": cpu(cpu_before[0], self_after),
                                      "watch_processes": cpu(cpu_before[1], children_after)},
            "loadavg_before": [round(x, 2) for x in load_before], "loadavg_after": [round(x, 2) for x in load_after],
            "cpus": os.cpu_count(),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--rearm-every", type=float, default=30.0)
    parser.add_argument("--mean-gap", type=float, default=2.0, help="mean seconds between messages")
    parser.add_argument("--drain-seconds", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=10)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    result = run(args.seconds, args.rearm_every, args.mean_gap, args.drain_seconds, args.seed)
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
