"""The payload-free inbox summary every wake path announces."""

import sqlite3
import time

from dispatcher.bridge import inbox
from dispatcher.bridge.messages import send_message
from dispatcher.store import open_store
from dispatcher.store.readonly import open_read_only

AGENTS = frozenset({"claude", "kimi", "codex"})


def _send(conn, sender, recipient, text, kind=None):
    return send_message(
        conn, sender=sender, recipient=recipient, text=text, agents=AGENTS, max_body_bytes=65536, kind=kind
    )["id"]


def test_summary_counts_names_and_never_carries_text(tmp_path):
    conn = open_store(tmp_path / "bridge.db")
    a = _send(conn, "kimi", "claude", "SECRET-ONE", kind="task")
    b = _send(conn, "codex", "claude", "SECRET-TWO", kind="notice")
    _send(conn, "claude", "kimi", "not for claude")
    summary = inbox.inbox_summary(conn, "claude", time.time())
    assert (summary.unread, summary.newest_id) == (2, b)
    line = inbox.wake_line(summary, new=True)
    assert line == f"2 new for claude: #{a} from kimi (task), #{b} from codex (notice) — call receive_messages"
    assert "SECRET" not in line and "SECRET" not in repr(summary.as_dict(time.time()))
    assert inbox.inbox_summary(conn, "claude", time.time(), after_id=a).unread == 1
    conn.close()


def test_acknowledged_and_actively_claimed_messages_are_not_waiting(tmp_path):
    conn = open_store(tmp_path / "bridge.db")
    a = _send(conn, "kimi", "claude", "x")
    b = _send(conn, "kimi", "claude", "y")
    now = time.time()
    conn.execute("UPDATE messages SET acknowledged_at = ? WHERE id = ?", (now, a))
    conn.execute("UPDATE messages SET claim_owner = 'w', claim_expires_at = ? WHERE id = ?", (now + 60, b))
    assert inbox.inbox_summary(conn, "claude", now).unread == 0
    assert inbox.wake_line(inbox.inbox_summary(conn, "claude", now)) == ""
    # An expired lease no longer hides it.
    assert inbox.inbox_summary(conn, "claude", now + 120).unread == 1
    conn.close()


def test_a_long_inbox_names_the_first_ten_and_counts_the_rest(tmp_path):
    conn = open_store(tmp_path / "bridge.db")
    for n in range(13):
        _send(conn, "kimi", "claude", f"m{n}")
    line = inbox.wake_line(inbox.inbox_summary(conn, "claude", time.time()))
    assert line.startswith("13 unread for claude: #1 from kimi (note)") and "and 3 more" in line
    conn.close()


def test_read_only_connection_leaves_no_file_and_cannot_write(tmp_path):
    db = tmp_path / "bridge.db"
    assert open_read_only(db) is None
    conn = open_store(db)
    _send(conn, "kimi", "claude", "x")
    conn.close()
    before = sorted(p.name for p in tmp_path.iterdir())
    ro = open_read_only(db)
    assert inbox.inbox_summary(ro, "claude", time.time()).unread == 1
    try:
        ro.execute("DELETE FROM messages")
    except sqlite3.Error as exc:
        assert "readonly" in str(exc).replace(" ", "").lower() or "query_only" in str(exc).lower()
    else:
        raise AssertionError("a read-only connection wrote")
    ro.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_live_read_only_connection_sees_later_commits(tmp_path):
    db = tmp_path / "bridge.db"
    open_store(db).close()
    ro = open_read_only(db, live=True)
    assert inbox.inbox_summary(ro, "claude", time.time()).unread == 0
    conn = open_store(db)
    _send(conn, "kimi", "claude", "x")
    assert inbox.inbox_summary(ro, "claude", time.time()).unread == 1
    conn.close()
    ro.close()
