"""``agent-bridge db-role AGENT [--role NAME] [--revoke]``: a PostgreSQL role per agent.

Run by the store's owner (``AGENT_BRIDGE_DB`` naming the role that owns the tables). It creates
the login role when missing (no password: the administrator sets how it authenticates), grants
what the agent's processes need, and records which agent the role acts as; the store's row
policies then let that role read and write only as its agent (``store.postgres_schema``,
schema 16). Idempotent: a second run changes nothing. ``--revoke`` takes the privileges and the
mapping away and leaves the role for the administrator to drop.
"""

import re
from urllib.parse import urlsplit, urlunsplit

from dispatcher.core.errors import BridgeError
from dispatcher.core.locations import is_postgres_url, redacted

# The names this command gives or accepts: an identifier PostgreSQL would not fold or need to
# quote in a URL (a role is named in the agent's AGENT_BRIDGE_DB).
ROLE_PATTERN = r"[a-z_][a-z0-9_]{0,62}"


def default_role(agent: str) -> str:
    return "bridge_" + agent.replace("-", "_")


def role_url(url: str, role: str) -> str:
    """The owner's store URL with ``role`` as its user and no password (the role's own comes from
    ``~/.pgpass`` or whatever ``pg_hba.conf`` asks for)."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{role}@{host}"))


def _refused(what: str, exc: Exception) -> BridgeError:
    return BridgeError(
        "not_store_owner",
        f"{what} was refused ({exc}); nothing was changed. Run `agent-bridge db-role` with AGENT_BRIDGE_DB "
        "naming the role that owns the store's tables (the one that created it), or a superuser.",
    )


def _schema_open(role: str, schema: str) -> BridgeError:
    return BridgeError(
        "store_schema_open",
        f"role {role} could create objects in the store's schema {schema} (CREATE granted to PUBLIC or to a role "
        f"it belongs to), and a function planted there could run with the owner's rights; nothing was changed. "
        f"As the schema's owner run `REVOKE CREATE ON SCHEMA {schema} FROM PUBLIC` (and from any role {role} "
        "belongs to), or keep the store in a schema of its own, then run this command again.",
    )


def db_role(db: object, agent: str, role: str | None = None, *, revoke: bool = False) -> dict[str, object]:
    """Set up (or with ``revoke`` take away) ``role`` for ``agent``; what was done, as JSON."""
    if not is_postgres_url(db):
        raise BridgeError(
            "not_postgres",
            f"per-agent roles need a PostgreSQL store, and AGENT_BRIDGE_DB is the SQLite file {db}; nothing "
            "was changed. A SQLite file is as open as its file mode (README, 'Trust model and security').",
        )
    role = role or default_role(agent)
    if not re.fullmatch(ROLE_PATTERN, role):
        raise BridgeError("usage_error", f"{role!r} is not a role name this command gives ({ROLE_PATTERN}).")
    from dispatcher.store import open_store, write_transaction
    from dispatcher.store import roles as stored
    from dispatcher.store.errors import PostgresPermissionDenied

    url = str(db)
    conn = open_store(url)  # as the owner, this also brings the schema up to date
    try:
        with write_transaction(conn):
            if revoke:
                try:
                    was = stored.unmap_role(conn, role) if stored.role_exists(conn, role) else None
                except PostgresPermissionDenied as exc:
                    raise _refused(f"revoking {role}'s privileges", exc) from None
                return {"role": role, "agent": was, "revoked": was is not None}
            created, me = not stored.role_exists(conn, role), stored.connected_role(conn)
            if created:
                try:
                    stored.create_login_role(conn, role)
                except PostgresPermissionDenied as exc:
                    raise BridgeError(
                        "role_not_created",
                        f"role {role} does not exist and {me} may not create it ({exc}); "
                        f"nothing was changed. Have an administrator run `CREATE ROLE {role} LOGIN`, then run "
                        "this command again.",
                    ) from None
            try:  # (a role without grant options is only warned by GRANT; the mapping then fails)
                stored.grant_agent_privileges(conn, role)
                before = stored.map_role(conn, role, agent)
            except PostgresPermissionDenied as exc:
                raise _refused(f"granting {role} its privileges and mapping it", exc) from None
            if schema := stored.schema_open_to(conn, role):
                raise _schema_open(role, schema)
    finally:
        conn.close()
    return {
        "role": role,
        "agent": agent,
        "created": created,
        "was_agent": before,
        "url": redacted(role_url(url, role)),
    }


def render(report: dict[str, object]) -> str:
    if "revoked" in report:
        if not report["revoked"]:
            return f"role {report['role']} acted as no agent on this store; nothing to revoke."
        return (
            f"role {report['role']} no longer acts as {report['agent']} and has no privileges on this store; "
            f"drop it when nothing uses it (DROP ROLE {report['role']})."
        )
    made = "created (set its authentication: pg_hba.conf, ~/.pgpass)" if report["created"] else "exists"
    moved = f"; it acted as {report['was_agent']} before" if report["was_agent"] not in (None, report["agent"]) else ""
    return (
        f"role {report['role']} {made}, acts as {report['agent']}{moved}.\n"
        f"Give {report['agent']}'s registrations and listener AGENT_BRIDGE_DB={report['url']}"
    )
