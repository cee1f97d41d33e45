"""Per-agent PostgreSQL roles check what a write acts on, not only who acts: alice's role (set up
by ``agent-bridge db-role``) sends whatever SQL it likes at bob's and carol's work and is refused
with one clear error, nothing changed, while the store's own functions on alice's and bob's roles
still do what an agent's processes do. On a real PostgreSQL server (``pg_server``)."""

import uuid

import psycopg
import pytest
from harness import db_snapshot

from dispatcher.store import open_store
from dispatcher.store.attempts import insert_attempt, record_finish
from dispatcher.store.broadcasts import insert_broadcast
from dispatcher.store.claims import take_claim
from dispatcher.store.conversations import (
    insert_conversation,
    record_transition,
    set_in_flight,
    states_moved_by_attempt,
)
from dispatcher.store.errors import PostgresPermissionDenied
from dispatcher.store.messages import insert_message, waiting_count
from dispatcher.store.sessions import insert_session

NOW = 1_000_000.0
REFUSED = "row-level security|permission denied"


def _message(conn, sender: str, recipient: str, **extra) -> int:
    return insert_message(conn, sender=sender, recipient=recipient, text="private", created_at=NOW, **extra)


def _attempt(conn, message_id: int, agent: str) -> None:
    insert_attempt(
        conn,
        message_id=message_id,
        agent=agent,
        started_at=NOW,
        supervisor_pid=1,
        supervisor_start_time=None,
        deadline=NOW + 600,
        worker_token="t",
        max_cost_usd=1.0,
        permission_level="read",
        host="h",
        lease_expires_at=NOW + 60,
    )


def _conversation(conn, initiator: str, recipient: str) -> int:
    return insert_conversation(
        conn,
        initiator=initiator,
        recipient=recipient,
        goal="g",
        max_turns=4,
        created_at=NOW,
        expires_at=NOW + 600,
        max_cost_usd=None,
    )


@pytest.fixture
def world(postgres_url, agent_role):
    """The owner, alice's and bob's roles, and bob's work: a task carol sent him (no attempt yet),
    one he is working on, his conversation with alice (her task in it, his attempt at it) and with
    carol, his broadcast. Bob's rows are written by bob's role, carol's by the owner (carol has no role)."""
    owner = open_store(postgres_url)
    alice, bob = (open_store(agent_role(postgres_url, name)) for name in ("alice", "bob"))
    rows = {
        "carol_to_bob": _message(owner, "carol", "bob", kind="task"),
        "carol_to_bob_worked": _message(owner, "carol", "bob", kind="task"),
        "bob_to_alice": _message(bob, "bob", "alice", kind="task"),
        "bob_carol_talk": _conversation(owner, "bob", "carol"),
        "alice_bob_talk": _conversation(alice, "alice", "bob"),
        "bob_broadcast": insert_broadcast(bob, sender="bob", dedup_key=None, created_at=NOW),
    }
    rows["alice_task_in_talk"] = _message(alice, "alice", "bob", kind="task", conversation_id=rows["alice_bob_talk"])
    for task in (rows["carol_to_bob_worked"], rows["alice_task_in_talk"]):
        _attempt(bob, task, "bob")
    yield owner, alice, bob, rows, postgres_url
    for conn in (alice, bob, owner):
        conn.close()


def _refused(world, statement: str, parameters: tuple = (), match: str = REFUSED) -> None:
    """alice's statement fails with a permission error and the store is as it was."""
    owner, alice, _, _, url = world
    before = db_snapshot(url)
    with pytest.raises(PostgresPermissionDenied, match=match):
        alice.execute(statement, parameters)
    assert db_snapshot(url) == before


# -- item 4: an attempt only on a message addressed to the role's agent --------------------------
def test_a_role_records_no_attempt_on_another_agents_task_and_the_barrier_still_runs(world):
    owner, alice, bob, rows, _ = world
    forged = (
        "INSERT INTO dispatch_attempts (message_id, agent, state, outcome, started_at, finished_at)"
        " VALUES (?, 'alice', 'finished', 'succeeded', 1, 2)"
    )
    _refused(world, forged, (rows["carol_to_bob"],), match='row-level security policy .*for table "dispatch_attempts"')
    mine = _message(alice, "alice", "bob", kind="task")  # a task she sent is not hers to run either
    _refused(world, forged, (mine,), match="row-level security")
    # Her own attempt cannot be moved onto bob's task, nor given away.
    _attempt(alice, rows["bob_to_alice"], "alice")
    for column, value in (("message_id", rows["carol_to_bob"]), ("agent", "bob"), ("max_cost_usd", 1e9)):
        _refused(
            world,
            f"UPDATE dispatch_attempts SET {column} = ? WHERE message_id = ?",  # noqa: S608 - test's own names
            (value, rows["bob_to_alice"]),
            match="permission denied for table dispatch_attempts",
        )
    # The legitimate paths: bob's barrier records his attempt, alice settles her own.
    _attempt(bob, rows["carol_to_bob"], "bob")
    settled = record_finish(
        alice,
        rows["bob_to_alice"],
        ("finished", ("recorded",)),
        outcome="succeeded",
        exit_code=0,
        error_kind=None,
        finished_at=NOW + 5,
        diagnostics=None,
        ledger={"cost_usd": 0.01},
    )
    assert settled
    agents = owner.execute("SELECT message_id, agent FROM dispatch_attempts ORDER BY message_id").fetchall()
    assert {tuple(r) for r in agents} == {
        (rows["carol_to_bob"], "bob"),
        (rows["carol_to_bob_worked"], "bob"),
        (rows["bob_to_alice"], "alice"),
        (rows["alice_task_in_talk"], "bob"),
    }


# -- item 5: ids are the database's alone ---------------------------------------------------------
@pytest.mark.parametrize(
    ("table", "columns", "values"),
    [
        ("messages", "sender, recipient, text, created_at", "'alice', 'bob', 'x', 1"),
        ("broadcasts", "sender, created_at", "'alice', 1"),
        (
            "conversations",
            "initiator, recipient, goal, state, max_turns, created_at, expires_at, updated_at",
            "'alice', 'bob', 'g', 'active', 4, 1, 2, 1",
        ),
        ("sessions", "agent, role, host, pid, started_at", "'alice', 'interactive', 'h', 1, 1"),
    ],
)
@pytest.mark.parametrize("overriding", ["", " OVERRIDING SYSTEM VALUE"], ids=["plain", "overriding"])
def test_a_role_cannot_choose_ids_and_others_inserts_keep_working(world, table, columns, values, overriding):
    owner, alice, bob, _, _ = world
    upcoming = owner.execute(f"SELECT max(id) + 1 FROM {table}").fetchone()[0] or 1  # noqa: S608 - test's own names
    for ahead in range(3):  # the next ids, which the other agents' inserts would be handed
        _refused(
            world,
            f"INSERT INTO {table} (id, {columns}){overriding} VALUES (?, {values})",  # noqa: S608 - test's own names
            (upcoming + ahead,),
            match=f"permission denied for table {table}",
        )
    # Without an id: hers gets the database's, and bob's send after it too.
    alice.execute(f"INSERT INTO {table} ({columns}) VALUES ({values})")  # noqa: S608 - test's own names
    assert _message(bob, "bob", "alice") > 0


def test_a_role_cannot_move_its_rows_ids(world):
    _, alice, _, rows, _ = world
    session = insert_session(
        alice, agent="alice", role="interactive", host="h", pid=5, start_time=None, client_pid=None, started_at=NOW
    )
    for table, row in (("sessions", session), ("messages", rows["bob_to_alice"])):
        _refused(
            world,
            f"UPDATE {table} SET id = id + 1000 WHERE id = ?",  # noqa: S608 - test's own names
            (row,),
            match=f"permission denied for table {table}",
        )


# -- item 6: a conversation move credited only to the actor's own attempt -------------------------
def test_a_role_cannot_credit_a_move_to_another_agents_attempt(world):
    owner, alice, bob, rows, _ = world
    talk, bobs_attempt = rows["alice_bob_talk"], rows["alice_task_in_talk"]
    move = (
        "INSERT INTO conversation_transitions (conversation_id, from_state, to_state, actor, reason, at, by_attempt)"
        " VALUES (?, 'active', 'completed', 'alice', 'done', 1, ?)"
    )
    _refused(
        world, move, (talk, bobs_attempt), match='row-level security policy .*for table "conversation_transitions"'
    )
    assert states_moved_by_attempt(owner, talk, bobs_attempt) == set()
    # The legitimate paths: bob's worker credits his move to his attempt; alice moves in her name.
    record_transition(
        bob, talk, from_state="active", to_state="blocked", actor="bob", reason="r", at=NOW, by_attempt=bobs_attempt
    )
    record_transition(alice, talk, from_state="blocked", to_state="active", actor="alice", reason="r", at=NOW)
    assert states_moved_by_attempt(owner, talk, bobs_attempt) == {"blocked"}


# -- item 7: unread_mail says whether a message is claimed, never by whom --------------------------
def test_unread_mail_shows_no_claim_owner_and_still_counts_claimed_mail_out(world):
    owner, alice, bob, rows, _ = world
    take_claim(bob, rows["carol_to_bob_worked"], owner="bob-attempt-secret", expires_at=NOW + 60, now=NOW)
    owners = {r[0] for r in alice.execute("SELECT claim_owner FROM unread_mail")}
    assert not any(o and "attempt" in o for o in owners), owners
    assert waiting_count(alice, "bob", NOW)[0] == 2  # carol's two tasks and alice's, one of them claimed
    assert waiting_count(alice, "bob", NOW + 120)[0] == 3  # the claim ran out


# -- the other writes: what a message, a conversation and a row of one's own may point at ---------
def test_a_message_points_only_at_its_senders_own_work(world):
    owner, alice, bob, rows, _ = world
    send = "INSERT INTO messages (sender, recipient, text, created_at, {}) VALUES ('alice', ?, 'x', 1, ?)"
    for column, recipient, target in (
        ("reply_to", "bob", rows["carol_to_bob"]),  # a message between others
        ("conversation_id", "bob", rows["bob_carol_talk"]),  # a conversation between others
        ("conversation_id", "carol", rows["alice_bob_talk"]),  # her own, to someone outside it
        ("broadcast_id", "bob", rows["bob_broadcast"]),  # bob's broadcast
        ("sent_by_attempt", "carol", rows["alice_task_in_talk"]),  # bob's attempt
    ):
        _refused(
            world, send.format(column), (recipient, target), match='row-level security policy .*for table "messages"'
        )
    # A dispatcher's notice answers a message sent to her, and goes to its sender.
    notice = "INSERT INTO messages (sender, recipient, text, created_at, origin, kind, reply_to) VALUES ('alice', ?, 'x', 1, 'system', ?, ?)"
    for recipient, kind, reply in (
        ("carol", "notice", rows["bob_to_alice"]),
        ("bob", "result", rows["bob_to_alice"]),
        ("bob", "notice", None),
    ):
        _refused(world, notice, (recipient, kind, reply), match='row-level security policy .*for table "messages"')
    # The legitimate paths, through the store's own functions.
    _attempt(alice, rows["bob_to_alice"], "alice")
    own_broadcast = insert_broadcast(alice, sender="alice", dedup_key=None, created_at=NOW)
    _message(alice, "alice", "bob", kind="result", reply_to=rows["bob_to_alice"], sent_by_attempt=rows["bob_to_alice"])
    _message(alice, "alice", "bob", kind="notice", conversation_id=rows["alice_bob_talk"])
    _message(alice, "alice", "bob", broadcast_id=own_broadcast)
    _message(alice, "alice", "bob", kind="notice", reply_to=rows["bob_to_alice"], origin="system")
    _message(
        bob, "bob", "alice", kind="result", conversation_id=rows["alice_bob_talk"], reply_to=rows["alice_task_in_talk"]
    )


def test_a_conversations_in_flight_message_is_one_of_its_own(world):
    owner, alice, _, rows, _ = world
    talk = rows["alice_bob_talk"]
    _refused(
        world,
        "UPDATE conversations SET in_flight_message_id = ? WHERE id = ?",
        (rows["carol_to_bob"], talk),
        match='row-level security policy .*for table "conversations"',
    )
    _refused(
        world,
        "INSERT INTO conversations (initiator, recipient, goal, state, max_turns, created_at, expires_at, updated_at,"
        " in_flight_message_id) VALUES ('alice', 'bob', 'g', 'active', 4, 1, 2, 1, ?)",
        (rows["carol_to_bob"],),
        match='row-level security policy .*for table "conversations"',
    )
    set_in_flight(alice, talk, rows["alice_task_in_talk"])
    assert (
        owner.execute("SELECT in_flight_message_id FROM conversations WHERE id = ?", (talk,)).fetchone()[0]
        == (rows["alice_task_in_talk"])
    )


@pytest.mark.parametrize(
    "column",
    ["sender", "recipient", "reply_to", "created_at", "kind", "text", "origin", "conversation_id", "sent_by_attempt"],
)
def test_a_recipient_changes_only_the_claim_and_read_marks_of_its_mail(world, column):
    _, alice, _, rows, _ = world
    _refused(
        world,
        f"UPDATE messages SET {column} = NULL WHERE id = ?",  # noqa: S608 - test's own names
        (rows["bob_to_alice"],),
        match="permission denied for table messages",
    )
    done = alice.execute("UPDATE messages SET acknowledged_at = ? WHERE id = ?", (NOW, rows["bob_to_alice"]))
    assert done.rowcount == 1


@pytest.mark.parametrize(
    "statement",
    [
        *(
            f"DELETE FROM {t}"
            for t in ("messages", "conversations", "conversation_transitions", "dispatch_attempts", "broadcasts")
        ),
        *(
            f"TRUNCATE {t}"
            for t in ("messages", "sessions", "listeners", "dispatch_attempts", "agent_roles", "bridge_schema")
        ),
        "UPDATE agent_roles SET agent_id = 'bob'",
        "INSERT INTO agent_roles (role, agent_id) VALUES (current_user, 'bob')",
        "DELETE FROM agent_roles",
        "UPDATE bridge_schema SET version = 99",
        "UPDATE unread_mail SET recipient = 'alice'",
        "DELETE FROM unread_mail",
        "CREATE TABLE messages_shadow (id bigint)",
        "CREATE VIEW everything AS SELECT * FROM messages",
        "CREATE FUNCTION bridge_agent(text) RETURNS text LANGUAGE sql AS 'SELECT $1'",
        "ALTER TABLE messages DISABLE ROW LEVEL SECURITY",
        "DROP TABLE dispatch_attempts",
        "DROP VIEW unread_mail",
        "DROP POLICY read_own ON messages",
        "CREATE POLICY everything ON messages FOR SELECT USING (true)",
        "CREATE OR REPLACE FUNCTION bridge_agent() RETURNS text LANGUAGE sql AS 'SELECT ''bob'''",
    ],
)
def test_a_role_cannot_delete_truncate_remap_or_change_the_schema(world, statement):
    _refused(world, statement, match="permission denied|must be owner")


def test_no_function_a_role_may_call_answers_for_another_agent(world):
    """One function of the store's runs with its owner's rights, ``bridge_count`` (schema 24: it adds
    one to the caller's own agent's counters only, ``test_metric_totals_roles.py``), and the
    policies' helpers answer only for the caller's own agent: alice asking about bob's work hears "no"."""
    owner, alice, bob, rows, _ = world
    definers = owner.execute(
        "SELECT proname FROM pg_proc WHERE pronamespace = current_schema()::regnamespace AND prosecdef"
    ).fetchall()
    assert [row[0] for row in definers] == ["bridge_count"]
    for function, target in (
        ("bridge_party_to", rows["carol_to_bob"]),
        ("bridge_own_broadcast", rows["bob_broadcast"]),
        ("bridge_own_attempt", rows["carol_to_bob_worked"]),
    ):
        query = f"SELECT {function}(?)"
        assert alice.execute(query, (target,)).fetchone()[0] is False, function
        assert bob.execute(query, (target,)).fetchone()[0] is True, function
    asked_by = "SELECT bridge_asked_by(?, 'carol')"  # the asker is an argument, the asked is always the caller
    assert alice.execute(asked_by, (rows["carol_to_bob"],)).fetchone()[0] is False
    assert bob.execute(asked_by, (rows["carol_to_bob"],)).fetchone()[0] is True


# -- an existing store: its roles are narrowed by the migration ----------------------------------
_SCHEMA_16_GRANTS = (  # what `db-role` granted at schema 16
    "GRANT USAGE ON SCHEMA {schema} TO {role}",
    "GRANT SELECT ON bridge_schema, agent_roles, unread_mail, messages, broadcasts, conversations,"
    " conversation_transitions, dispatch_attempts, sessions, session_watches, listeners TO {role}",
    "GRANT INSERT, UPDATE ON dispatch_attempts, sessions, listeners TO {role}",
    "GRANT INSERT ON messages, conversations, broadcasts, conversation_transitions, session_watches TO {role}",
    "GRANT UPDATE (claim_owner, claim_expires_at, delivered_at, acknowledged_at) ON messages TO {role}",
    "GRANT UPDATE (state, turn_count, in_flight_message_id, updated_at) ON conversations TO {role}",
    "GRANT DELETE ON sessions, session_watches, listeners TO {role}",
)


def _grants(conn, role: str) -> set[tuple]:
    tables = "SELECT table_name, privilege_type FROM information_schema.role_table_grants WHERE grantee = ?"
    columns = (
        "SELECT table_name, column_name, privilege_type FROM information_schema.role_column_grants WHERE grantee = ?"
    )
    return {tuple(r) for r in conn.execute(tables, (role,))} | {tuple(r) for r in conn.execute(columns, (role,))}


def test_upgrading_a_store_narrows_the_roles_it_had(new_postgres_store, postgres_database, agent_role):
    url = new_postgres_store()
    schema, role = url.rsplit("%3D", 1)[1], f"ab_old_{uuid.uuid4().hex[:8]}"
    owner = open_store(url, target_version=16)
    with psycopg.connect(postgres_database, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN")
    try:
        for grant in _SCHEMA_16_GRANTS:
            owner.execute(grant.format(schema=schema, role=role))
        owner.execute("INSERT INTO agent_roles (role, agent_id) VALUES (?, 'alice')", (role,))
        # Written as schema 16 had it: today's insert names columns (traceparent, 22) it lacks.
        ((carol_to_bob,),) = owner.execute(
            "INSERT INTO messages (sender, recipient, kind, text, created_at)"
            " VALUES ('carol', 'bob', 'task', 'private', ?) RETURNING id",
            (NOW,),
        ).fetchall()
        owner.close()
        owner = open_store(url)  # the owner's next start migrates
        alice = open_store(url.replace("postgres@", f"{role}@", 1))
        try:
            with pytest.raises(PostgresPermissionDenied, match="row-level security"):
                _attempt(alice, carol_to_bob, "alice")
            with pytest.raises(PostgresPermissionDenied, match="permission denied for table messages"):
                alice.execute(
                    "INSERT INTO messages (id, sender, recipient, text, created_at) VALUES (99, 'alice', 'bob', 'x', 1)"
                )
            assert _message(alice, "alice", "bob") > carol_to_bob  # and she still sends
            fresh = agent_role(url, "alice").split("//")[1].split("@")[0]
            assert _grants(owner, role) == _grants(owner, fresh)
        finally:
            alice.close()
    finally:
        owner.close()
        with psycopg.connect(postgres_database, autocommit=True) as admin:
            admin.execute(f"DROP OWNED BY {role}")
            admin.execute(f"DROP ROLE {role}")
