"""What metrics cost a send: ``uv run python -m bench.metrics [--rounds R] [--seconds S] [--history H]``.

A send is the same transaction with metrics on or off: the figures are computed from the store at
scrape time (docs/metrics.md), so what "on" can cost a send is a reader beside it. Compared, in
one run, interleaved round by round (off, on, off, on ...) on one SQLite store holding ``H``
finished attempts of history, ``S`` seconds of sends per side and round:

- off: sends (``bridge.messages.send_message``, each its own committed transaction), nothing else;
- on: the same sends while another process scrapes ``agent-bridge metrics serve`` every second
  (Prometheus's default interval is 15 s: a harsher case) and rewrites a listener's textfile every
  second (a listener does every 5 s).

Printed: each side's send latency (median, p99, mean), the on/off ratio of the medians and of
the means, and what one scrape and one textfile write take on that store. ``--json`` for raw figures.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench.stats import summarize
from dispatcher.bridge import messages
from dispatcher.core.config import AgentConfig, BridgeConfig
from dispatcher.core.logs import configure_logging
from dispatcher.core.processes import this_host
from dispatcher.dispatch.attempts import begin_attempt
from dispatcher.dispatch.metrics import ListenerTextfile
from dispatcher.dispatch.outcome import settle
from dispatcher.store import open_store

AGENTS = {"claude", "kimi"}
CONFIG = BridgeConfig(agents={"claude": AgentConfig(launcher="launchers/command_headless.sh", auto=True)})


def _history(conn, attempts: int) -> None:
    """``attempts`` finished attempts of claude's: the rows a scrape reads."""
    now = time.time()
    for n in range(attempts):
        task = messages.send_message(conn, sender="kimi", recipient="claude", text="x", agents=AGENTS, kind="task")
        begin_attempt(
            conn,
            message_id=task["id"],
            config=CONFIG,
            now=now,
            manual=False,
            supervisor_pid=1,
            supervisor_start=None,
            worker_token="t",
        )
        settle(conn, task["id"], fallback="failed" if n % 7 else "timeout", error_kind="bench", now=now + n % 300)


def _sends(conn, seconds: float) -> list[float]:
    samples = []
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        started = time.perf_counter()
        messages.send_message(conn, sender="claude", recipient="kimi", text="bench note", agents=AGENTS)
        samples.append(time.perf_counter() - started)
    return samples


def beside(url: str, db: Path, textfiles: Path, every: float) -> None:
    """The other process of the "on" side (as a listener and Prometheus would be): a scrape of
    ``url`` and a textfile write every ``every`` seconds, each timing printed as one JSON line."""
    conn = open_store(db)
    textfile = ListenerTextfile(lambda: conn, textfiles, "claude", this_host(), CONFIG)
    try:
        while True:
            started = time.perf_counter()
            with urllib.request.urlopen(url, timeout=30) as response:  # noqa: S310 - loopback
                response.read()
            scraped = time.perf_counter()
            textfile.write(up=True, held=None)
            written = time.perf_counter()
            print(json.dumps({"scrape": scraped - started, "write": written - scraped}), flush=True)
            time.sleep(max(0.0, every - (written - started)))
    finally:
        conn.close()


def _start_beside(url: str, db: Path, textfiles: Path, every: float) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "bench.metrics", "--beside", url, str(db), str(textfiles), "--every", str(every)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
    )


def measure(rounds: int, seconds: float, history: int, every: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-metrics-") as tmp:
        root = Path(tmp)
        db, config, textfiles = root / "bridge.db", root / "config.json", root / "textfiles"
        textfiles.mkdir()
        config.write_text(
            json.dumps({"agents": {name: {"launcher": "launchers/command_headless.sh"} for name in AGENTS}})
        )
        conn = open_store(db)
        _history(conn, history)
        env = {
            "AGENT_BRIDGE_DB": str(db),
            "AGENT_BRIDGE_CONFIG": str(config),
            "AGENT_BRIDGE_RUNTIME_DIR": str(root / "run"),
        }
        serve = subprocess.Popen(
            [sys.executable, "-m", "dispatcher", "metrics", "serve", "--port", "0"],
            env={**os.environ, **env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        off: list[float] = []
        on: list[float] = []
        timings: list[dict] = []
        try:
            url = serve.stderr.readline().split("metrics on ")[1].split(" ")[0]
            _sends(conn, 0.5)  # warm-up, not counted
            for _ in range(rounds):
                off += _sends(conn, seconds)
                helper = _start_beside(url, db, textfiles, every)
                first = helper.stdout.readline()  # its first scrape done: it is up and running
                on += _sends(conn, seconds)
                helper.terminate()
                out, _ = helper.communicate(timeout=30)
                out = first + out
                timings += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        finally:
            serve.terminate()
            serve.communicate(timeout=30)
            conn.close()
    return {
        "history_attempts": history,
        "every_seconds": every,
        "seconds_per_side": rounds * seconds,
        "off": summarize(off),
        "on": summarize(on),
        "scrape": summarize([t["scrape"] for t in timings]),
        "textfile_write": summarize([t["write"] for t in timings]),
    }


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.3f} ms"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.metrics", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=3.0, help="of sends per side and round")
    parser.add_argument("--history", type=int, default=5000, help="finished attempts in the store")
    parser.add_argument("--every", type=float, default=1.0, help="seconds between scrapes (and textfile writes)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--beside", nargs=3, metavar=("URL", "DB", "TEXTFILES"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.beside:
        url, db, textfiles = args.beside
        beside(url, Path(db), Path(textfiles), args.every)
        return 0
    configure_logging()  # warnings only, on stderr: stdout is the figures
    result = measure(args.rounds, args.seconds, args.history, args.every)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    off, on = result["off"], result["on"]
    print(
        f"send, {off['n']} off and {on['n']} on in {result['seconds_per_side']:g} s per side, "
        f"{result['history_attempts']} attempts in the store, a scrape and a textfile write every {result['every_seconds']:g} s:"
    )
    print(f"{'':12}{'metrics off':>16}{'metrics on':>16}")
    for key in ("median", "p99", "mean"):
        print(f"{key:12}{_ms(off[key]):>16}{_ms(on[key]):>16}")
    print(f"on/off: median {on['median'] / off['median']:.3f}, mean {on['mean'] / off['mean']:.3f}")
    print(
        f"one scrape of metrics serve: median {_ms(result['scrape']['median'])} ({result['scrape']['n']} scrapes); "
        f"one textfile write: median {_ms(result['textfile_write']['median'])}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
