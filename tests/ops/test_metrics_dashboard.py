"""The Grafana dashboard in docs/ (docs/metrics.md) asks only for metrics the exporters write,
by labels they carry, and shows what issue 34 asked of it: queue wait, outcomes, spend per agent.
(tests/ops/test_metrics_prometheus.py runs every panel's PromQL against a real Prometheus.)"""

import json
import re
from pathlib import Path

from dispatcher.dispatch.metrics import PREFIX, metric_names

DASHBOARD = Path(__file__).parents[2] / "docs" / "agent-bridge-dashboard.json"
LABELS = {"agent", "host", "outcome", "error_kind", "kind", "reason", "state", "event", "path", "le", "job", "instance"}


def _targets() -> list[tuple[str, str]]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    assert panels, "the dashboard has no panels"
    found = []
    for panel in panels:
        assert panel["targets"], f"panel {panel['title']!r} asks for nothing"
        found += [(panel["title"], target["expr"]) for target in panel["targets"]]
    return found


def test_every_panel_names_only_metrics_that_exist():
    known = metric_names()
    for title, expr in _targets():
        named = set(re.findall(rf"\b{PREFIX}[a-z_]+", expr))
        assert named, f"{title!r}: no agent_bridge metric in {expr!r}"
        assert named <= known, f"{title!r} names metrics no exporter writes: {sorted(named - known)}"


def test_every_label_a_panel_groups_or_selects_by_is_one_the_metrics_carry():
    for title, expr in _targets():
        grouped = {name.strip() for group in re.findall(r"by \(([^)]*)\)", expr) for name in group.split(",")}
        selected = set(re.findall(r"[{,]\s*([a-z_]+)\s*(?:!=|=~|!~|=)", expr))
        assert grouped | selected <= LABELS, (
            f"{title!r} uses labels no metric has: {sorted((grouped | selected) - LABELS)}"
        )


def test_the_dashboard_shows_queue_wait_outcomes_and_spend_per_agent():
    exprs = " ".join(expr for _, expr in _targets())
    for wanted in (
        "agent_bridge_queue_wait_seconds_bucket",
        "agent_bridge_attempts_total",
        "agent_bridge_spend_today_usd",
    ):
        assert wanted in exprs, wanted
    assert '"uid": "${DS_PROMETHEUS}"' in DASHBOARD.read_text()  # imported with the reader's own data source
