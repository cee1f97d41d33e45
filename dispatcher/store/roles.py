"""Per-agent database roles on a PostgreSQL store: the login role, its privileges and its entry
in ``agent_roles`` (schema 16), which the row policies read through ``bridge_agent()``.

Run by the store's owner (``agent-bridge db-role``). The privileges are exactly what an agent's
processes (its servers, listener, supervisors, workers' servers, hooks) use; the row policies
then narrow every table to the rows of the role's agent (``postgres_schema``, schema 16).
Identifiers are quoted by the server (``quote_ident``), never by string pasting of a name.
"""

import sqlite3

from dispatcher.core.errors import BridgeError
from dispatcher.store.attempts import LEDGER_COLUMNS
from dispatcher.store.types import Connection
from dispatcher.store.worktrees import WORKTREE_COLUMNS

# What an agent's processes read: every table, and the payload-free view of others' unread mail.
_READS = (
    "bridge_schema",
    "agent_roles",
    "unread_mail",
    "messages",
    "broadcasts",
    "conversations",
    "conversation_transitions",
    "dispatch_attempts",
    "sessions",
    "session_watches",
    "listeners",
    "approvals",
    "task_grants",
    "metric_totals",
)
# What they write; the policies decide which rows. Inserts may set every column but those the
# database fills alone (ids: a role choosing the next ids would make every other agent's inserts
# fail on the key). Updates name their columns: a recipient moves its message's claim and read
# marks, never its sender, kind, text or reply; a participant moves a conversation's state and
# turns, never its goal or budget; a supervisor moves its attempt's state, ledger and worktree, never the
# message it is for, its agent or its caps. Nothing an agent does deletes a message, a
# conversation or an attempt (prune does, as the owner).
_INSERTS: dict[str, tuple[str, ...]] = {  # table: the columns no role inserts
    "messages": ("id",),
    "broadcasts": ("id",),
    "conversations": ("id",),
    "conversation_transitions": ("id",),
    "dispatch_attempts": (),
    "sessions": ("id",),
    "session_watches": ("id",),
    "listeners": (),
    # A request, never its decision: only the store's owner decides (no UPDATE below either).
    "approvals": ("id", "decision", "decided_by", "decided_at"),
    # Its listener's budget hold days only (the row policy); prune folds the rest, as the owner.
    "metric_totals": (),  # (its counters of notices and wakes: ``bridge_count`` only, below)
}
_UPDATES: dict[str, tuple[str, ...]] = {  # table: the columns a role updates
    "messages": ("claim_owner", "claim_expires_at", "delivered_at", "acknowledged_at"),
    "conversations": ("state", "turn_count", "in_flight_message_id", "updated_at"),
    "dispatch_attempts": (
        "state",
        "worker_pid",
        "worker_start_time",
        "worker_started_at",
        "outcome",
        "exit_code",
        "error_kind",
        "finished_at",
        "diagnostics",
        "duration_seconds",
        "lease_expires_at",
        *LEDGER_COLUMNS,
        *WORKTREE_COLUMNS,
    ),
    "sessions": ("client_name", "client_version", "last_call_at", "wake_paths", "renewed_at"),
    "listeners": ("pid", "start_time", "host", "runtime_dir", "started_at", "renewed_at"),
}
_DELETES = ("sessions", "session_watches", "listeners")

# The counters of notices and wakes (schema 24): a role adds one to its own agent's through this
# function only (it runs with the owner's rights; no right on the rows themselves).
_COUNT_FUNCTION = "bridge_count(text, text, text, text)"

# The store's write lock (schema 18): a table lock, which needs a table-level right (UPDATE: the
# table never has a row, and no role may insert one).
_WRITE_LOCK = "bridge_write_lock"


def _quoted(conn: Connection, name: str) -> str:
    return str(conn.execute("SELECT quote_ident(?)", (name,)).fetchone()[0])


def _store_names(conn: Connection) -> tuple[str, str]:
    """The store's database and schema, quoted."""
    row = conn.execute("SELECT quote_ident(current_database()), quote_ident(current_schema())").fetchone()
    return str(row[0]), str(row[1])


def role_exists(conn: Connection, role: str) -> bool:
    return conn.execute("SELECT 1 FROM pg_roles WHERE rolname = ?", (role,)).fetchone() is not None


def create_login_role(conn: Connection, role: str) -> None:
    """A role that may log in, with no password: the administrator sets how it authenticates
    (``pg_hba.conf``, a password of their choosing, a client certificate)."""
    conn.execute(f"CREATE ROLE {_quoted(conn, role)} LOGIN")


def grant_agent_privileges(conn: Connection, role: str) -> None:
    """Connect, use the store's schema and its sequences, read and write what an agent's processes
    do, and nothing more: whatever the role held on the store's tables before is taken first."""
    who = _quoted(conn, role)
    database, schema = _store_names(conn)
    conn.execute(f"GRANT CONNECT ON DATABASE {database} TO {who}")
    conn.execute(f"GRANT USAGE ON SCHEMA {schema} TO {who}")
    conn.execute(f"REVOKE CREATE ON SCHEMA {schema} FROM {who}")
    conn.execute(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA {schema} TO {who}")
    conn.execute(f"REVOKE ALL ON {', '.join(_READS)} FROM {who}")
    conn.execute(f"GRANT SELECT ON {', '.join(_READS)} TO {who}")
    for table, excluded in _INSERTS.items():
        conn.execute(f"GRANT INSERT ({_columns_but(conn, table, excluded)}) ON {table} TO {who}")
    for table, columns in _UPDATES.items():
        conn.execute(f"GRANT UPDATE ({', '.join(columns)}) ON {table} TO {who}")
    conn.execute(f"GRANT DELETE ON {', '.join(_DELETES)} TO {who}")
    conn.execute(f"GRANT UPDATE ON {_WRITE_LOCK} TO {who}")
    conn.execute(f"GRANT EXECUTE ON FUNCTION {_COUNT_FUNCTION} TO {who}")


def _columns_but(conn: Connection, table: str, excluded: tuple[str, ...]) -> str:
    """``table``'s columns in the store's schema but ``excluded``, quoted, comma-separated."""
    row = conn.execute(
        "SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) FROM pg_attribute"
        " WHERE attrelid = to_regclass(quote_ident(current_schema()) || '.' || quote_ident(?))"
        " AND attnum > 0 AND NOT attisdropped AND NOT attname = ANY(?)",
        (table, list(excluded)),
    ).fetchone()
    return str(row[0])


def regrant_mapped_roles(conn: Connection) -> None:
    """Give every mapped role what ``grant_agent_privileges`` grants now: a migration that
    changes the schema or the grants brings the roles of an existing store along."""
    if conn.execute("SELECT to_regclass('agent_roles') IS NULL").fetchone()[0]:
        return
    for (role,) in conn.execute("SELECT role FROM agent_roles ORDER BY role").fetchall():
        if role_exists(conn, role):
            grant_agent_privileges(conn, role)


def schema_open_to(conn: Connection, role: str) -> str | None:
    """The store's schema if ``role`` may still create objects in it (through a grant to PUBLIC
    or to a role it belongs to): a function it planted there could shadow one that the owner's
    migrations or prune call, and run with the owner's rights. None when it may not."""
    row = conn.execute("SELECT current_schema(), has_schema_privilege(?, current_schema(), 'CREATE')", (role,))
    schema, may_create = row.fetchone()
    return str(schema) if may_create else None


def map_role(conn: Connection, role: str, agent: str) -> str | None:
    """Record that ``role`` acts as ``agent``; the agent it was mapped to before (None if new)."""
    before = conn.execute("SELECT agent_id FROM agent_roles WHERE role = ?", (role,)).fetchone()
    conn.execute(
        "INSERT INTO agent_roles (role, agent_id) VALUES (?, ?) ON CONFLICT (role) DO UPDATE SET agent_id = excluded.agent_id",
        (role, agent),
    )
    return None if before is None else str(before[0])


def unmap_role(conn: Connection, role: str) -> str | None:
    """Take ``role``'s privileges on the store and its mapping away (the role itself stays: the
    administrator drops it); the agent it acted as, None when it was not mapped."""
    who = _quoted(conn, role)
    _, schema = _store_names(conn)
    row = conn.execute("DELETE FROM agent_roles WHERE role = ? RETURNING agent_id", (role,)).fetchone()
    conn.execute(f"REVOKE ALL ON {', '.join(_READS)} FROM {who}")
    conn.execute(f"REVOKE ALL ON ALL SEQUENCES IN SCHEMA {schema} FROM {who}")
    conn.execute(f"REVOKE ALL ON {_WRITE_LOCK} FROM {who}")
    conn.execute(f"REVOKE ALL ON FUNCTION {_COUNT_FUNCTION} FROM {who}")
    conn.execute(f"REVOKE USAGE ON SCHEMA {schema} FROM {who}")
    return None if row is None else str(row[0])


def refuse_another_agents_role(conn: Connection, agent: str, store: str) -> None:
    """A process of ``agent`` whose role acts as another agent (a URL copied from the wrong
    registration) would fail each write on the row policies: refuse it at once, in one line.
    The owner's or a shared role (mapped to no agent) passes: identity is then ``AGENT_ID``."""
    acts_as = acting_agent(conn)
    if acts_as is not None and acts_as != agent:
        raise BridgeError(
            "wrong_agent_role",
            f"AGENT_ID is {agent}, but the role of AGENT_BRIDGE_DB ({store}) acts as {acts_as}; nothing was "
            f"written. Give {agent}'s registration and listener the URL `agent-bridge db-role {agent}` prints.",
        )


def acting_agent(conn: Connection) -> str | None:
    """The agent the connection's role acts as; None for an unmapped role (the owner's included)
    and on SQLite, which has no roles."""
    if isinstance(conn, sqlite3.Connection):
        return None
    row = conn.execute("SELECT bridge_agent()").fetchone()
    return None if row is None or row[0] is None else str(row[0])


def connected_role(conn: Connection) -> str:
    return str(conn.execute("SELECT current_user").fetchone()[0])
