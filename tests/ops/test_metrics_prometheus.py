"""A real Prometheus scrapes both ways out (docs/metrics.md): ``agent-bridge metrics serve`` and,
through the real node exporter's textfile collector, the file the listener writes. Twenty tasks
go through a real listener and fake workers (one fails, one times out, eighteen succeed); then
PromQL over Prometheus's HTTP API counts them, on both jobs, with a queue-wait histogram of twenty.

The binaries are Debian's ``prometheus`` and ``prometheus-node-exporter`` (.ci/run installs them);
without them the test skips locally and fails under CI. Every process it starts carries the run's
marker (``detached_guard``) and is ended at teardown."""

import json
import os
import selectors
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from dispatch_harness import FAKE_WORKER, STARTED, post_task, query, start_listener, wait_until
from harness import PROJECT, bridge_env
from prometheus_client.parser import text_string_to_metric_families

from dispatcher.core.locations import store_location

PROMETHEUS = shutil.which("prometheus")
NODE_EXPORTER = shutil.which("prometheus-node-exporter")
TASKS, FAILING, HANGING = 20, 2, 1  # message ids: the first task hangs, the second fails
DEADLINE = 180.0
DASHBOARD = PROJECT / "docs" / "agent-bridge-dashboard.json"
CANARY = "canary-51c0ffee the task's private text"

pytestmark = pytest.mark.skipif(
    (PROMETHEUS is None or NODE_EXPORTER is None) and not os.environ.get("CI"),
    reason="prometheus and prometheus-node-exporter are not installed "
    "(apt-get install -y prometheus prometheus-node-exporter); CI must have them",
)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _start(argv: list[str], env: dict | None = None, **kwargs) -> subprocess.Popen:
    proc = subprocess.Popen(
        argv,
        env={**os.environ, **(env or {})},  # (the run's marker with it: detached_guard ends it if we cannot)
        stdin=subprocess.DEVNULL,
        text=True,
        **{"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, **kwargs},
    )
    STARTED.append(proc)  # ended by conftest's fixture at teardown, whatever happens here
    return proc


def _announced_port(proc: subprocess.Popen) -> int:
    """The port ``metrics serve --port 0`` says it listens on (its first stderr line)."""
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stderr, selectors.EVENT_READ)
        assert selector.select(timeout=60), "metrics serve said nothing within 60 s"
        line = proc.stderr.readline()
    assert line.startswith("agent-bridge: metrics on http://127.0.0.1:"), line
    return int(line.split("127.0.0.1:")[1].split("/")[0])


def _launcher(directory: Path) -> Path:
    path = directory / "launch_by_id.sh"
    path.write_text(
        "#!/bin/sh\n"
        'case "$AGENT_BRIDGE_MESSAGE_ID" in\n'
        f"  {HANGING}) exec sleep 600 ;;\n"
        f"  {FAILING}) exit 3 ;;\n"
        "esac\n"
        f'FAKE_WORKER_MODE=succeed exec "$AGENT_BRIDGE_PYTHON" {FAKE_WORKER} "$@"\n'
    )
    path.chmod(0o755)
    return path


def _promql(port: int, expression: str) -> dict[str, float]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expression})
    with urllib.request.urlopen(url, timeout=10) as response:
        body = json.load(response)
    assert body["status"] == "success", body
    return {json.dumps(r["metric"], sort_keys=True): float(r["value"][1]) for r in body["data"]["result"]}


def _value(port: int, expression: str) -> float | None:
    try:
        result = _promql(port, expression)
    except OSError:  # Prometheus still starting
        return None
    return next(iter(result.values()), None)


def test_prometheus_counts_twenty_tasks_from_metrics_serve_and_from_the_listeners_textfile(tmp_path):
    started = time.monotonic()
    textfiles = tmp_path / "textfiles"
    textfiles.mkdir()
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "agents": {
                    "claude": {
                        "auto": True,
                        "launcher": str(_launcher(tmp_path)),
                        "worker_timeout_seconds": 25,
                        "max_workers": 6,
                        "isolation": "none",
                    },
                    "kimi": {"launcher": "launchers/kimi_headless.sh"},
                },
                "metrics_textfile_dir": str(textfiles),
                "max_workers_total": 6,
            }
        )
    )
    env = bridge_env(tmp_path, config)
    db = store_location(env["AGENT_BRIDGE_DB"])
    listener = start_listener(env)
    for n in range(TASKS):
        post_task(db, f"{CANARY} {n}")
    # The exporters and Prometheus start while the tasks run (they scrape what there is meanwhile):
    # their start-up overlaps the workers' instead of following them.
    serve = _start(
        [sys.executable, "-m", "dispatcher", "metrics", "serve", "--port", "0"],
        env,
        cwd=PROJECT,
        stderr=subprocess.PIPE,
    )
    serve_port = _announced_port(serve)
    node_port, prometheus_port = _free_port(), _free_port()
    _start(
        [
            NODE_EXPORTER,
            f"--web.listen-address=127.0.0.1:{node_port}",
            "--collector.disable-defaults",
            "--collector.textfile",
            f"--collector.textfile.directory={textfiles}",
        ]
    )
    prometheus_yml = tmp_path / "prometheus.yml"
    prometheus_yml.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"
        f"  - job_name: serve\n    static_configs:\n      - targets: ['127.0.0.1:{serve_port}']\n"
        f"  - job_name: node\n    static_configs:\n      - targets: ['127.0.0.1:{node_port}']\n"
    )
    _start(
        [
            PROMETHEUS,
            f"--config.file={prometheus_yml}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prometheus_port}",
        ]
    )
    wait_until(
        lambda: query(db, "SELECT count(*) FROM dispatch_attempts WHERE state = 'finished'")[0][0] == TASKS,
        deadline=DEADLINE,
        what=f"{TASKS} attempts finished",
    )
    print(f"the tasks took {time.monotonic() - started:.1f} s")
    outcomes = dict(query(db, "SELECT outcome, count(*) FROM dispatch_attempts GROUP BY outcome"))
    assert outcomes == {"succeeded": TASKS - 2, "failed": 1, "timeout": 1}, outcomes
    for job in ("serve", "node"):
        wait_until(
            lambda job=job: _value(prometheus_port, f'sum(agent_bridge_attempts_total{{job="{job}"}})') == TASKS,
            deadline=DEADLINE,
            what=f"Prometheus counting {TASKS} attempts from job {job}",
        )
        by_outcome = _promql(prometheus_port, f'sum by (outcome) (agent_bridge_attempts_total{{job="{job}"}})')
        assert by_outcome == {
            '{"outcome": "failed"}': 1,
            '{"outcome": "succeeded"}': TASKS - 2,
            '{"outcome": "timeout"}': 1,
        }, (job, by_outcome)
        wait = f'agent_bridge_queue_wait_seconds_bucket{{job="{job}",agent="claude"}}'
        buckets = _promql(prometheus_port, f"sum by (le) ({wait})")
        assert buckets['{"le": "+Inf"}'] == TASKS, buckets
        assert _value(prometheus_port, f'sum(agent_bridge_queue_wait_seconds_count{{job="{job}"}})') == TASKS
        assert _value(prometheus_port, f'sum(agent_bridge_attempt_duration_seconds_count{{job="{job}"}})') == TASKS
        sent = f'sum(agent_bridge_messages_sent_total{{job="{job}",agent="claude",kind="task"}})'
        assert _value(prometheus_port, sent) == TASKS
    for panel in json.loads(DASHBOARD.read_text())["panels"]:  # the dashboard's PromQL parses and runs
        for target in panel["targets"]:
            _promql(prometheus_port, target["expr"].replace("$__rate_interval", "1m").replace("$__range", "5m"))
    with urllib.request.urlopen(f"http://127.0.0.1:{serve_port}/metrics", timeout=10) as response:
        served = response.read().decode()
    (textfile,) = textfiles.iterdir()
    for exported in (served, textfile.read_text()):
        assert "agent_bridge_attempts_total" in exported and "canary" not in exported  # payload-free
    # The listener's own file says it runs; serve sees its lease.
    assert _value(prometheus_port, 'agent_bridge_listener_up{job="node",agent="claude"}') == 1
    assert _value(prometheus_port, 'agent_bridge_listener_up{job="serve",agent="claude"}') == 1
    # A listener that stops says so in its file, its last write.
    listener.terminate()
    listener.communicate(timeout=DEADLINE)
    assert listener.returncode == 0
    (up,) = [
        s for f in text_string_to_metric_families(textfile.read_text()) for s in f.samples if s.name.endswith("_up")
    ]
    assert up.labels["agent"] == "claude" and up.value == 0, up
    print(f"the Prometheus test took {time.monotonic() - started:.1f} s")
