"""The Prometheus figures computed from a store (docs/metrics.md), on SQLite and PostgreSQL, in
this process: the counts, the histograms, who exports what (a listener: its agent and its host's
attempts; ``metrics serve``: the whole store, so that the listeners' files add up to it), the
textfile as the node exporter reads it, and never a task's text."""

import os
import stat
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from dispatcher.bridge import messages
from dispatcher.core.config import AgentConfig, BridgeConfig
from dispatcher.core.metric_rules import scope_of
from dispatcher.core.processes import HOST_ID_ENV
from dispatcher.dispatch.attempts import begin_attempt
from dispatcher.dispatch.metrics import (
    ListenerFact,
    ListenerTextfile,
    StoreCollector,
    exposition,
    metric_names,
    registry_of,
)
from dispatcher.dispatch.outcome import settle
from dispatcher.ops.prune import prune
from dispatcher.store import retention, write_transaction
from dispatcher.store.metrics import count_event, record_budget_hold, span_buckets

pytestmark = pytest.mark.both_backends

AGENTS = {"claude", "kimi", "me"}
CANARY = "canary-7f3e9b1d the secret task text"
CONFIG = BridgeConfig(
    agents={
        "claude": AgentConfig(launcher="launchers/command_headless.sh", auto=True),
        "kimi": AgentConfig(launcher="launchers/command_headless.sh", auto=True),
    }
)


def _task(conn, recipient: str) -> int:
    return messages.send_message(conn, sender="me", recipient=recipient, text=CANARY, agents=AGENTS, kind="task")["id"]


def _attempt(conn, monkeypatch, message_id: int, host: str, now: float) -> None:
    monkeypatch.setenv(HOST_ID_ENV, host)
    begin_attempt(
        conn,
        message_id=message_id,
        config=CONFIG,
        now=now,
        manual=False,
        supervisor_pid=1,
        supervisor_start=None,
        worker_token="t",
    )


@pytest.fixture
def store(conn, monkeypatch):
    """kimi: three tasks, attempts on host-a (one failed, one running) and host-b (running), a
    result to me; claude: one task nobody took yet."""
    now = time.time()
    first, second, third = (_task(conn, "kimi") for _ in range(3))
    _task(conn, "claude")
    _attempt(conn, monkeypatch, first, "host-a", now + 2)
    _attempt(conn, monkeypatch, second, "host-a", now + 40)
    _attempt(conn, monkeypatch, third, "host-b", now + 0.5)
    settle(conn, first, fallback="failed", error_kind="exit_nonzero", now=now + 5)
    messages.send_message(
        conn, sender="kimi", recipient="me", text=CANARY, agents=AGENTS, kind="result", reply_to=second
    )
    return conn


def _collector(conn, scope, listeners=()):
    return StoreCollector(
        lambda: conn,
        lambda _conn: None,
        scope,
        now=lambda _conn: time.time(),
        config=CONFIG,
        agents=sorted(CONFIG.agents) if scope.agent is None else [scope.agent],
        listeners=lambda _conn, _now: listeners,
    )


def _samples(text: str) -> dict[tuple, float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _sum(samples: dict, name: str, **labels: str) -> float:
    return sum(value for (n, got), value in samples.items() if n == name and set(labels.items()) <= set(got))


def test_the_whole_store_counts_every_agent_and_host(store):
    text = exposition(registry_of(_collector(store, scope_of("serve", None, "host-a"))))
    samples = _samples(text)
    assert _sum(samples, "agent_bridge_attempts_total", agent="kimi", outcome="failed") == 1
    assert _sum(samples, "agent_bridge_attempts_total", error_kind="exit_nonzero") == 1
    assert _sum(samples, "agent_bridge_running_attempts", agent="kimi") == 2
    assert _sum(samples, "agent_bridge_running_attempts", host="host-b") == 1
    assert _sum(samples, "agent_bridge_queue_wait_seconds_count", agent="kimi") == 3
    # Waits of about 2 s, 40 s and 0.5 s: one at or below 1 s, two at or below 10 s, three below +Inf.
    assert _sum(samples, "agent_bridge_queue_wait_seconds_bucket", agent="kimi", le="1.0") == 1
    assert _sum(samples, "agent_bridge_queue_wait_seconds_bucket", agent="kimi", le="10.0") == 2
    assert _sum(samples, "agent_bridge_queue_wait_seconds_bucket", agent="kimi", le="+Inf") == 3
    assert _sum(samples, "agent_bridge_attempt_duration_seconds_count", agent="kimi") == 1
    assert _sum(samples, "agent_bridge_messages_sent_total", agent="kimi", kind="task") == 3
    assert _sum(samples, "agent_bridge_messages_sent_total", agent="me", kind="result") == 1
    assert _sum(samples, "agent_bridge_messages_sent_total", agent="me", kind="notice") == 1  # the failure's
    assert _sum(samples, "agent_bridge_pending_tasks", agent="claude") == 1
    assert _sum(samples, "agent_bridge_pending_tasks", agent="claude", state="dispatchable") == 1
    assert _sum(samples, "agent_bridge_pending_tasks", agent="kimi") == 0
    assert _sum(samples, "agent_bridge_pending_tasks", agent="me") == 0  # a result to me wakes no worker
    assert {name for name, _ in samples} <= metric_names()
    assert CANARY not in text and "canary" not in text  # never a task's text


def test_the_listeners_files_add_up_to_the_whole_store_and_no_figure_is_counted_twice(store):
    whole = _samples(exposition(registry_of(_collector(store, scope_of("serve", None, "x")))))
    a = _samples(exposition(registry_of(_collector(store, scope_of("listener", "kimi", "host-a")))))
    b = _samples(exposition(registry_of(_collector(store, scope_of("listener", "kimi", "host-b")))))
    assert _sum(a, "agent_bridge_queue_wait_seconds_count") == 2  # host-a's two attempts only
    assert _sum(b, "agent_bridge_queue_wait_seconds_count") == 1
    for name in (
        "agent_bridge_attempts_total",
        "agent_bridge_running_attempts",
        "agent_bridge_queue_wait_seconds_count",
    ):
        assert _sum(a, name) + _sum(b, name) == _sum(whole, name, agent="kimi"), name
    assert _sum(a, "agent_bridge_pending_tasks", agent="claude") == 0  # not kimi's listener's to export


def test_the_listeners_textfile_is_readable_by_the_node_exporter_and_says_if_it_runs(store, tmp_path):
    textfiles = tmp_path / "textfiles"
    textfiles.mkdir()
    textfile = ListenerTextfile(lambda: store, textfiles, "kimi", "host-a", CONFIG)
    textfile.write(up=True, held="max_workers")
    path = textfile.path
    assert path == textfiles / "agent_bridge_kimi.prom"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    assert [p.name for p in textfiles.iterdir()] == [path.name]  # no temp file left beside it
    samples = _samples(path.read_text())
    assert samples[("agent_bridge_listener_up", (("agent", "kimi"), ("host", "host-a")))] == 1
    assert samples[("agent_bridge_listener_held", (("agent", "kimi"), ("reason", "max_workers")))] == 1
    textfile.write(up=False, held="max_workers")
    samples = _samples(path.read_text())
    assert samples[("agent_bridge_listener_up", (("agent", "kimi"), ("host", "host-a")))] == 0
    assert _sum(samples, "agent_bridge_listener_held") == 0  # a stopped listener holds nothing
    assert CANARY not in path.read_text()


def test_pending_tasks_are_split_by_what_the_dispatch_rule_would_do_with_them(conn):
    """The dispatch rule's own backlog (``queue.classify``): a task of an agent whose auto is off is
    held, not dispatchable."""
    config = BridgeConfig(agents={**CONFIG.agents, "kimi": AgentConfig(launcher="launchers/command_headless.sh")})
    _task(conn, "kimi")
    _task(conn, "claude")
    collector = StoreCollector(
        lambda: conn,
        lambda _conn: None,
        scope_of("serve", None, "x"),
        now=lambda _conn: time.time(),
        config=config,
        agents=["claude", "kimi"],
        listeners=lambda _conn, _now: [],
    )
    samples = _samples(exposition(registry_of(collector)))
    assert _sum(samples, "agent_bridge_pending_tasks", agent="kimi", state="auto_off") == 1
    assert _sum(samples, "agent_bridge_pending_tasks", agent="kimi", state="dispatchable") == 0
    assert _sum(samples, "agent_bridge_pending_tasks", agent="claude", state="dispatchable") == 1


def test_a_link_planted_at_the_textfiles_name_is_replaced_never_followed(store, tmp_path):
    textfiles, victim = tmp_path / "textfiles", tmp_path / "victim"
    textfiles.mkdir()
    victim.write_text("keep me")
    (textfiles / "agent_bridge_kimi.prom").symlink_to(victim)
    textfile = ListenerTextfile(lambda: store, textfiles, "kimi", "host-a", CONFIG)
    textfile.write(up=True, held=None)
    assert victim.read_text() == "keep me"
    assert not textfile.path.is_symlink() and "agent_bridge_listener_up" in textfile.path.read_text()


def _prunable(conn) -> dict[tuple, float]:
    """Every figure of the store (``metrics serve``'s) once its finished task and every other
    message is old enough for prune (acknowledged an hour ago)."""
    with write_transaction(conn):
        conn.execute("UPDATE messages SET acknowledged_at = created_at, created_at = created_at - 3600")
    return _samples(exposition(registry_of(_collector(conn, scope_of("serve", None, "x")))))


_CUMULATIVE = ("_total", "_bucket", "_count", "_sum")


def _cumulative(samples: dict[tuple, float]) -> dict[tuple, float]:
    """The counters and histograms (the gauges, pending and running, move at a prune by design)."""
    return {key: value for key, value in samples.items() if key[0].endswith(_CUMULATIVE)}


def test_prune_leaves_every_counter_and_bucket_as_it_was_and_a_fresh_exporter_agrees(store):
    """Prune folds what it deletes into the running totals (migration 23): the counters and the
    histograms' buckets read the same after it, from a new exporter too (no counter reset)."""
    before = _prunable(store)
    running = registry_of(_collector(store, scope_of("serve", None, "x")))  # an exporter running throughout
    assert _cumulative(_samples(exposition(running))) == _cumulative(before)
    attempts_before = store.execute("SELECT count(*) FROM dispatch_attempts").fetchone()[0]
    report = prune(store, 60, now=time.time() + 3600)
    assert report.messages >= 2  # the failed task and its notice, at least: something did go
    assert store.execute("SELECT count(*) FROM dispatch_attempts").fetchone()[0] == attempts_before - 1
    after = _samples(exposition(registry_of(_collector(store, scope_of("serve", None, "x")))))
    assert _cumulative(after) == _cumulative(before)
    assert _cumulative(_samples(exposition(running))) == _cumulative(before)
    assert _sum(after, "agent_bridge_attempts_total", agent="kimi", outcome="failed") == 1
    assert _sum(after, "agent_bridge_attempt_duration_seconds_bucket", agent="kimi", le="5.0") == 1
    # A listener's file (its agent, its host) reads the pruned attempt from the totals too.
    listener = _samples(exposition(registry_of(_collector(store, scope_of("listener", "kimi", "host-a")))))
    assert _sum(listener, "agent_bridge_attempts_total", outcome="failed") == 1
    assert _sum(listener, "agent_bridge_queue_wait_seconds_count") == 2
    # A new message after the prune counts once, on top of the folded ones.
    _task(store, "claude")
    later = _samples(exposition(registry_of(_collector(store, scope_of("serve", None, "x")))))
    assert _sum(later, "agent_bridge_messages_sent_total", agent="claude") == 2
    for _ in range(2):  # the running exporter counts it once, however often it is read
        assert _sum(_samples(exposition(running)), "agent_bridge_messages_sent_total", agent="claude") == 2
    assert CANARY not in str(store.execute("SELECT * FROM metric_totals").fetchall())


def test_a_prune_that_fails_after_folding_leaves_the_totals_and_the_rows_as_they_were(store, monkeypatch):
    """The fold and the deletion are one transaction: a failure between them (a crash, a kill)
    rolls the fold back with it, so nothing is counted twice or lost."""
    before = _prunable(store)
    folded = retention.fold_into_totals

    def fold_then_fail(conn, ids_json):
        folded(conn, ids_json)
        raise RuntimeError("killed between the fold and the deletion")

    monkeypatch.setattr(retention, "fold_into_totals", fold_then_fail)
    with pytest.raises(RuntimeError, match="killed between"):
        prune(store, 60, now=time.time() + 3600)
    assert store.execute("SELECT count(*) FROM metric_totals").fetchone()[0] == 0
    after = _samples(exposition(registry_of(_collector(store, scope_of("serve", None, "x")))))
    assert _cumulative(after) == _cumulative(before)
    monkeypatch.undo()
    prune(store, 60, now=time.time() + 3600)  # the next run prunes it, once
    again = _samples(exposition(registry_of(_collector(store, scope_of("serve", None, "x")))))
    assert _cumulative(again) == _cumulative(before)


def test_a_budget_hold_counts_once_per_agent_and_day_and_prune_keeps_it(store):
    """A listener records each budget day its agent's daily budget held its tasks; seeing it again
    that day (a restarted listener) counts nothing more."""
    today = time.time() // 86400 * 86400
    with write_transaction(store):
        for day in (today, today, today - 86400):
            record_budget_hold(store, "kimi", day)
    for scope in (scope_of("serve", None, "x"), scope_of("listener", "kimi", "host-a")):
        samples = _samples(exposition(registry_of(_collector(store, scope))))
        assert _sum(samples, "agent_bridge_budget_holds_total", agent="kimi") == 2
    samples = _samples(exposition(registry_of(_collector(store, scope_of("serve", None, "x")))))
    assert _sum(samples, "agent_bridge_budget_holds_total", agent="claude") == 0  # a configured agent: 0
    prune(store, 0, now=time.time() + 3600)
    samples = _samples(exposition(registry_of(_collector(store, scope_of("serve", None, "x")))))
    assert _sum(samples, "agent_bridge_budget_holds_total", agent="kimi") == 2


def test_the_counters_of_notices_and_wakes_are_exported_per_agent_and_prune_keeps_them(store, tmp_path):
    """Written where they happen (``store.metrics.count_event``), exported from the store: by
    ``metrics serve`` for every agent, by a listener's textfile for its own agent only; labels from
    their fixed sets, never a message id or text."""
    for _ in range(2):
        count_event(store, "wakes", "kimi", "hook")
    count_event(store, "wakes", "claude", "channel")
    count_event(store, "notices", "kimi", "attempt_failed", "started")
    count_event(store, "notices", "kimi", "approval_waiting", "cannot_start")
    whole = _samples(exposition(registry_of(_collector(store, scope_of("serve", None, "x")))))
    assert whole[("agent_bridge_wakes_total", (("agent", "kimi"), ("path", "hook")))] == 2
    assert whole[("agent_bridge_wakes_total", (("agent", "claude"), ("path", "channel")))] == 1
    assert _sum(whole, "agent_bridge_notices_total", agent="kimi", event="attempt_failed", outcome="started") == 1
    assert _sum(whole, "agent_bridge_notices_total", event="approval_waiting", outcome="cannot_start") == 1
    textfile = ListenerTextfile(lambda: store, tmp_path, "kimi", "host-a", CONFIG)
    textfile.write(up=True, held=None)
    text = textfile.path.read_text()
    own = _samples(text)
    assert _sum(own, "agent_bridge_wakes_total") == 2 and _sum(own, "agent_bridge_notices_total") == 2
    assert _sum(own, "agent_bridge_wakes_total", agent="claude") == 0  # not kimi's listener's to export
    assert {name for name, _ in own} <= metric_names()
    assert CANARY not in text and "canary" not in text
    prune(store, 0, now=time.time() + 3600)
    after = _samples(exposition(registry_of(_collector(store, scope_of("serve", None, "x")))))
    for name in ("agent_bridge_wakes_total", "agent_bridge_notices_total"):
        assert _sum(after, name) == _sum(whole, name) == (3 if name.endswith("wakes_total") else 2), name


@pytest.mark.parametrize(
    ("span", "bucket"), [(-5.0, 0), (0.0, 0), (1.0, 0), (1.0001, 1), (2.5, 1), (3.0, 2), (80000.0, 2)]
)
def test_a_span_lands_in_the_first_bucket_at_or_above_it(conn, monkeypatch, span, bucket):
    """At a bound is in it, just above is in the next, above them all is +Inf's, and a negative
    span (a clock stepped back between two hosts) is the first bucket's, counted as 0 s."""
    task = _task(conn, "kimi")
    created = conn.execute("SELECT created_at FROM messages WHERE id = ?", (task,)).fetchone()[0]
    _attempt(conn, monkeypatch, task, "host-a", created + span)
    rows = span_buckets(conn, "queue_wait", (1, 2.5), None, None)
    assert [(agent, n, count) for agent, _, n, count, _ in rows] == [("kimi", bucket, 1)]
    assert rows[0][4] == pytest.approx(max(span, 0.0))


def test_a_listener_label_is_cleaned(store):
    facts = [ListenerFact("kimi", 'host"\n{x}', True)]
    text = exposition(registry_of(_collector(store, scope_of("serve", None, "x"), facts)))
    assert 'host="host___x_"' in text
