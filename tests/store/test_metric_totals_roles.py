"""Issue 34: on PostgreSQL with per-agent roles, an agent's role reads its own agent's running
totals (its listener's textfile adds them up) and no other agent's, and writes none: only prune,
as the store's owner, folds figures into them. On a real PostgreSQL server."""

import pytest

from dispatcher.store import open_store, write_transaction
from dispatcher.store.errors import PostgresPermissionDenied
from dispatcher.store.metrics import attempt_counts

_TOTAL = (
    "INSERT INTO metric_totals (metric, agent, host, label, detail, bucket, count, seconds)"
    " VALUES ('attempts', ?, 'h', 'failed', 'exit_nonzero', -1, ?, 0)"
)


@pytest.fixture
def store(postgres_url, agent_role):
    alice_url = agent_role(postgres_url, "alice")
    owner = open_store(postgres_url)
    alice = open_store(alice_url)
    yield owner, alice
    alice.close()
    owner.close()


def test_an_agents_role_reads_its_own_totals_only_and_writes_none(store):
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
        with pytest.raises(PostgresPermissionDenied, match="permission denied"):
            alice.execute(statement, params)
    assert sorted((r[0], r[5]) for r in attempt_counts(owner, None, None)) == [("alice", 3), ("bob", 5)]
