"""The row rules, one case each: what an active claim is (in Python and in SQL), the lease cap,
dedup conflicts, reserved keys, and how stored times are shown."""

import math

import pytest

from dispatcher.bridge.messages import receive_messages
from dispatcher.bridge.rows import find_dedup, message_view, message_views
from dispatcher.core.clock import iso
from dispatcher.core.errors import BridgeError
from dispatcher.core.validation import check_dedup_key
from dispatcher.store import open_store
from dispatcher.store.claims import LEASE_CAP_SECONDS, active_claim_sql, claim_is_active
from dispatcher.store.messages import (
    cap_far_lease,
    cap_far_leases,
    fetch_message,
    insert_message,
    unclaimed_unread,
    waiting_count,
)

pytestmark = pytest.mark.both_backends

NOW = 1_800_000_000.0


def _message(conn, owner=None, expires=None, recipient="claude", **extra) -> int:
    message_id = insert_message(conn, sender="kimi", recipient=recipient, text="t", created_at=NOW, **extra)
    conn.execute("UPDATE messages SET claim_owner = ?, claim_expires_at = ? WHERE id = ?", (owner, expires, message_id))
    return message_id


CLAIMS = [
    # (owner, expires, active at NOW)
    (None, None, False),
    (None, NOW + 60, False),  # an expiry without an owner is no claim
    ("w", None, False),  # an owner without an expiry is no claim either
    ("w", NOW - 1, False),
    ("w", NOW, False),  # expires exactly now: over
    ("w", NOW + 1, True),
    ("w", math.inf, True),
    ("w", -math.inf, False),
    ("w", math.nan, False),  # SQLite stores NaN as NULL
]


@pytest.mark.parametrize(("owner", "expires", "active"), CLAIMS)
def test_claim_is_active_in_python_and_in_sql_alike(conn, owner, expires, active):
    message_id = _message(conn, owner, expires)
    assert claim_is_active(fetch_message(conn, message_id), NOW) is active
    sql_active, sql_not_active = conn.execute(
        f"SELECT {active_claim_sql('m')}, NOT {active_claim_sql('m')} FROM messages AS m WHERE m.id = :id",
        {"id": message_id, "now": NOW},
    ).fetchone()
    assert (bool(sql_active), bool(sql_not_active)) == (active, not active)


def test_the_waiting_count_from_the_view_agrees_with_the_inbox_rows(conn):
    """``waiting_count`` (the payload-free view ``who`` and the status line read) and
    ``unclaimed_unread`` (the inbox's own rows) are two forms of one rule: unacknowledged, and
    held by no active claim. Every claim case above, acknowledged or not, for one recipient; and
    a message to someone else, which neither counts."""
    for created, (owner, expires, _active) in enumerate(CLAIMS):
        for acknowledged in (None, NOW):
            message_id = _message(conn, owner, expires)
            conn.execute(
                "UPDATE messages SET created_at = ?, acknowledged_at = ? WHERE id = ?",
                (NOW - 100 + created, acknowledged, message_id),
            )
    _message(conn, recipient="kimi")
    rows = unclaimed_unread(conn, "claude", NOW, after_id=0, named=0)
    assert waiting_count(conn, "claude", NOW) == (rows.unread, rows.oldest_created_at)
    assert rows.unread == sum(1 for owner, expires, active in CLAIMS if not active)


@pytest.mark.parametrize(
    ("expires", "capped"),
    [
        (NOW + LEASE_CAP_SECONDS, False),
        (NOW + LEASE_CAP_SECONDS + 1, True),
        (math.inf, True),
        (None, False),
        (1e300, True),
        (-1e300, False),
    ],
)
def test_a_lease_past_the_cap_is_written_down_to_it(conn, expires, capped):
    message_id = _message(conn, "w", expires)
    row = cap_far_lease(conn, fetch_message(conn, message_id), NOW)
    assert row["claim_expires_at"] == (NOW + LEASE_CAP_SECONDS if capped else expires)
    assert fetch_message(conn, message_id)["claim_expires_at"] == row["claim_expires_at"]


def test_an_inbox_has_its_far_leases_capped_and_nobody_elses(conn):
    mine, acknowledged, theirs = (
        _message(conn, "w", math.inf),
        _message(conn, "w", math.inf),
        _message(conn, "w", math.inf, recipient="kimi"),
    )
    conn.execute("UPDATE messages SET acknowledged_at = ? WHERE id = ?", (NOW, acknowledged))
    cap_far_leases(conn, "claude", NOW)
    stored = {i: fetch_message(conn, i)["claim_expires_at"] for i in (mine, acknowledged, theirs)}
    assert stored == {mine: NOW + LEASE_CAP_SECONDS, acknowledged: math.inf, theirs: math.inf}


@pytest.mark.sqlite_only("it holds SQLite's one write lock from a second connection to the file")
def test_cap_far_leases_is_a_plain_read_when_nothing_is_far(conn, tmp_path):
    _message(conn, "w", NOW + 60)
    writer = open_store(tmp_path / "bridge.db")
    try:
        writer.execute("BEGIN IMMEDIATE")  # holds the write lock
        conn.execute("PRAGMA busy_timeout = 0")
        cap_far_leases(conn, "claude", NOW)  # would fail with "database is locked" if it wrote
        writer.execute("ROLLBACK")
    finally:
        writer.close()


@pytest.mark.parametrize("shown", [0, 1, 2], ids=["nothing-else-shown", "one-shown", "own-far-lease-shown"])
def test_a_receive_caps_a_far_lease_whether_or_not_it_shows_anything(conn, shown):
    hidden = _message(conn, "w", math.inf)  # another process's lease from a clock far ahead
    others = [_message(conn) for _ in range(min(shown, 1))]
    if shown == 2:
        others.append(_message(conn, "me", 1e300))  # this process's own lease, far ahead too
    answer = receive_messages(conn, agent="claude", worker_id="me", now=NOW)
    assert [m["id"] for m in answer["messages"]] == others
    assert fetch_message(conn, hidden)["claim_expires_at"] == NOW + LEASE_CAP_SECONDS
    if shown == 2:  # the answer shows the lease as now stored, capped
        assert answer["messages"][-1]["claim_expires_at"] == iso(NOW + LEASE_CAP_SECONDS)


@pytest.mark.sqlite_only("it traces SQLite's statements")
def test_a_receive_with_no_far_lease_is_one_statement(conn):
    _message(conn, "w", NOW + 60)
    shown = _message(conn)
    receive_messages(conn, agent="claude", worker_id="me", now=NOW)  # delivers it: a write, once
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    assert [m["id"] for m in receive_messages(conn, agent="claude", worker_id="me", now=NOW)["messages"]] == [shown]
    conn.set_trace_callback(None)
    assert len(statements) == 1, statements
    plan = " ".join(r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {statements[0]}"))
    assert "USING INDEX messages_claimed" in plan, plan  # the far-lease probe inside it, by index


def test_a_view_reads_its_columns_by_name_whatever_their_order(conn):
    message_id = _message(conn, "me", NOW + 60, kind="task")
    stored = message_view(fetch_message(conn, message_id), "me", NOW)
    reordered = conn.execute(
        "SELECT 7 AS other, claim_expires_at, claim_owner, response_deadline, created_at, broadcast_id, conversation_id,"
        " reply_to, origin, kind, text, recipient, sender, id FROM messages WHERE id = ?",
        (message_id,),
    ).fetchall()
    assert message_views(reordered, "me", NOW) == [stored]
    assert stored["owned_by_current_worker"] is True and stored["kind"] == "task"


def test_a_dedup_key_to_another_recipient_is_a_conflict(conn):
    first = _message(conn, dedup_key="k")
    assert find_dedup(conn, "kimi", "k")["id"] == first
    assert find_dedup(conn, "kimi", "k", recipient="claude")["id"] == first
    with pytest.raises(BridgeError) as refused:
        find_dedup(conn, "kimi", "k", recipient="codex")
    assert refused.value.code == "dedup_conflict" and f"#{first} to claude" in refused.value.message
    assert find_dedup(conn, "claude", "k", recipient="codex") is None  # keys are per sender


@pytest.mark.parametrize("key", ["agent-bridge:", "agent-bridge:dispatch-notice:3", "AGENT-BRIDGE:x"])
def test_the_system_key_namespace_is_reserved(key):
    with pytest.raises(BridgeError) as refused:
        check_dedup_key(key)
    assert refused.value.code == "invalid_dedup_key" and "reserved" in refused.value.message


@pytest.mark.parametrize("key", ["agent-bridge", "my-agent-bridge:x", "task-1"])
def test_other_keys_are_fine(key):
    assert check_dedup_key(key) == key


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (None, None),
        (0, "1970-01-01T00:00:00.000Z"),
        (NOW, "2027-01-15T08:00:00.000Z"),
        (1e300, None),
        (-1e300, None),
        (math.inf, None),
        (-math.inf, None),
        (math.nan, None),
        ("soon", None),
        (True, None),
        (253402300800, None),
    ],
)
def test_iso_shows_what_a_calendar_can_and_none_otherwise(value, shown):
    assert iso(value) == shown


@pytest.mark.sqlite_only("it reads SQLite's query plan")
def test_cap_far_leases_finds_far_leases_by_index_not_by_reading_every_unread_message(conn):
    for _ in range(50):
        _message(conn)  # unread, unclaimed: what a receive must not walk through on every call
    _message(conn, "w", math.inf)
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    cap_far_leases(conn, "claude", NOW)
    conn.set_trace_callback(None)
    plans = {sql: " ".join(r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}")) for sql in statements}
    assert plans
    assert all("USING INDEX messages_claimed" in plan for plan in plans.values()), plans
