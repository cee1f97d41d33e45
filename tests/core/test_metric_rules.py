"""The metric rules (docs/metrics.md), one case each: who exports what, the buckets, labels, binds."""

import math

import pytest

from dispatcher.core.metric_rules import (
    LABEL_MAX,
    WAIT_BUCKETS,
    Scope,
    cumulative_buckets,
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


def test_a_value_lands_in_the_first_bucket_at_or_above_it_and_the_buckets_are_cumulative():
    counts, total, seen = cumulative_buckets([0.1, 0.2, 1, 7, 1e9], (0.1, 1, 10))
    assert counts == [1, 3, 4, 5]  # le 0.1 (inclusive), le 1, le 10, +Inf
    assert total == pytest.approx(1e9 + 8.3) and seen == 5


def test_a_negative_wait_counts_as_zero_and_a_nan_is_left_out():
    counts, total, seen = cumulative_buckets([-3.0, math.nan], WAIT_BUCKETS)
    assert counts[0] == 1 and counts[-1] == 1 and total == 0.0 and seen == 1


def test_no_values_make_empty_buckets():
    assert cumulative_buckets([], (1, 2)) == ([0, 0, 0], 0.0, 0)


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
