"""Per-agent PostgreSQL roles, enforced by the server: a role set up by ``agent-bridge db-role``
writes and reads only as its agent whatever SQL it sends; an unmapped role sees nothing; an
agent's role never migrates; the owner still prunes and runs doctor; the command's refusals and
its idempotence. On a real PostgreSQL server (``pg_server``)."""

import json
import uuid

import psycopg
import pytest
from dispatch_harness import cli
from harness import bridge_env, write_config

from dispatcher.core.errors import BridgeError
from dispatcher.ops.db_role import db_role
from dispatcher.store import open_store
from dispatcher.store.errors import PostgresPermissionDenied
from dispatcher.store.messages import waiting_count
from dispatcher.store.roles import acting_agent

NOW = 1_000_000.0


def _insert(conn, sender: str, recipient: str, text: str = "private text", **extra) -> int:
    columns = {"sender": sender, "recipient": recipient, "text": text, "created_at": NOW, **extra}
    names = ", ".join(columns)
    marks = ", ".join("?" * len(columns))
    return int(
        conn.execute(
            f"INSERT INTO messages ({names}) VALUES ({marks}) RETURNING id", tuple(columns.values())
        ).fetchone()[0]  # noqa: S608 - test's own column names
    )


@pytest.fixture
def store(postgres_url, agent_role):
    """The owner's connection, alice's role's and some of bob's and carol's rows (written by the owner)."""
    alice_url = agent_role(postgres_url, "alice")
    owner = open_store(postgres_url)
    rows = {
        "bob_to_carol": _insert(owner, "bob", "carol"),
        "carol_to_bob": _insert(owner, "carol", "bob"),
        "bob_to_alice": _insert(owner, "bob", "alice"),
    }
    owner.execute(
        "INSERT INTO sessions (agent, role, host, pid, started_at) VALUES ('bob', 'interactive', 'h', 1, ?)", (NOW,)
    )
    alice = open_store(alice_url)
    yield owner, alice, rows
    alice.close()
    owner.close()


def test_a_role_acts_as_its_agent_and_reads_only_its_own_mail(store):
    owner, alice, rows = store
    assert acting_agent(alice) == "alice" and acting_agent(owner) is None
    mine = _insert(alice, "alice", "bob")
    seen = {row[0] for row in alice.execute("SELECT id FROM messages")}
    assert seen == {rows["bob_to_alice"], mine}  # bob<->carol is not there, not even its ids
    assert alice.execute("SELECT id FROM messages WHERE sender = 'bob' AND recipient = 'carol'").fetchall() == []
    # Her own inbox: she claims and acknowledges what was sent to her.
    claimed = alice.execute(
        "UPDATE messages SET claim_owner = 'w', claim_expires_at = ?, acknowledged_at = ? WHERE id = ?",
        (NOW + 60, NOW, rows["bob_to_alice"]),
    )
    assert claimed.rowcount == 1


@pytest.mark.parametrize(
    ("statement", "parameters"),
    [
        ("INSERT INTO messages (sender, recipient, text, created_at) VALUES ('bob', 'carol', 'forged', 1)", ()),
        ("INSERT INTO sessions (agent, role, host, pid, started_at) VALUES ('bob', 'interactive', 'h', 2, 1)", ()),
        ("INSERT INTO listeners (agent, pid, host, runtime_dir, started_at) VALUES ('bob', 2, 'h', '/r', 1)", ()),
        (
            "INSERT INTO conversations (initiator, recipient, goal, state, max_turns, created_at, expires_at,"
            " updated_at) VALUES ('bob', 'carol', 'g', 'active', 4, 1, 2, 1)",
            (),
        ),
        ("INSERT INTO broadcasts (sender, created_at) VALUES ('bob', 1)", ()),
        ("DELETE FROM messages", ()),
    ],
    ids=["message_as_bob", "session_as_bob", "listener_as_bob", "conversation_as_bob", "broadcast_as_bob", "delete"],
)
def test_a_role_cannot_write_as_another_agent(store, statement, parameters):
    owner, alice, _ = store
    before = owner.execute("SELECT (SELECT count(*) FROM messages), (SELECT count(*) FROM sessions)").fetchone()
    with pytest.raises(PostgresPermissionDenied, match="row-level security|permission denied"):
        alice.execute(statement, parameters)
    after = owner.execute("SELECT (SELECT count(*) FROM messages), (SELECT count(*) FROM sessions)").fetchone()
    assert tuple(after) == tuple(before)


def test_a_role_cannot_change_another_agents_rows(store):
    owner, alice, rows = store
    sent = _insert(alice, "alice", "bob")
    # bob's inbox (a row she sent included): acknowledge, claim, release touch nothing.
    for target in (rows["carol_to_bob"], sent):
        done = alice.execute("UPDATE messages SET acknowledged_at = ?, claim_owner = 'x' WHERE id = ?", (NOW, target))
        assert done.rowcount == 0
    assert alice.execute("UPDATE sessions SET renewed_at = 1 WHERE agent = 'bob'").rowcount == 0
    assert alice.execute("DELETE FROM sessions WHERE agent = 'bob'").rowcount == 0
    # A row of her own cannot be handed to bob either (neither a session's agent nor a message's
    # recipient is a column she may update).
    own = alice.execute(
        "INSERT INTO sessions (agent, role, host, pid, started_at) VALUES ('alice', 'interactive', 'h', 3, 1) RETURNING id"
    ).fetchone()[0]
    with pytest.raises(PostgresPermissionDenied, match="permission denied"):
        alice.execute("UPDATE sessions SET agent = 'bob' WHERE id = ?", (own,))
    with pytest.raises(PostgresPermissionDenied, match="permission denied"):
        alice.execute("UPDATE messages SET recipient = 'bob' WHERE id = ?", (rows["bob_to_alice"],))
    unread = owner.execute("SELECT count(*) FROM messages WHERE acknowledged_at IS NULL").fetchone()[0]
    assert unread == 4
    # Her own conversation with bob: she moves it, but records no move in his name.
    conversation = alice.execute(
        "INSERT INTO conversations (initiator, recipient, goal, state, max_turns, created_at, expires_at, updated_at)"
        " VALUES ('alice', 'bob', 'g', 'active', 4, 1, 2, 1) RETURNING id"
    ).fetchone()[0]
    move = "INSERT INTO conversation_transitions (conversation_id, to_state, actor, reason, at) VALUES (?, 'blocked', ?, 'r', 1)"
    alice.execute(move, (conversation, "alice"))
    with pytest.raises(PostgresPermissionDenied, match="row-level security"):
        alice.execute(move, (conversation, "bob"))
    # Rows of her own, in what they say rather than where they stand: no right to change them.
    for statement, row in (
        ("UPDATE messages SET text = 'rewritten', sender = 'carol' WHERE id = ?", rows["bob_to_alice"]),
        ("UPDATE conversations SET max_turns = 1000 WHERE id = ?", conversation),
    ):
        with pytest.raises(PostgresPermissionDenied, match="permission denied"):
            alice.execute(statement, (row,))


def test_a_role_reads_its_agents_attempts_and_those_of_the_tasks_it_sent(store):
    owner, alice, rows = store
    task = _insert(alice, "alice", "bob", kind="task")
    for message_id, agent in ((task, "bob"), (rows["bob_to_alice"], "alice"), (rows["carol_to_bob"], "bob")):
        owner.execute(
            "INSERT INTO dispatch_attempts (message_id, agent, state, started_at) VALUES (?, ?, 'recorded', 1)",
            (message_id, agent),
        )
    seen = {row[0] for row in alice.execute("SELECT message_id FROM dispatch_attempts")}
    assert seen == {task, rows["bob_to_alice"]}  # bob's attempt at carol's task is not hers to see
    assert alice.execute("UPDATE dispatch_attempts SET state = 'spawned' WHERE message_id = ?", (task,)).rowcount == 0


def test_presence_and_waiting_counts_stay_readable_without_the_mail(store):
    """`who` shows every agent's sessions and how much waits for it; the texts stay private."""
    _, alice, _ = store
    assert [tuple(r) for r in alice.execute("SELECT agent, pid FROM sessions")] == [("bob", 1)]
    assert waiting_count(alice, "bob", NOW)[0] == 1
    assert waiting_count(alice, "carol", NOW)[0] == 1
    assert list(alice.execute("SELECT * FROM unread_mail LIMIT 1").fetchone().keys()) == [
        "recipient",
        "created_at",
        "claim_owner",
        "claim_expires_at",
    ]


def test_an_unmapped_role_sees_and_writes_nothing(store, postgres_url):
    owner, alice, _ = store
    role = alice.execute("SELECT current_user").fetchone()[0]
    owner.execute("DELETE FROM agent_roles WHERE role = ?", (role,))  # privileges kept, mapping gone
    assert acting_agent(alice) is None
    for table in ("messages", "sessions", "listeners", "conversations", "dispatch_attempts", "broadcasts"):
        assert alice.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == 0, table  # noqa: S608 - test's own names
    with pytest.raises(PostgresPermissionDenied):
        _insert(alice, "alice", "bob")


def test_a_role_without_privileges_is_refused_in_one_line(postgres_url, agent_role):
    url = agent_role(postgres_url, "alice")
    role = url.split("//")[1].split("@")[0]
    db_role(postgres_url, "alice", role, revoke=True)  # the store's schema is out of its sight now
    with pytest.raises(BridgeError) as refused:
        open_store(url).close()
    assert refused.value.code == "schema_needs_owner" and f"db-role AGENT --role {role}" in refused.value.message
    owner = open_store(postgres_url)
    try:  # it sees the schema again, but may not read the store's tables
        owner.execute(f"GRANT USAGE ON SCHEMA {postgres_url.rsplit('%3D', 1)[1]} TO {role}")
    finally:
        owner.close()
    with pytest.raises(BridgeError) as refused:
        open_store(url).close()
    assert refused.value.code == "store_permission_denied" and "agent-bridge db-role" in refused.value.message
    assert "\n" not in refused.value.message


def test_an_agent_role_never_migrates_and_says_who_must(new_postgres_store, postgres_database):
    url = new_postgres_store()
    open_store(url, target_version=15).close()  # a store of the version before per-agent roles
    role = f"ab_old_{uuid.uuid4().hex[:8]}"
    schema = url.rsplit("%3D", 1)[1]
    with psycopg.connect(postgres_database, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN")
        admin.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
        admin.execute(f"GRANT SELECT ON {schema}.bridge_schema TO {role}")
    try:
        with pytest.raises(BridgeError) as refused:
            open_store(url.replace("postgres@", f"{role}@", 1)).close()
        assert refused.value.code == "schema_needs_owner"
        assert "version 15" in refused.value.message and "owner" in refused.value.message
        assert "\n" not in refused.value.message
        owner = open_store(url, target_version=15)
        assert owner.execute("SELECT version FROM bridge_schema").fetchone()[0] == 15  # nothing was written
        owner.close()
    finally:
        with psycopg.connect(postgres_database, autocommit=True) as admin:
            admin.execute(f"DROP OWNED BY {role}")
            admin.execute(f"DROP ROLE {role}")


def test_the_owner_still_prunes_and_runs_doctor(store, postgres_url, tmp_path):
    owner, alice, rows = store
    alice.execute("UPDATE messages SET acknowledged_at = ? WHERE id = ?", (NOW, rows["bob_to_alice"]))
    owner.execute("UPDATE messages SET acknowledged_at = ?", (NOW,))
    env = {**bridge_env(tmp_path, write_config(tmp_path / "config.json")), "AGENT_BRIDGE_DB": postgres_url}
    pruned = cli(env, "prune", "--older-than", "1s")
    assert pruned.returncode == 0, pruned.stderr
    assert json.loads(pruned.stdout)["messages"] == 3
    assert owner.execute("SELECT count(*) FROM messages").fetchone()[0] == 0
    doctor = cli(env, "doctor", "--json")
    store_ok = [f for f in json.loads(doctor.stdout)["findings"] if f["code"] == "store_ok"]
    assert len(store_ok) == 1, doctor.stdout


# -- the command -------------------------------------------------------------------------------
def _privileges(conn, role: str) -> list[tuple]:
    """(table, column or None, privilege) of every table and column privilege the role holds."""
    return [
        tuple(r)
        for r in conn.execute(
            "SELECT table_name, NULL, privilege_type FROM information_schema.role_table_grants WHERE grantee = ?"
            " UNION SELECT table_name, column_name, privilege_type FROM information_schema.role_column_grants"
            " WHERE grantee = ? ORDER BY 1, 2, 3",
            (role, role),
        )
    ]


def test_db_role_is_idempotent_and_remaps_and_revokes(postgres_url, agent_role):
    url = agent_role(postgres_url, "alice")
    role = url.split("//")[1].split("@")[0]
    owner = open_store(postgres_url)
    try:
        granted = _privileges(owner, role)
        assert ("messages", "sender", "INSERT") in granted and ("messages", "id", "INSERT") not in granted
        assert ("messages", None, "DELETE") not in granted
        again = db_role(postgres_url, "alice", role)
        assert (again["created"], again["was_agent"], again["url"]) == (False, "alice", url)
        assert _privileges(owner, role) == granted
        assert owner.execute("SELECT count(*) FROM agent_roles WHERE role = ?", (role,)).fetchone()[0] == 1
        moved = db_role(postgres_url, "bob", role)
        assert moved["was_agent"] == "alice"
        assert owner.execute("SELECT agent_id FROM agent_roles WHERE role = ?", (role,)).fetchone()[0] == "bob"
        revoked = db_role(postgres_url, "bob", role, revoke=True)
        assert revoked == {"role": role, "agent": "bob", "revoked": True}
        assert _privileges(owner, role) == []
        assert db_role(postgres_url, "bob", role, revoke=True)["revoked"] is False
    finally:
        owner.close()


def test_db_role_refuses_a_sqlite_store_and_a_bad_name(tmp_path, postgres_url):
    env = bridge_env(tmp_path, write_config(tmp_path / "config.json"))
    on_sqlite = cli(env, "db-role", "alice")
    assert on_sqlite.returncode == 2 and on_sqlite.stderr.startswith("agent-bridge: not_postgres: per-agent roles")
    bad_agent = cli({**env, "AGENT_BRIDGE_DB": postgres_url}, "db-role", "Alice!")
    assert bad_agent.returncode == 2 and "usage_error" in bad_agent.stderr and "agent id" in bad_agent.stderr
    bad_role = cli({**env, "AGENT_BRIDGE_DB": postgres_url}, "db-role", "alice", "--role", 'x"; DROP TABLE messages')
    assert bad_role.returncode == 2 and "usage_error" in bad_role.stderr
    assert len(on_sqlite.stderr.splitlines()) == len(bad_agent.stderr.splitlines()) == 1


def test_db_role_run_by_an_agents_role_is_refused_and_changes_nothing(postgres_url, agent_role):
    alice_url, bob_url = agent_role(postgres_url, "alice"), agent_role(postgres_url, "bob")
    bob = bob_url.split("//")[1].split("@")[0]
    never = f"ab_never_{uuid.uuid4().hex[:8]}"
    with pytest.raises(BridgeError) as refused:
        db_role(alice_url, "carol", never)
    assert refused.value.code == "role_not_created" and f"CREATE ROLE {never} LOGIN" in refused.value.message
    with pytest.raises(BridgeError) as refused:
        db_role(alice_url, "carol", bob)
    assert refused.value.code == "not_store_owner" and "owns the store" in refused.value.message
    owner = open_store(postgres_url)
    try:
        assert owner.execute("SELECT agent_id FROM agent_roles WHERE role = ?", (bob,)).fetchone()[0] == "bob"
        assert owner.execute("SELECT count(*) FROM pg_roles WHERE rolname = ?", (never,)).fetchone()[0] == 0
    finally:
        owner.close()


def test_an_owner_that_is_not_a_superuser_sets_roles_up(postgres_database):
    """The deployment README describes: a `bridge` role with CREATEROLE owns the store's schema."""
    suffix = uuid.uuid4().hex[:8]
    owner_role, agent = f"ab_owner_{suffix}", f"ab_alice_{suffix}"
    with psycopg.connect(postgres_database, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {owner_role} LOGIN CREATEROLE")
        admin.execute(f"CREATE SCHEMA s_{suffix} AUTHORIZATION {owner_role}")
    owner_url = f"{postgres_database.replace('postgres@', f'{owner_role}@', 1)}?options=-csearch_path%3Ds_{suffix}"
    try:
        made = db_role(owner_url, "alice", agent)  # creates the schema first, as its owner
        assert made["created"] is True
        alice = open_store(str(made["url"]))
        try:
            assert acting_agent(alice) == "alice"
            _insert(alice, "alice", "bob")
            with pytest.raises(PostgresPermissionDenied, match="row-level security"):
                _insert(alice, "bob", "alice")
        finally:
            alice.close()
    finally:
        with psycopg.connect(postgres_database, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA s_{suffix} CASCADE")
            for role in (agent, owner_role):
                admin.execute(f"DROP OWNED BY {role}")
                admin.execute(f"DROP ROLE {role}")


def test_db_role_refuses_a_store_schema_every_role_may_create_in(postgres_url, postgres_database, agent_role):
    """A schema open to PUBLIC (`public` on a database from before PostgreSQL 15) would let the
    agent plant a function the owner then runs: refused, nothing changed, until it is closed. A
    CREATE granted to the role itself is taken away."""
    schema, role = postgres_url.rsplit("%3D", 1)[1], f"ab_open_{uuid.uuid4().hex[:8]}"
    open_store(postgres_url).close()
    with psycopg.connect(postgres_database, autocommit=True) as admin:
        admin.execute(f"GRANT CREATE ON SCHEMA {schema} TO PUBLIC")
    with pytest.raises(BridgeError) as refused:
        db_role(postgres_url, "alice", role)
    assert refused.value.code == "store_schema_open"
    assert f"REVOKE CREATE ON SCHEMA {schema} FROM PUBLIC" in refused.value.message
    assert "nothing was changed" in refused.value.message and "\n" not in refused.value.message
    owner = open_store(postgres_url)
    try:
        assert owner.execute("SELECT count(*) FROM pg_roles WHERE rolname = ?", (role,)).fetchone()[0] == 0
        assert owner.execute("SELECT count(*) FROM agent_roles").fetchone()[0] == 0
        owner.execute(f"REVOKE CREATE ON SCHEMA {schema} FROM PUBLIC")
        url = agent_role(postgres_url, "alice")
        granted = url.split("//")[1].split("@")[0]
        owner.execute(f"GRANT CREATE ON SCHEMA {schema} TO {granted}")
        db_role(postgres_url, "alice", granted)
        may_create = "SELECT has_schema_privilege(?, current_schema(), 'CREATE')"
        assert owner.execute(may_create, (granted,)).fetchone()[0] is False
    finally:
        owner.close()
