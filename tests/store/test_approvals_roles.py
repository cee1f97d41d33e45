"""Issue 33, item 2: on PostgreSQL with per-agent roles, an agent's role can ask for approval for an
attempt of its own agent, and can never decide one: not its own, not another agent's, not by
inserting a request decided already. On a real PostgreSQL server (``pg_server``)."""

import pytest
import roles_fixtures

from dispatcher.bridge import approvals
from dispatcher.core.errors import BridgeError
from dispatcher.store import approvals as rows
from dispatcher.store.errors import PostgresPermissionDenied

NOW = 1_000_000.0

owner_and_alice = roles_fixtures.owner_and_alice  # (the store, as its owner and as alice's role)


def _task(owner, recipient: str) -> int:
    message_id = owner.execute(
        "INSERT INTO messages (sender, recipient, kind, text, created_at) VALUES ('bob', ?, 'task', 't', ?) RETURNING id",
        (recipient, NOW),
    ).fetchone()[0]
    owner.execute(
        "INSERT INTO dispatch_attempts (message_id, agent, state, started_at, deadline) VALUES (?, ?, 'recorded', ?, ?)",
        (message_id, recipient, NOW, NOW + 3600),
    )
    return int(message_id)


def test_an_agents_role_asks_but_never_decides(owner_and_alice):
    owner, alice = owner_and_alice
    hers, bobs = _task(owner, "alice"), _task(owner, "bob")
    mine = rows.insert_request(
        alice, message_id=hers, agent="alice", tool="Edit", tool_input="{}", now=NOW, expires_at=NOW + 600
    )
    bob_request = rows.insert_request(
        owner,
        message_id=bobs,
        agent="bob",
        tool="Bash",
        tool_input='{"command": "secret"}',
        now=NOW,
        expires_at=NOW + 600,
    )
    # She sees her own agent's requests only (bob's input stays his).
    assert [r["id"] for r in alice.execute("SELECT id FROM approvals").fetchall()] == [mine]
    # Deciding, by any statement, is refused: no UPDATE right on the table at all.
    for statement, target in (
        ("UPDATE approvals SET decision = 'allow_attempt', decided_by = 'alice', decided_at = 1 WHERE id = ?", mine),
        ("UPDATE approvals SET decision = 'allow_once' WHERE id = ?", bob_request),
        ("DELETE FROM approvals WHERE id = ?", mine),
    ):
        with pytest.raises(PostgresPermissionDenied, match="permission denied"):
            alice.execute(statement, (target,))
    with pytest.raises(PostgresPermissionDenied, match="permission denied"):
        rows.decide(alice, mine, "allow_once", "alice", NOW)
    with pytest.raises((PostgresPermissionDenied, BridgeError)):
        approvals.decide(alice, mine, "allow_attempt", "alice", NOW)
    # Nor a request decided already, nor one in another agent's name or for another agent's attempt.
    for statement, params in (
        (
            "INSERT INTO approvals (message_id, agent, tool, input, requested_at, expires_at, decision)"
            " VALUES (?, 'alice', 'Edit', '{}', 1, 2, 'allow_attempt')",
            (hers,),
        ),
        (
            "INSERT INTO approvals (message_id, agent, tool, input, requested_at, expires_at) VALUES (?, 'bob', 'E', '{}', 1, 2)",
            (bobs,),
        ),
        (
            "INSERT INTO approvals (message_id, agent, tool, input, requested_at, expires_at) VALUES (?, 'alice', 'E', '{}', 1, 2)",
            (bobs,),
        ),
    ):
        with pytest.raises(PostgresPermissionDenied, match="permission denied|row-level security"):
            alice.execute(statement, params)
    states = owner.execute("SELECT id, decision FROM approvals ORDER BY id").fetchall()
    assert [tuple(r) for r in states] == [(mine, None), (bob_request, None)]
    # The owner (a person's `agent-bridge approve`) decides.
    assert approvals.decide(owner, mine, "allow_once", "ada", NOW)["id"] == mine
    assert (
        owner.execute("SELECT decision, decided_by FROM approvals WHERE id = ?", (mine,)).fetchone()[0] == "allow_once"
    )
