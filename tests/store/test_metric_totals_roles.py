"""Issue 34: on PostgreSQL with per-agent roles, an agent's role reads its own agent's running
totals (its listener's textfile adds them up) and no other agent's, and writes only its own
agent's budget hold days: prune, as the store's owner, folds every other figure into them. On a real PostgreSQL server."""

import pytest

from dispatcher.store import open_store, write_transaction
from dispatcher.store.errors import PostgresPermissionDenied
from dispatcher.store.metrics import attempt_counts, budget_hold_days, record_budget_hold

_TOTAL = (
    "INSERT INTO metric_totals (metric, agent, host, label, detail, bucket, count, seconds)"
    " VALUES ('attempts', ?, 'h', 'failed', 'exit_nonzero', -1, ?, 0)"
)


# No right at all (UPDATE, DELETE), or a row the policy does not admit (an INSERT of a count).
REFUSED = "permission denied|violates row-level security policy"


@pytest.fixture
def store(postgres_url, agent_role):
    alice_url = agent_role(postgres_url, "alice")
    owner = open_store(postgres_url)
    alice = open_store(alice_url)
    yield owner, alice
    alice.close()
    owner.close()


def test_an_agents_role_reads_its_own_totals_only_and_records_only_its_budget_holds(store):
    owner, alice = store
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
