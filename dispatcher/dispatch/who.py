"""The ``who`` view: for each agent, its live interactive sessions (``presence``), its listener
(``dispatch.control``) and its inbox depth (``inbox``). It sits above all three, so none of
them imports it. Payload-free. The tool (``who_tool``) cleans dead rows first; the CLI
(``who_cli``) reads the store read-only."""

from collections.abc import Iterable
from typing import Any

from dispatcher.bridge.presence import Probe, prune_dead, sessions
from dispatcher.core import clock, processes
from dispatcher.core.config import load_config, require_agent
from dispatcher.core.errors import BridgeError
from dispatcher.core.locations import LocationsLike
from dispatcher.dispatch.control import listener_status
from dispatcher.store import SCHEMA_VERSION, STORE_ERRORS, Connection, schema_version, write_transaction
from dispatcher.store.messages import waiting_count
from dispatcher.store.readonly import open_read_only
from dispatcher.store.store_clock import store_now


# -- the who view ----------------------------------------------------------------------------
def who_report(
    conn: Connection | None,
    agents: Iterable[str],
    settings: LocationsLike,
    now: float,
    *,
    here: str | None = None,
    probe: Probe = processes.start_time,
) -> dict[str, Any]:
    """For each agent: live interactive sessions, its listener, inbox depth and oldest unread age.
    ``conn`` None (no store yet): no sessions and empty inboxes. Payload-free."""
    report = []
    for agent in agents:
        found = [] if conn is None else sessions(conn, agent, here=here, probe=probe)
        # Counts only, from the view every agent's role may read (``waiting_count``).
        unread, oldest = (0, None) if conn is None else waiting_count(conn, agent, now)
        status = listener_status(settings, agent, check_config=False, late_results=False, totals=False, conn=conn)
        report.append(
            {
                "agent": agent,
                "sessions": [s.view(now) for s in found if s.role == "interactive" and s.liveness != "dead"],
                "workers": sum(1 for s in found if s.role == "worker" and s.liveness != "dead"),
                "listener": _listener_view(status),
                "unread": unread,
                "oldest_unread_age_seconds": None if oldest is None else round(max(0.0, now - oldest), 1),
            }
        )
    return {"agents": report}


def _listener_view(status: dict[str, Any]) -> dict[str, Any]:
    """Running here, or on another host of a shared store (``host``: None for this one)."""
    away = status["elsewhere"]
    if away:
        return {"running": True, "pid": away["pid"], "stage": status["stage"], "host": away["host"]}
    return {"running": status["running"], "pid": status["pid"], "stage": status["stage"], "host": None}


def who_tool(
    conn: Connection, *, agents: list[str], settings: LocationsLike, only: str | None = None
) -> dict[str, Any]:
    """The ``who`` tool: cleans this host's dead rows first (lazily, here), then reports."""
    if only is not None and only not in agents:
        raise BridgeError("unknown_agent", f"agent {only!r} is not declared; declared agents: {', '.join(agents)}.")
    with write_transaction(conn):
        prune_dead(conn)
    return who_report(conn, [only] if only else agents, settings, store_now(conn))


# -- the CLI ---------------------------------------------------------------------------------
def who_cli(settings: LocationsLike, only: str | None = None) -> dict[str, Any]:
    """``agent-bridge who``: the same report, on a read-only connection (it never writes,
    so dead rows are only left out here; the tool and the next session clean them)."""
    path = settings.config_path()
    config = load_config(path)
    if only is not None:
        require_agent(config, only, path)
    agents = [only] if only else sorted(config.agents)
    conn = open_read_only(settings.db)
    try:
        if conn is not None and schema_version(conn) < SCHEMA_VERSION:
            raise BridgeError(
                "schema_outdated",
                "the store's schema is older than this agent-bridge; start the "
                "server or a listener once to migrate it, then run `agent-bridge who` again.",
            )
        return who_report(conn, agents, settings, clock.now() if conn is None else store_now(conn))
    except STORE_ERRORS as exc:
        raise BridgeError(
            "store_unavailable",
            f"the store could not be read ({type(exc).__name__}); retry, or run `agent-bridge doctor`.",
        ) from None
    finally:
        if conn is not None:
            conn.close()


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m")):
        if seconds >= 2 * size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


def render_who(report: dict[str, Any]) -> str:
    """The plain-text ``who``: one line per agent, one indented line per live session (of another
    host: its liveness and host)."""
    here = processes.this_host()
    lines = []
    for a in report["agents"]:
        listener = a["listener"]
        on_host = f" on host {listener['host']}" if listener["host"] else ""
        head = f"{a['agent']}  listener {listener['stage']}" + (
            f" (pid {listener['pid']}{on_host})" if listener["pid"] else ""
        )
        head += f"  {a['unread']} unread"
        if a["unread"]:
            head += f", oldest {_age(a['oldest_unread_age_seconds'])}"
        if a["workers"]:
            head += f"  {a['workers']} worker session(s)"
        lines.append(head)
        for s in a["sessions"]:
            client = " ".join(p for p in (s["client"], s["client_version"]) if p) or "unknown client"
            lines.append(
                f"  session #{s['id']} {client}  pid {s['pid']}  since {_age(s['since_seconds'])}  idle "
                f"{_age(s['idle_seconds'])}  wake: {','.join(s['wake_paths']) or 'none'}"
                + ("" if s["host"] == here else f"  ({s['liveness']}: host {s['host']})")
            )
        if not a["sessions"]:
            lines.append("  no live interactive session")
    return "\n".join(lines)
