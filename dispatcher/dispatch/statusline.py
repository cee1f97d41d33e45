"""The text for Claude Code's ``statusLine``: one progress line per declared agent, with its
unread count and the findings a person must see while working (``[claude] idle · 2 unread ·
budget reached, resets at 00:00 UTC``): those ``core.findings`` shows on the status line, in
its words, judged by the rules doctor uses, the cheap ones only (no process is started).

It must answer fast and never fail: it reads only the environment, config.json (as
plain JSON, no validation), /proc/locks, the progress documents and the store on a
read-only connection (``open_read_only``: it never writes or creates a file); it imports
neither pydantic nor the MCP SDK. Any error becomes a short word (an invalid setting: its name). ``agent-bridge-statusline``
runs it without even loading the CLI.
"""

import contextlib
import functools
import json
import sys

from dispatcher.core import clock
from dispatcher.core.config_view import budget_zone
from dispatcher.core.findings import CODES
from dispatcher.core.locations import InvalidSetting, Locations, StoreUrl

SEPARATOR = "  ·  "
BUSY_MS = 50
# On a PostgreSQL store, loading psycopg was most of a refresh's CPU (0.26 s against 0.07 s on
# SQLite): the unread counts are read from the store at most this often, kept in between in the
# runtime directory (the listeners' state on the line is read fresh every time).
COUNTS_SECONDS = 20.0
COUNTS_FILE = "statusline-counts.json"


def statusline_text(only: tuple[str, ...] = ()) -> str:
    try:
        locations = Locations.from_env()
    except InvalidSetting as exc:  # e.g. a relative AGENT_BRIDGE_DB
        return f"[agent-bridge] unavailable (invalid_setting {exc.variable})"
    try:
        document = json.loads(locations.config_path().read_text())
        declared = document["agents"]
        agents = list(only) or sorted(declared)
        from dispatcher.dispatch.control import progress_line

        unread, held, elsewhere = _unread(locations, agents, declared, document.get("budget_time_zone"))
        return SEPARATOR.join(
            progress_line(locations, agent, check_config=False, elsewhere_of=functools.partial(elsewhere.get, agent))
            + _count(unread.get(agent))
            + _notes(held.get(agent, []) + _launcher(declared.get(agent)))
            for agent in agents
        )
    except json.JSONDecodeError as exc:  # config.json: where, so that it can be fixed
        return f"[agent-bridge] unavailable ({locations.config_path()} line {exc.lineno}: {exc.msg})"
    except Exception as exc:  # noqa: BLE001 - a status line that fails degrades the whole session UI
        return f"[agent-bridge] unavailable ({type(exc).__name__})"


def _count(unread: int | None) -> str:
    return f" · {unread} unread" if unread else ""


def approvals_said(waiting: int) -> str:
    """The status line's words for an agent's requests waiting for a person (docs/approvals.md)."""
    return f"{waiting} approval{'s' if waiting != 1 else ''} waiting: agent-bridge approvals"


def _notes(said: list[str]) -> str:
    """The findings a person must see while working, in the words the table gives them."""
    return "".join(f" · {words}" for words in said)


def _launcher(raw: object) -> list[str]:
    """What keeps the agent's launcher from running (``launcher_problem``, as doctor judges it), in the table's words."""
    from dispatcher.core.launchers import agent_launcher, launcher_path, launcher_problem
    from dispatcher.core.locations import PROJECT_DIR

    launcher = agent_launcher(raw.get("launcher"), raw.get("cli")) if isinstance(raw, dict) else None
    if not isinstance(launcher, str):
        return []  # an invalid entry: the listener's config_invalid says it
    problem = launcher_problem(launcher_path(launcher, PROJECT_DIR))
    return [] if problem is None else [CODES[problem[0]].said()]


class _Caps:
    """An agent's daily budgets as config.json writes them, unvalidated: a value that is not a
    positive number counts as no cap (the listener, which validates, refuses such a file)."""

    def __init__(self, raw: object) -> None:
        entry = raw if isinstance(raw, dict) else {}
        self.max_cost_usd_per_day = self._number(entry.get("max_cost_usd_per_day"))
        self.max_tokens_per_day = self._number(entry.get("max_tokens_per_day"))

    @staticmethod
    def _number(value: object):
        return value if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else None


def _held_budget(conn, agents: list[str], declared: dict, zone: str | None, now: float) -> dict[str, list[str]]:
    from dispatcher.core.spend import daily_cap_reached, has_daily_cap
    from dispatcher.store.spend import spend_since

    try:
        day_start = clock.local_day_start(now, budget_zone(zone))
    except (ValueError, TypeError):  # not a zone: the listener refuses such a file and says why
        return {}
    held = {}
    for agent in agents:
        caps = _Caps(declared.get(agent))
        if has_daily_cap(caps) and daily_cap_reached(*spend_since(conn, agent, day_start), caps):
            held[agent] = [CODES["budget_reached"].said(zone=zone)]
    return held


Counts = tuple[dict[str, int], dict[str, list[str]], dict[str, dict | None]]


def _kept_counts(locations: Locations, agents: list[str], now: float) -> Counts | None:
    """The counts a refresh less than ``COUNTS_SECONDS`` ago read for the same agents, else None."""
    from dispatcher.core.private_files import read_untrusted

    try:
        kept = json.loads(read_untrusted(locations.private_dir(), COUNTS_FILE, 64 * 1024) or "null")
        fresh = 0 <= now - kept["at"] < COUNTS_SECONDS and kept["agents"] == agents
        return (kept["unread"], kept["held"], kept["elsewhere"]) if fresh else None
    except (ValueError, TypeError, KeyError):
        return None


def _keep_counts(locations: Locations, agents: list[str], now: float, counts: Counts) -> None:
    """Keep what this refresh read for the next ones (only where the runtime directory exists)."""
    from dispatcher.core.private_files import write_atomically

    runtime = locations.private_dir()
    if not runtime.is_dir():
        return
    with contextlib.suppress(OSError):  # a status line that cannot keep its counts reads them again
        unread, held, elsewhere = counts
        document = {"at": now, "agents": agents, "unread": unread, "held": held, "elsewhere": elsewhere}
        write_atomically(runtime / COUNTS_FILE, json.dumps(document))


def _unread(locations: Locations, agents: list[str], declared: dict, zone: str | None) -> Counts:
    """Each agent's unread count, ``budget_reached``'s words for an agent whose daily budget is
    reached, and its listener on another host (PostgreSQL); on a PostgreSQL store those a refresh
    read less than ``COUNTS_SECONDS`` ago."""
    if not isinstance(locations.db, StoreUrl):
        return _read_counts(locations, agents, declared, zone)
    now = clock.now()
    kept = _kept_counts(locations, agents, now)
    if kept is not None:
        return kept
    counts = _read_counts(locations, agents, declared, zone)
    _keep_counts(locations, agents, now, counts)
    return counts


def _read_counts(locations: Locations, agents: list[str], declared: dict, zone: str | None) -> Counts:
    """Each agent's unread count (``waiting_count``: readable for every agent under a per-agent
    role too), the words for an agent whose daily budget is reached and its listener on another
    host, on one read-only connection; all empty when there is no store or it cannot be read."""
    from dispatcher.dispatch.control import _listener_elsewhere
    from dispatcher.store import STORE_ERRORS
    from dispatcher.store.approvals import waiting_by_agent
    from dispatcher.store.messages import waiting_count
    from dispatcher.store.readonly import open_read_only
    from dispatcher.store.views import limit_busy_wait

    try:
        conn = open_read_only(locations.db)
        if conn is None:
            return {}, {}, {}
        try:
            limit_busy_wait(conn, BUSY_MS)  # a status line never waits long
            now = clock.now()
            unread = {agent: waiting_count(conn, agent, now)[0] for agent in agents}
            elsewhere = {agent: _listener_elsewhere(locations, agent, conn) for agent in agents}
            notes = _held_budget(conn, agents, declared, zone, now)
            for agent, waiting in waiting_by_agent(conn, now).items():
                if agent in agents:  # (said with the findings: a person must see it while working)
                    notes.setdefault(agent, []).append(approvals_said(waiting))
            return unread, notes, elsewhere
        finally:
            conn.close()
    except STORE_ERRORS:  # a locked, damaged or foreign file: the line still shows the listeners
        return {}, {}, {}


def main() -> None:
    print(statusline_text(tuple(sys.argv[1:])))  # noqa: T201 - the status line's answer on stdout; this entry point imports no click (its 200 ms budget)
    sys.exit(0)


if __name__ == "__main__":
    main()
