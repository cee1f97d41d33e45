"""The active-claim rule has a Python form and an SQL form (``dispatcher/store/claims.py``):
on any stored claim and any clock value they give the same answer, and the SQL form is
never NULL, so ``NOT`` of it is the exact complement."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dispatcher.store import open_store
from dispatcher.store.claims import active_claim_sql, claim_is_active
from dispatcher.store.messages import fetch_existing_message, insert_message

NOW = 1_800_000_000.0
# Around NOW (where the answer turns) and anywhere else a float or an integer can be.
instants = st.one_of(
    st.floats(min_value=NOW - 5, max_value=NOW + 5),
    st.sampled_from([NOW, NOW - 1, NOW + 1, 0.0, -0.0]),
    st.floats(allow_nan=False),
    st.integers(min_value=-(2**62), max_value=2**62),
)
claims = st.tuples(
    st.one_of(st.none(), st.sampled_from(["", "claude-41-ab12cd34"]), st.text(max_size=8)),
    st.one_of(st.none(), instants, st.just(float("nan"))),  # SQLite stores NaN as NULL
)


@pytest.fixture(scope="module")
def conn(tmp_path_factory):
    conn = open_store(tmp_path_factory.mktemp("claims") / "bridge.db")
    yield conn
    conn.close()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(claims, min_size=1, max_size=5), now=instants)
def test_the_python_and_the_sql_form_agree_on_generated_rows(conn, rows, now):
    conn.execute("DELETE FROM messages")
    ids = []
    for owner, expires in rows:
        message_id = insert_message(conn, sender="kimi", recipient="claude", text="t", created_at=NOW)
        conn.execute(
            "UPDATE messages SET claim_owner = ?, claim_expires_at = ? WHERE id = ?", (owner, expires, message_id)
        )
        ids.append(message_id)
    in_sql = {
        row[0]: (row[1], row[2])
        for row in conn.execute(
            f"SELECT m.id, {active_claim_sql('m')}, NOT {active_claim_sql('m')} FROM messages AS m",  # noqa: S608 - the rule's own constant fragment
            {"now": now},
        )
    }
    for message_id in ids:
        active = claim_is_active(fetch_existing_message(conn, message_id), now)
        assert in_sql[message_id] == (int(active), int(not active))
