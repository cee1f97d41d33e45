"""Migration 12: conversation moves made before it are credited as the old evidence rule read
them, to the attempt of the acting agent running in that conversation at the time; nothing else is."""

from dispatcher.store import open_store

T0 = 1_800_000_000.0


def test_the_moves_the_old_rule_counted_are_marked_as_the_attempts(tmp_path):
    db = tmp_path / "bridge.db"
    old = open_store(db, target_version=11)
    conv = old.execute(
        "INSERT INTO conversations (initiator, recipient, goal, state, max_turns, created_at, updated_at,"
        " expires_at) VALUES ('kimi', 'claude', 'g', 'active', 6, ?, ?, ?)",
        (T0, T0, T0 + 3600),
    ).lastrowid
    review = old.execute(
        "INSERT INTO messages (sender, recipient, kind, text, created_at, conversation_id)"
        " VALUES ('claude', 'kimi', 'result', 'r', ?, ?)",
        (T0, conv),
    ).lastrowid
    old.execute(
        "INSERT INTO dispatch_attempts (message_id, agent, state, started_at, finished_at, supervisor_pid, deadline)"
        " VALUES (?, 'kimi', 'finished', ?, ?, 1, ?)",
        (review, T0 + 10, T0 + 100, T0 + 1000),
    )

    def move(actor: str, at: float) -> int:
        return old.execute(
            "INSERT INTO conversation_transitions (conversation_id, from_state, to_state, actor, reason, at)"
            " VALUES (?, 'active', 'completed', ?, 'complete', ?)",
            (conv, actor, at),
        ).lastrowid

    during = move("kimi", T0 + 50)
    before, after, other_agent = move("kimi", T0 + 5), move("kimi", T0 + 150), move("claude", T0 + 50)
    old.close()
    conn = open_store(db)
    marked = dict(conn.execute("SELECT id, by_attempt FROM conversation_transitions").fetchall())
    conn.close()
    assert marked[during] == review
    assert [marked[i] for i in (before, after, other_agent)] == [None, None, None]
