"""Migration 10: the replies the old evidence rule counted are marked as their attempt's, so an
attempt running across the upgrade keeps its evidence; nothing else is."""

from dispatcher.store import open_store

T0 = 1_800_000_000.0


def insert_message(conn, *, sender, recipient, text, kind, created_at, reply_to=None, origin="agent") -> int:
    """A row as a version-7 store holds it (no sent_by_attempt column yet)."""
    return conn.execute(
        "INSERT INTO messages (sender, recipient, kind, text, reply_to, created_at, origin)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        (sender, recipient, kind, text, reply_to, created_at, origin),
    ).lastrowid


def test_the_replies_the_old_rule_counted_are_marked_as_the_attempts(tmp_path):
    db = tmp_path / "bridge.db"
    old = open_store(db, target_version=7)
    task = insert_message(old, sender="kimi", recipient="claude", text="t", kind="task", created_at=T0)
    never_attempted = insert_message(old, sender="kimi", recipient="claude", text="t", kind="task", created_at=T0)
    old.execute(
        "INSERT INTO dispatch_attempts (message_id, agent, state, started_at, supervisor_pid, deadline)"
        " VALUES (?, 'claude', 'spawned', ?, 1, ?)",
        (task, T0 + 10, T0 + 1000),
    )

    def reply(to, sender="claude", recipient="kimi", kind="result", at=T0 + 20, origin="agent"):
        return insert_message(
            old, sender=sender, recipient=recipient, text="r", kind=kind, reply_to=to, created_at=at, origin=origin
        )

    counted = {reply(task), reply(task, kind="task")}
    not_counted = {
        reply(task, at=T0 + 5),  # before the attempt started: a session's
        reply(task, kind="notice"),
        reply(task, origin="system", kind="notice"),
        reply(task, sender="codex"),
        reply(task, recipient="codex"),
        reply(never_attempted),
    }
    old.close()
    conn = open_store(db)
    marked = dict(conn.execute("SELECT id, sent_by_attempt FROM messages WHERE reply_to IS NOT NULL").fetchall())
    assert {i for i, attempt in marked.items() if attempt == task} == counted
    assert all(marked[i] is None for i in not_counted)
    conn.close()
