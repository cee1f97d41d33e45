"""The schema, as an ordered list of forward migrations (the only DDL in the project).

Migration N brings a store from ``PRAGMA user_version`` N-1 to N. Never edit a
released migration: append a new one and keep a fixture of the old version in
``tests/fixtures`` so upgrades from it stay tested. A migration is SQL text, or a function
for one that must read the schema it changes (a table rebuild).
"""

import re
import sqlite3
from collections.abc import Callable


def _messages_never_reuse_ids(conn: sqlite3.Connection) -> None:
    """Rebuild ``messages`` with ``id INTEGER PRIMARY KEY AUTOINCREMENT``, keeping every row, its
    id and every index (SQLite's table-rebuild procedure; ``migrate`` runs it with foreign keys
    off and checks them before it commits)."""
    table = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'messages'").fetchone()[0]
    indexes = [
        row[0]
        for row in conn.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'messages' AND sql IS NOT NULL"
        )
    ]
    rebuilt, found = re.subn(
        r"^CREATE TABLE messages \((\s*)id INTEGER PRIMARY KEY,",
        r"CREATE TABLE messages_rebuilt (\1id INTEGER PRIMARY KEY AUTOINCREMENT,",
        table,
    )
    if found != 1:
        raise RuntimeError(f"unexpected definition of the messages table: {table[:80]!r}")
    conn.execute(rebuilt)
    conn.execute("INSERT INTO messages_rebuilt SELECT * FROM messages")
    conn.execute("DROP TABLE messages")
    conn.execute("ALTER TABLE messages_rebuilt RENAME TO messages")
    for index in indexes:
        conn.execute(index)


MIGRATIONS: tuple[str | Callable[[sqlite3.Connection], None], ...] = (
    # 1: messages, leases, bounded conversations.
    """
    CREATE TABLE conversations (
        id INTEGER PRIMARY KEY,
        initiator TEXT NOT NULL,
        recipient TEXT NOT NULL,
        goal TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN
            ('active', 'blocked', 'needs_human', 'completed', 'cancelled', 'expired')),
        max_turns INTEGER NOT NULL,
        turn_count INTEGER NOT NULL DEFAULT 0,
        in_flight_message_id INTEGER,
        created_at REAL NOT NULL,
        expires_at REAL NOT NULL,
        updated_at REAL NOT NULL
    );
    CREATE TABLE messages (
        id INTEGER PRIMARY KEY,
        sender TEXT NOT NULL,
        recipient TEXT NOT NULL,
        kind TEXT CHECK (kind IN ('task', 'result', 'notice')),
        text TEXT NOT NULL,
        reply_to INTEGER REFERENCES messages (id),
        conversation_id INTEGER REFERENCES conversations (id),
        dedup_key TEXT,
        created_at REAL NOT NULL,
        response_deadline REAL,
        delivered_at REAL,
        acknowledged_at REAL,
        claim_owner TEXT,
        claim_expires_at REAL
    );
    CREATE UNIQUE INDEX messages_dedup ON messages (sender, dedup_key)
        WHERE dedup_key IS NOT NULL;
    -- The inbox walks this in id order and stops after `limit` rows, so its cost
    -- does not grow with the acknowledged history.
    CREATE INDEX messages_unacknowledged ON messages (recipient, id)
        WHERE acknowledged_at IS NULL;
    CREATE INDEX messages_replies ON messages (reply_to) WHERE reply_to IS NOT NULL;
    CREATE TABLE conversation_transitions (
        id INTEGER PRIMARY KEY,
        conversation_id INTEGER NOT NULL REFERENCES conversations (id),
        from_state TEXT,
        to_state TEXT NOT NULL,
        actor TEXT NOT NULL,
        reason TEXT NOT NULL,
        at REAL NOT NULL
    );
    CREATE INDEX conversation_transitions_by_conversation
        ON conversation_transitions (conversation_id, id);
    """,
    # 2: the dispatcher's attempt barrier; message_id as primary key means one attempt, ever.
    """
    CREATE TABLE dispatch_attempts (
        message_id INTEGER PRIMARY KEY REFERENCES messages (id),
        agent TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('recorded', 'spawned', 'finished')),
        outcome TEXT,
        error_kind TEXT,
        started_at REAL NOT NULL,
        finished_at REAL,
        supervisor_pid INTEGER,
        supervisor_start_time REAL,
        worker_pid INTEGER,
        worker_start_time REAL,  -- the process's /proc start time, to recognise a recycled pid
        worker_started_at REAL,  -- wall clock when the launcher was running
        deadline REAL,
        exit_code INTEGER,
        duration_seconds REAL,
        diagnostics TEXT
    );
    CREATE INDEX dispatch_attempts_unsettled ON dispatch_attempts (agent)
        WHERE state != 'finished';
    """,
    # 3: system notices in their own namespace, a per-attempt token marking the worker's
    # process tree, and the store-side listener lease (one listener per agent per store).
    """
    ALTER TABLE messages ADD COLUMN origin TEXT NOT NULL DEFAULT 'agent'
        CHECK (origin IN ('agent', 'system'));
    UPDATE messages SET origin = 'system', dedup_key = NULL
        WHERE kind = 'notice' AND dedup_key = 'agent-bridge:dispatch-notice:' || reply_to
          AND EXISTS (SELECT 1 FROM dispatch_attempts AS a
                      WHERE a.message_id = messages.reply_to AND a.outcome IN ('failed', 'timeout', 'crashed'));
    ALTER TABLE dispatch_attempts ADD COLUMN worker_token TEXT;
    CREATE TABLE listeners (
        agent TEXT PRIMARY KEY,
        pid INTEGER NOT NULL,
        start_time REAL,   -- the process's /proc start time, to recognise a recycled pid
        host TEXT NOT NULL,
        runtime_dir TEXT NOT NULL,
        started_at REAL NOT NULL
    );
    """,
    # 4: the outcome and cost ledger: what each attempt's CLI reported (its own status word,
    # cost and tokens), the per-task cap in force and how far the CLI overshot it, and an
    # optional cost cap per conversation. Totals are sums over these columns.
    """
    ALTER TABLE dispatch_attempts ADD COLUMN cli_status TEXT;
    ALTER TABLE dispatch_attempts ADD COLUMN cost_usd REAL;
    ALTER TABLE dispatch_attempts ADD COLUMN input_tokens INTEGER;
    ALTER TABLE dispatch_attempts ADD COLUMN output_tokens INTEGER;
    ALTER TABLE dispatch_attempts ADD COLUMN cache_read_tokens INTEGER;
    ALTER TABLE dispatch_attempts ADD COLUMN cache_write_tokens INTEGER;
    ALTER TABLE dispatch_attempts ADD COLUMN max_cost_usd REAL;
    ALTER TABLE dispatch_attempts ADD COLUMN cost_overshoot_usd REAL;
    -- Claude's attempts settled before this kept their cost only inside the diagnostics JSON.
    UPDATE dispatch_attempts SET cost_usd = json_extract(diagnostics, '$.total_cost_usd')
        WHERE json_valid(diagnostics)
          AND json_type(diagnostics, '$.total_cost_usd') IN ('real', 'integer')
          AND json_extract(diagnostics, '$.total_cost_usd') >= 0;
    CREATE INDEX dispatch_attempts_by_agent ON dispatch_attempts (agent, finished_at);
    ALTER TABLE conversations ADD COLUMN max_cost_usd REAL;
    CREATE INDEX messages_by_conversation ON messages (conversation_id)
        WHERE conversation_id IS NOT NULL;
    """,
    # 5: broadcast. One row per `send_message(recipient="*")`, holding the sender's dedup key
    # for the whole set (a key names one broadcast or one message, never both); each copy
    # is an ordinary message pointing at it.
    """
    CREATE TABLE broadcasts (
        id INTEGER PRIMARY KEY,
        sender TEXT NOT NULL,
        dedup_key TEXT,
        created_at REAL NOT NULL
    );
    CREATE UNIQUE INDEX broadcasts_dedup ON broadcasts (sender, dedup_key)
        WHERE dedup_key IS NOT NULL;
    ALTER TABLE messages ADD COLUMN broadcast_id INTEGER REFERENCES broadcasts (id);
    CREATE INDEX messages_by_broadcast ON messages (broadcast_id)
        WHERE broadcast_id IS NOT NULL;
    """,
    # 6: presence. One row per running MCP server process (a session): its agent and role,
    # the process that proves it alive (host, pid and /proc start time: no heartbeats), the
    # client from the MCP initialize handshake, and the wake paths it has (a JSON list).
    """
    CREATE TABLE sessions (
        id INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: a hook holding an id never marks another session
        agent TEXT NOT NULL,
        role TEXT NOT NULL CHECK (role IN ('interactive', 'worker')),
        host TEXT NOT NULL,
        pid INTEGER NOT NULL,
        start_time REAL,
        client_pid INTEGER,
        client_name TEXT,
        client_version TEXT,
        started_at REAL NOT NULL,
        last_call_at REAL,
        wake_paths TEXT NOT NULL DEFAULT '[]'
    );
    CREATE INDEX sessions_by_agent ON sessions (agent);
    """,
    # 7: permissions. The permission level an attempt's worker ran at (its agent's profile,
    # recorded by the barrier), and the tools its CLI reported denied (names only, comma-separated).
    """
    ALTER TABLE dispatch_attempts ADD COLUMN permission_level TEXT;
    ALTER TABLE dispatch_attempts ADD COLUMN denied_tools TEXT;
    """,
    # 8: watches. The wake path `monitor` is provided by a running `inbox watch` process: one row per
    # watch (its pid and /proc start time, checked as a session's are), not a flag on the session,
    # so a watch killed with -9 stops counting at once and two watches of one session count apart.
    # A `monitor` flag left on a session row by an older version means nothing now: it goes.
    """
    CREATE TABLE session_watches (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id INTEGER NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        pid INTEGER NOT NULL,
        start_time REAL
    );
    CREATE INDEX session_watches_by_session ON session_watches (session_id);
    UPDATE sessions SET wake_paths = (SELECT json_group_array(value) FROM json_each(sessions.wake_paths)
                                      WHERE value != 'monitor')
        WHERE json_valid(wake_paths) AND wake_paths LIKE '%monitor%';
    """,
    # 9: message ids are never reused (after prune deletes the newest rows, a plain rowid
    # would hand their ids out again). A function, not text: it rebuilds the table from its
    # own definition, so every column an earlier migration added comes along.
    _messages_never_reuse_ids,
    # 10: evidence belongs to the attempt. A message a worker's server writes records the attempt
    # it was written by (the attempt's message id); a verdict counts only those. Rows written
    # before this were counted by sender and recipient: the replies the old rule counted, sent
    # after their attempt started, are marked as that attempt's.
    """
    ALTER TABLE messages ADD COLUMN sent_by_attempt INTEGER;
    UPDATE messages SET sent_by_attempt = reply_to
        WHERE origin = 'agent' AND kind IN ('task', 'result') AND EXISTS (
            SELECT 1 FROM dispatch_attempts AS a JOIN messages AS t ON t.id = a.message_id
            WHERE a.message_id = messages.reply_to AND t.recipient = messages.sender
              AND t.sender = messages.recipient AND messages.created_at >= a.started_at);
    """,
    # 11: spend. Where an attempt's cost_usd came from ('reported' by its CLI, or 'estimated' from
    # the agent's prices), the per-task token cap the barrier recorded, the tokens above it, and
    # an index for an agent's spend since a time (the daily budgets, `agent-bridge costs`).
    """
    ALTER TABLE dispatch_attempts ADD COLUMN cost_source TEXT;
    ALTER TABLE dispatch_attempts ADD COLUMN max_tokens INTEGER;
    ALTER TABLE dispatch_attempts ADD COLUMN token_overshoot INTEGER;
    UPDATE dispatch_attempts SET cost_source = 'reported' WHERE cost_usd IS NOT NULL;
    CREATE INDEX dispatch_attempts_by_agent_start ON dispatch_attempts (agent, started_at);
    """,
    # 12: a conversation's decision belongs to the attempt that took it. A move made by a worker's
    # server records its attempt; a review turn's verdict counts only its own. Moves made before
    # this are credited as the old rule did: to the attempt of the acting agent that was running
    # in that conversation at the time.
    """
    ALTER TABLE conversation_transitions ADD COLUMN by_attempt INTEGER;
    UPDATE conversation_transitions SET by_attempt = (
        SELECT a.message_id FROM dispatch_attempts AS a JOIN messages AS m ON m.id = a.message_id
        WHERE m.conversation_id = conversation_transitions.conversation_id
          AND a.agent = conversation_transitions.actor
          AND a.started_at <= conversation_transitions.at
          AND (a.finished_at IS NULL OR a.finished_at >= conversation_transitions.at)
        ORDER BY a.started_at DESC LIMIT 1);
    """,
    # 13: every read of an inbox first caps any lease that reaches too far (store.messages
    # .cap_far_leases); this index finds those among the claimed unread messages without reading
    # every unread row on each receive.
    """
    CREATE INDEX messages_claimed ON messages (recipient, claim_expires_at)
        WHERE acknowledged_at IS NULL AND claim_expires_at IS NOT NULL;
    """,
    # 14: several hosts on one store. An attempt records its host and a lease its supervisor
    # renews (another host settles it once the lease runs out); a listener's row records when it
    # last renewed its lease. Rows from before have no host: they are the one host's.
    """
    ALTER TABLE dispatch_attempts ADD COLUMN host TEXT;
    ALTER TABLE dispatch_attempts ADD COLUMN lease_expires_at REAL;
    ALTER TABLE listeners ADD COLUMN renewed_at REAL;
    """,
    # 15: a session row records when its server last said it runs, for the hosts that cannot see
    # its process (presence.sessions). Rows from before were never renewed.
    """
    ALTER TABLE sessions ADD COLUMN renewed_at REAL;
    """,
    # 16: per-agent database roles (PostgreSQL's list: the role map and the row policies, which a
    # SQLite file has no use for). Both keep ``unread_mail``, the one cross-agent read of messages
    # (`who`'s counts), so that the query reading it is written once.
    """
    CREATE VIEW unread_mail AS
        SELECT recipient, created_at, claim_owner, claim_expires_at FROM messages WHERE acknowledged_at IS NULL;
    """,
    # 17: ``unread_mail`` says whether a message is claimed, never by whom (a claim owner names the
    # agent's attempt); on PostgreSQL also the row checks of what a role's writes act on.
    """
    DROP VIEW unread_mail;
    CREATE VIEW unread_mail AS
        SELECT recipient, created_at, CASE WHEN claim_owner IS NOT NULL THEN '' END AS claim_owner, claim_expires_at
        FROM messages WHERE acknowledged_at IS NULL;
    """,
    # 18: the PostgreSQL store's write lock as a table lock only its function takes
    # (``postgres_schema``); a SQLite file's write lock is its own file's.
    "",
    # 19: an attempt in a git worktree of its own (dispatch.isolation): where it is, the git
    # directory the supervisor recorded for it, its branch, the commits it started from and ended
    # at, the diffstat, what the supervisor found the worker had done to it, and whether it is still
    # on disk ('planned', 'present', 'removed'). All NULL for an attempt without isolation.
    """
    ALTER TABLE dispatch_attempts ADD COLUMN isolation TEXT;
    ALTER TABLE dispatch_attempts ADD COLUMN worktree_path TEXT;
    ALTER TABLE dispatch_attempts ADD COLUMN worktree_git_dir TEXT;
    ALTER TABLE dispatch_attempts ADD COLUMN worktree_common_dir TEXT;
    ALTER TABLE dispatch_attempts ADD COLUMN worktree_checkout TEXT;
    ALTER TABLE dispatch_attempts ADD COLUMN worktree_branch TEXT;
    ALTER TABLE dispatch_attempts ADD COLUMN worktree_origin TEXT;
    ALTER TABLE dispatch_attempts ADD COLUMN worktree_base TEXT;
    ALTER TABLE dispatch_attempts ADD COLUMN worktree_head TEXT;
    ALTER TABLE dispatch_attempts ADD COLUMN worktree_files INTEGER;
    ALTER TABLE dispatch_attempts ADD COLUMN worktree_insertions INTEGER;
    ALTER TABLE dispatch_attempts ADD COLUMN worktree_deletions INTEGER;
    ALTER TABLE dispatch_attempts ADD COLUMN worktree_findings TEXT;
    ALTER TABLE dispatch_attempts ADD COLUMN worktree_state TEXT;
    ALTER TABLE dispatch_attempts ADD COLUMN worktree_removed_at REAL;
    CREATE INDEX dispatch_attempts_worktrees ON dispatch_attempts (agent, worktree_state)
        WHERE worktree_state IS NOT NULL;
    """,
    # 20: approvals (docs/approvals.md). A worker whose profile sets ``ask`` asks for a tool its
    # level does not give: the attempt (its message id), its agent, the tool and the tool's input
    # (kept here only: never in a log, progress or notice), until when it waits; a person's
    # decision ('allow_once', 'allow_attempt', 'deny'), who took it and when. A request nobody
    # decided before ``expires_at`` was denied by its worker.
    """
    CREATE TABLE approvals (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        message_id INTEGER NOT NULL,
        agent TEXT NOT NULL,
        tool TEXT NOT NULL,
        input TEXT NOT NULL,
        requested_at REAL NOT NULL,
        expires_at REAL NOT NULL,
        decision TEXT CHECK (decision IN ('allow_once', 'allow_attempt', 'deny')),
        decided_by TEXT,
        decided_at REAL
    );
    CREATE INDEX approvals_by_attempt ON approvals (message_id);
    CREATE INDEX approvals_waiting ON approvals (expires_at) WHERE decision IS NULL;
    """,
    # 21: a grant for one task (``agent-bridge retry ID --allow ...``): the new message it was sent
    # as, the message it retries, the grants (JSON list), who gave them and when.
    """
    CREATE TABLE task_grants (
        message_id INTEGER PRIMARY KEY,
        retry_of INTEGER NOT NULL,
        grants TEXT NOT NULL,
        granted_by TEXT NOT NULL,
        granted_at REAL NOT NULL
    );
    CREATE INDEX task_grants_by_retry ON task_grants (retry_of);
    """,
    # 22 (traces, issue 34): the W3C traceparent of
    # the span that sent the message, so that its attempt's spans join the sender's trace
    # (docs/traces.md). NULL when the sender did not trace; never trusted (``core.traces``).
    """
    ALTER TABLE messages ADD COLUMN traceparent TEXT;
    """,
    # 23 (metrics, issue 34): running totals that survive prune. Prune folds the figures of the rows
    # it deletes into these in the same transaction (``store.metrics.fold_into_totals``), so that a
    # scrape (these plus the rows left) never goes down. ``metric`` is ``attempts`` (``label`` the
    # outcome, ``detail`` the error kind), ``messages_sent`` (``agent`` the recipient, ``label`` the
    # kind), a histogram's span (``bucket`` the index of its bound in ``core.metric_rules``) or
    # ``budget_hold_days`` (a listener's row per agent and budget day its daily budget held its new
    # tasks; ``label`` the day's start); '' stands for no value (a key column cannot be NULL), -1 for
    # no bucket. Names and numbers only.
    """
    CREATE TABLE metric_totals (
        metric TEXT NOT NULL,
        agent TEXT NOT NULL,
        host TEXT NOT NULL,
        label TEXT NOT NULL,
        detail TEXT NOT NULL,
        bucket INTEGER NOT NULL,
        count INTEGER NOT NULL,
        seconds REAL NOT NULL,
        PRIMARY KEY (metric, agent, host, label, detail, bucket)
    );
    """,
    # 24 (metrics, issue 34): the counters of notices and wakes (``metric_rules.COUNTERS``) are
    # rows of ``metric_totals``, one per agent, metric, label and detail, each event adding one
    # (``store.metrics.count_event``): nothing changes in a SQLite store. On PostgreSQL,
    # ``bridge_count``: the one way an agent's role adds to them.
    "",
)

SCHEMA_VERSION = len(MIGRATIONS)
