"""The metric rules (docs/metrics.md), one case each: who exports what, cumulative buckets, labels,
binds, the counters' fixed label sets. Which bucket a span falls in is SQL: tests/dispatch/test_metrics_figures.py, on both backends."""

import pytest

from dispatcher.core.metric_rules import (
    LABEL_MAX,
    NOTICE_OUTCOMES,
    WAKE_PATHS,
    Scope,
    counted,
    cumulative,
    label,
    non_loopback,
    scope_of,
)


def test_a_listener_exports_its_agent_on_its_host():
    assert scope_of("listener", "claude", "host-a") == Scope(agent="claude", host="host-a")


def test_serve_exports_the_whole_store_whatever_host_it_runs_on():
    assert scope_of("serve", None, "host-a") == scope_of("serve", "claude", "host-b") == Scope(None, None)


def test_a_listener_without_an_agent_or_an_unknown_exporter_is_refused():
    with pytest.raises(ValueError, match="name the agent"):
        scope_of("listener", None, "host-a")
    with pytest.raises(ValueError, match="listener or serve"):
        scope_of("pushgateway", "claude", "host-a")


def test_buckets_are_made_cumulative():
    assert cumulative([1, 2, 0, 2]) == [1, 3, 3, 5]
    assert cumulative([0, 0]) == [0, 0]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("claude", "claude"),
        ("worker_gone", "worker_gone"),
        ("0123abcd-host.lan:1", "0123abcd-host.lan:1"),
        (None, "none"),
        ("", "none"),
        ('a "b"\n{c}', "a__b___c_"),
        ("x" * 200, "x" * LABEL_MAX),
    ],
)
def test_a_label_keeps_a_short_word_and_nothing_else(value, expected):
    assert label(value) == expected


@pytest.mark.parametrize("bind", ["127.0.0.1", "127.0.0.53", "::1", "localhost"])
def test_loopback_binds_are_allowed(bind):
    assert non_loopback(bind) is None


@pytest.mark.parametrize(
    ("bind", "why"),
    [
        ("0.0.0.0", "not a loopback"),  # noqa: S104 - refused: the point
        ("::", "not a loopback"),
        ("192.168.1.5", "SSH tunnel"),
        ("example.org", "not an IP"),
    ],
)
def test_other_binds_are_refused_with_the_way_out(bind, why):
    assert why in non_loopback(bind)


def test_the_counted_labels_are_fixed_sets():
    assert counted("notices", "budget_held", "started") and counted("notices", "attempt_failed", "cannot_start")
    assert counted("wakes", "monitor")
    for metric, value, detail in (
        ("notices", "budget_held", ""),
        ("notices", "canary task text", "started"),
        ("wakes", "hook", "started"),
        ("wakes", "bell", ""),
        ("attempts", "failed", ""),
    ):
        assert not counted(metric, value, detail)


def test_the_counted_sets_are_the_events_the_wake_ladder_and_what_bridge_count_admits():
    """A new notice event or wake path must come with a migration replacing ``bridge_count``: its
    SQL spells out the same sets (a migration is fixed text)."""
    from dispatcher.bridge.presence import WAKE_PATHS as PRESENCE_PATHS
    from dispatcher.core.notices import EVENTS
    from dispatcher.store.postgres_schema import MIGRATIONS

    assert WAKE_PATHS == PRESENCE_PATHS
    sql = MIGRATIONS[23]
    for values in (EVENTS, NOTICE_OUTCOMES, WAKE_PATHS):
        assert "(" + ", ".join(f"'{v}'" for v in values) + ")" in " ".join(sql.split()).replace("( ", "(")
