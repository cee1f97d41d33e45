"""The picture of the Grafana dashboard in docs/metrics.md: ``uv run --group bench python -m
bench.metrics_dashboard [--minutes M] [--out docs/metrics-dashboard.png]``.

Grafana cannot be installed here, so this is not a Grafana screenshot: it runs a real store for
``M`` minutes (two agents with listeners, scripted workers, some tasks failing and some timing
out, a cost per attempt, a ``notify_command`` for the failures' notices, the sender's
``inbox watch`` woken by the results), lets a real Prometheus (Debian's ``prometheus``) scrape
``agent-bridge metrics serve`` every second, then asks that Prometheus every panel's own PromQL
from docs/agent-bridge-dashboard.json (``$__rate_interval`` as 15 s, ``$__range`` as the run) and
draws the answers with matplotlib, one panel per panel, in the dashboard's layout.
"""

import argparse
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

from dispatcher.bridge import messages
from dispatcher.core.locations import PROJECT_DIR
from dispatcher.core.logs import configure_logging
from dispatcher.store import open_store

DASHBOARD = PROJECT_DIR / "docs" / "agent-bridge-dashboard.json"
AGENTS = {"claude": 0.031, "kimi": 0.012}  # each attempt's reported cost, USD
# A worker by the task's id: every 9th fails, every 13th outlives its timeout, the rest answer.
LAUNCHER = """#!/bin/sh
id="$AGENT_BRIDGE_MESSAGE_ID"
if [ $((id % 9)) -eq 0 ]; then exit 3; fi
if [ $((id % 13)) -eq 0 ]; then exec sleep 600; fi
printf '{{"cli": "scripted", "cli_status": "ok", "cost_usd": {cost}}}' > "$AGENT_BRIDGE_DIAGNOSTICS_FILE"
sleep "$(( id % 4 ))"
exec {project}/launchers/scripted_headless.sh "$@"
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _query(port: int, path: str, **params: str) -> list:
    url = f"http://127.0.0.1:{port}/api/v1/{path}?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=30) as response:  # noqa: S310 - loopback
        body = json.load(response)
    if body["status"] != "success":
        raise RuntimeError(body)
    return body["data"]["result"]


def _legend(template: str, metric: dict) -> str:
    for key, value in metric.items():
        template = template.replace("{{" + key + "}}", value)
    return template


def run(minutes: float, root: Path, procs: list[subprocess.Popen]) -> tuple[int, float, float]:
    """The store, its listeners, serve and Prometheus (added to ``procs``: the caller ends them),
    and the tasks; returns Prometheus's port and the run's start and end."""
    config = {"agents": {}}
    for agent, cost in AGENTS.items():
        launcher = root / f"launch_{agent}.sh"
        launcher.write_text(LAUNCHER.format(cost=cost, project=PROJECT_DIR))
        launcher.chmod(0o755)
        config["agents"][agent] = {
            "auto": True,
            "launcher": str(launcher),
            "worker_timeout_seconds": 20,
            "max_workers": 2,
            "isolation": "none",
        }
    config["agents"]["me"] = {"launcher": "launchers/command_headless.sh"}
    config["notify_command"] = ["true"]  # each failure's notice goes out (and is counted)
    (root / "config.json").write_text(json.dumps(config))
    (root / "workspace").mkdir()
    env = {
        **os.environ,
        "AGENT_BRIDGE_DB": str(root / "bridge.db"),
        "AGENT_BRIDGE_CONFIG": str(root / "config.json"),
        "AGENT_BRIDGE_RUNTIME_DIR": str(root / "runtime"),
        "AGENT_BRIDGE_WORKSPACE": str(root / "workspace"),
    }
    conn = open_store(root / "bridge.db")

    def start(argv: list[str], **kwargs) -> subprocess.Popen:
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, cwd=PROJECT_DIR, **kwargs)
        procs.append(proc)
        return proc

    for agent in AGENTS:
        start([sys.executable, "-m", "dispatcher", "listener", "run", "--agent", agent], stderr=subprocess.DEVNULL)
    # The sender's session watches its inbox: each batch of results wakes it (the wakes panel).
    start([sys.executable, "-m", "dispatcher", "inbox", "watch", "--agent", "me"], stdout=subprocess.DEVNULL)
    serve = start(
        [sys.executable, "-m", "dispatcher", "metrics", "serve", "--port", "0"], stderr=subprocess.PIPE, text=True
    )
    serve_port = int(serve.stderr.readline().split("127.0.0.1:")[1].split("/")[0])
    prometheus_port = _free_port()
    (root / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\nscrape_configs:\n"
        f"  - job_name: serve\n    static_configs:\n      - targets: ['127.0.0.1:{serve_port}']\n"
    )
    start(
        [
            shutil.which("prometheus") or "prometheus",
            f"--config.file={root / 'prometheus.yml'}",
            f"--storage.tsdb.path={root / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prometheus_port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    began = time.time()
    sending_until = began + minutes * 60 * 0.75
    randomness = random.Random(34)  # noqa: S311 - a repeatable load, not a secret
    while time.time() < sending_until:
        for _ in range(randomness.choice((1, 1, 2, 3))):
            agent = randomness.choice(list(AGENTS))
            messages.send_message(
                conn, sender="me", recipient=agent, text="a task", agents={*AGENTS, "me"}, kind="task"
            )
        time.sleep(randomness.uniform(2, 7))
    conn.close()
    time.sleep(max(0.0, began + minutes * 60 - time.time()))
    return prometheus_port, began, time.time()


def draw(port: int, began: float, ended: float, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dashboard = json.loads(DASHBOARD.read_text())
    panels = dashboard["panels"]
    rows = max(p["gridPos"]["y"] for p in panels) // 8 + 1
    plt.style.use("dark_background")
    figure, axes = plt.subplots(rows, 2, figsize=(16, 4.2 * rows))
    span = f"{int(ended - began)}s"
    for panel in panels:
        ax = axes[panel["gridPos"]["y"] // 8][panel["gridPos"]["x"] // 12]
        ax.set_title(panel["title"], loc="left", fontsize=11)
        bars: dict[str, float] = {}
        for target in panel["targets"]:
            expr = target["expr"].replace("$__rate_interval", "15s").replace("$__range", span)
            if panel["type"] == "timeseries":
                for series in _query(port, "query_range", query=expr, start=str(began), end=str(ended), step="2"):
                    xs = [(float(t) - began) / 60 for t, _ in series["values"]]
                    ys = [float(v) for _, v in series["values"]]
                    ax.plot(xs, ys, label=_legend(target["legendFormat"], series["metric"]))
            else:
                for series in _query(port, "query", query=expr, time=str(ended)):
                    bars[_legend(target["legendFormat"], series["metric"])] = float(series["value"][1])
        if panel["type"] == "timeseries":
            ax.set_xlabel("minutes into the run")
            ax.set_ylabel(panel["fieldConfig"]["defaults"]["unit"])
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=8, loc="upper left")
        elif panel["type"] == "stat":
            ax.axis("off")
            text = "   ".join(f"{name}: {'UP' if value else 'DOWN'}" for name, value in sorted(bars.items()))
            ax.text(0.5, 0.5, text or "no data", ha="center", va="center", fontsize=22, color="#73bf69")
        else:
            names = sorted(bars)
            ax.barh(names, [bars[n] for n in names], color="#5794f2")
            for y, name in enumerate(names):
                unit = "$" if panel["fieldConfig"]["defaults"]["unit"] == "currencyUSD" else ""
                ax.text(bars[name], y, f" {unit}{bars[name]:.3g}", va="center")
    figure.suptitle(
        "Agent Bridge dashboard: a matplotlib rendering of docs/agent-bridge-dashboard.json's PromQL, "
        "asked of a real Prometheus 2.42 (not a Grafana screenshot)",
        fontsize=12,
    )
    figure.tight_layout(rect=(0, 0, 1, 0.97))
    figure.savefig(out, dpi=80)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.metrics_dashboard", description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=4.0)
    parser.add_argument("--out", type=Path, default=PROJECT_DIR / "docs" / "metrics-dashboard.png")
    args = parser.parse_args(argv)
    configure_logging()
    with tempfile.TemporaryDirectory(prefix="bench-dashboard-") as tmp:
        procs: list[subprocess.Popen] = []
        try:
            port, began, ended = run(args.minutes, Path(tmp), procs)
            draw(port, began, ended, args.out)
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.communicate(timeout=60)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
