"""Issue 34: on PostgreSQL with per-agent roles, an agent's role reads its own agent's running
totals (its listener's textfile adds them up) and no other agent's, and writes only its own
agent's budget hold days: prune, as the store's owner, folds every other figure into them. Its
counters of notices and wakes it adds one to through ``bridge_count`` only: its own agent's, by
one, of those metrics and labels. On a real PostgreSQL server."""

import pytest
import roles_fixtures

from dispatcher.store import write_transaction
from dispatcher.store.errors import PostgresPermissionDenied
from dispatcher.store.metrics import (
    attempt_counts,
    budget_hold_days,
    count_event,
    counter_totals,
    record_budget_hold,
)

_TOTAL = (
    "INSERT INTO metric_totals (metric, agent, host, label, detail, bucket, count, seconds)"
    " VALUES ('attempts', ?, 'h', 'failed', 'exit_nonzero', -1, ?, 0)"
)

owner_and_alice = roles_fixtures.owner_and_alice  # (the store, as its owner and as alice's role)


# No right at all (UPDATE, DELETE), or a row the policy does not admit (an INSERT of a count).
REFUSED = "permission denied|violates row-level security policy"


def test_an_agents_role_reads_its_own_totals_only_and_records_only_its_budget_holds(owner_and_alice):
    owner, alice = owner_and_alice
    with write_transaction(owner):
        owner.execute(_TOTAL, ("alice", 3))
        owner.execute(_TOTAL, ("bob", 5))
    assert [(r[0], r[5]) for r in attempt_counts(alice, None, None)] == [("alice", 3)]
    for statement, params in (
        (_TOTAL, ("alice", 1)),
        ("UPDATE metric_totals SET count = 0 WHERE agent = ?", ("alice",)),
        ("DELETE FROM metric_totals WHERE agent = ?", ("alice",)),
    ):
        with pytest.raises(PostgresPermissionDenied, match=REFUSED):
            alice.execute(statement, params)
    assert sorted((r[0], r[5]) for r in attempt_counts(owner, None, None)) == [("alice", 3), ("bob", 5)]
    # Its listener records its own agent's budget hold days, once a day; never another agent's.
    with write_transaction(alice):
        record_budget_hold(alice, "alice", 86400.0)
        record_budget_hold(alice, "alice", 86400.0)
    assert budget_hold_days(alice, None) == {"alice": 1}
    with pytest.raises(PostgresPermissionDenied, match=REFUSED), write_transaction(alice):
        record_budget_hold(alice, "bob", 86400.0)
    assert budget_hold_days(owner, None) == {"alice": 1}


def test_an_agents_role_adds_one_to_its_own_counters_through_bridge_count_only(owner_and_alice):
    owner, alice = owner_and_alice
    count_event(alice, "wakes", "alice", "hook")
    count_event(alice, "wakes", "alice", "hook")
    count_event(alice, "notices", "alice", "budget_held", "started")
    count_event(owner, "wakes", "bob", "channel")  # the owner counts for any agent
    assert counter_totals(alice, "wakes", None) == {("alice", "hook", ""): 2}  # bob's is not hers to read
    assert counter_totals(owner, "notices", None) == {("alice", "budget_held", "started"): 1}
    refused = "insufficient_privilege|counts only for its own agent|not a counted metric|permission denied"
    for arguments in (
        ("bob", "wakes", "hook", ""),  # another agent's counter
        ("alice", "budget_hold_days", "86400", ""),  # another metric
        ("alice", "attempts", "failed", "exit_nonzero"),
        ("alice", "wakes", "a secret task text", ""),  # a label outside the fixed set
        ("alice", "notices", "budget_held", "sent twice"),
    ):
        with pytest.raises(PostgresPermissionDenied, match=refused):
            alice.execute("SELECT bridge_count(?, ?, ?, ?)", arguments)
    # No right on the rows themselves: no arbitrary count, no reset, no row of its own making.
    for statement, params in (
        ("UPDATE metric_totals SET count = 1000 WHERE agent = ?", ("alice",)),
        ("DELETE FROM metric_totals WHERE agent = ?", ("alice",)),
        (
            "INSERT INTO metric_totals (metric, agent, host, label, detail, bucket, count, seconds)"
            " VALUES ('wakes', ?, '', 'monitor', '', -1, 1000, 0)",
            ("alice",),
        ),
        (
            "INSERT INTO metric_totals (metric, agent, host, label, detail, bucket, count, seconds)"
            " VALUES ('wakes', ?, '', 'monitor', '', -1, 1, 0)",  # even by one: only budget hold days
            ("alice",),
        ),
    ):
        with pytest.raises(PostgresPermissionDenied, match=REFUSED):
            alice.execute(statement, params)
    assert sorted(counter_totals(owner, "wakes", None).items()) == [
        (("alice", "hook", ""), 2),
        (("bob", "channel", ""), 1),
    ]
    # PUBLIC may not call it: a role the store never mapped has no EXECUTE.
    assert not owner.execute(
        "SELECT has_function_privilege('public', 'bridge_count(text, text, text, text)', 'EXECUTE')"
    ).fetchone()[0]
