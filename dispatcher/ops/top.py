"""`agent-bridge top`: a live, payload-free terminal view of listeners, attempts, conversations and inboxes.

``snapshot`` reads the store on a read-only connection (plus each declared agent's listener
status) and returns plain data: ids, enums, numbers and agent names, never a message's text.
``render`` turns a snapshot into a Rich renderable. Rich is an optional extra (``top``):
it is imported only here, so the server and the status line never load it.
"""

import contextlib
import json
import sys
import time

from dispatcher.core import clock
from dispatcher.core.config_view import budget_day_start
from dispatcher.core.errors import BridgeError, missing_extra
from dispatcher.core.findings import CODES
from dispatcher.core.locations import shown
from dispatcher.core.reasons import reason_code
from dispatcher.store import approvals as approval_rows

RECENT = 10
REFRESH_SECONDS = 0.5


def _rich():
    try:
        import rich  # noqa: F401
    except ImportError:
        raise missing_extra("`agent-bridge top`", "rich") from None


def snapshot(settings) -> dict:
    """One read of everything ``top`` shows; payload-free."""
    from dispatcher.core.config import ConfigError, load_config
    from dispatcher.dispatch.control import _read_only, listener_status, worktree_rows
    from dispatcher.store import SCHEMA_VERSION, schema_version, views

    now = clock.now()
    snap: dict = {
        "at": now,
        "store": shown(settings.db),
        "error": None,
        "agents": [],
        "in_flight": [],
        "recent": [],
        "conversations": [],
        "inboxes": {},
        "latest_diagnostics": None,
        "sessions": [],
        "branches": [],
        "approvals": [],
    }
    config = None
    try:
        config = load_config(settings.config_path())
        names = sorted(config.agents)
    except ConfigError as exc:
        names = []
        snap["error"] = f"config_invalid: {exc.reason}"
    problems = launcher_codes(settings, config)
    for name in names:
        status = listener_status(settings, name, check_config=False, late_results=False, totals=False)
        last = status["last"] if isinstance(status["last"], dict) else None
        snap["agents"].append(
            {
                "agent": name,
                "problems": problems.get(name, []),
                "stage": status["stage"],
                "running": status["running"],
                "pid": status["pid"],
                "enabled": status["enabled"],
                "auto": (status["progress"] or {}).get("auto"),
                "workers": _workers(status["progress"]),
                "last": None
                if last is None
                else {k: last.get(k) for k in ("message_id", "result", "error_kind", "duration_seconds")},
            }
        )
    conn = _read_only(settings)
    if conn is None:
        snap["error"] = snap["error"] or "no store yet"
        return snap
    try:
        if schema_version(conn) < SCHEMA_VERSION:
            snap["error"] = "the store's schema is older; start the server or listener once to migrate it"
            return snap
        snap["in_flight"] = [
            {
                "message_id": m,
                "agent": a,
                "state": s,
                "elapsed": now - started,
                "budget": None if deadline is None else deadline - started,
            }
            for m, a, s, started, deadline in views.unsettled_attempt_times(conn)
        ]
        snap["recent"] = [
            {
                "message_id": m,
                "agent": a,
                "outcome": o,
                "error_kind": e,
                "duration": d,
                "cost_usd": c,
                "cli_status": s,
                "why": reason_code(o, e, s),
            }
            for m, a, o, e, d, c, s in views.recent_outcomes(conn, RECENT)
        ]
        snap["conversations"] = [
            {
                "id": i,
                "initiator": ini,
                "recipient": rec,
                "turns": t,
                "max_turns": mt,
                "cost_usd": cost,
                "max_cost_usd": mc,
            }
            for i, ini, rec, t, mt, mc, cost in views.active_conversation_costs(conn)
        ]
        snap["inboxes"] = {
            r: {"unread": n, "oldest_age": now - oldest} for r, (n, oldest) in views.unread_by_recipient(conn).items()
        }
        snap["sessions"] = _live_sessions(conn, now)
        snap["approvals"] = [  # never their input (`agent-bridge approvals show ID` has it)
            {**a, "age": now - float(a.pop("requested_at"))} for a in approval_rows.waiting_summary(conn, now)
        ]
        snap["branches"] = worktree_rows(conn, None)
        if config is not None:
            for entry in snap["agents"]:
                entry["today"] = today_spend(conn, config, entry["agent"], now)
        row = views.latest_diagnostics(conn)
        if row is not None:
            try:
                diagnostics = json.loads(row[2]) if row[2] else None
            except ValueError:
                diagnostics = "unreadable"
            snap["latest_diagnostics"] = {"message_id": row[0], "agent": row[1], "diagnostics": diagnostics}
    finally:
        conn.close()
    return snap


def launcher_codes(settings, config) -> dict[str, list[str]]:
    """Per agent, the code of what keeps its launcher from running: doctor's launcher checks, rows
    of its table (the status line judges it by the same rule, ``core.launchers.launcher_problem``)."""
    from dispatcher.core.locations import Locations
    from dispatcher.ops.doctor import Context
    from dispatcher.ops.doctor.runner import shown_while_working

    if config is None:
        return {}
    return shown_while_working(Context(Locations(db=settings.db, config=settings.config_path()), config), "launcher")


def _workers(progress: dict | None) -> dict:
    """The listener's running attempts (ids, oldest first), its ``max_workers`` and why a task waits."""
    doc = progress or {}
    running = doc.get("running")
    return {
        "running": [r.get("message_id") for r in running if isinstance(r, dict)] if isinstance(running, list) else [],
        "max": doc.get("max_workers"),
        "held": doc.get("held"),
    }


def _workers_text(workers: dict) -> str:
    """E.g. ``2/2 #44 #45 held: max_workers``."""
    if workers["max"] is None:
        return "-"
    text = f"{len(workers['running'])}/{workers['max']}" + "".join(f" #{m}" for m in workers["running"])
    return text + (f" held: {workers['held']}" if workers["held"] else "")


def today_spend(conn, config, agent: str, now: float) -> dict:
    """The agent's spend since midnight in the budget's zone (cost, tokens), the daily cap it
    reached, if any, and that zone."""
    from dispatcher.core.spend import daily_cap_reached
    from dispatcher.store.spend import spend_since

    cost, tokens = spend_since(conn, agent, budget_day_start(config, now))
    reached = daily_cap_reached(cost, tokens, config.agents[agent])
    return {"cost_usd": cost, "tokens": tokens, "reached": reached, "zone": config.budget_time_zone}


def _today_text(today: dict | None):
    from rich.text import Text

    if not today:
        return Text("-")
    tokens = "-" if today["tokens"] is None else f"{today['tokens']:,} tok"
    text = Text(f"{_cost(today['cost_usd'])} {tokens}")
    if today["reached"]:
        text.append(" " + CODES["budget_reached"].said(zone=today["zone"]), style="bold red")
    return text


def _listener_text(stage: str, style: str, problems: list[str]):
    """The listener's stage, and the findings a person must see while working in the table's words."""
    from rich.text import Text

    text = Text(str(stage), style=style)
    for code in problems:
        text.append(" " + CODES[code].said(), style="bold red")
    return text


def _live_sessions(conn, now: float) -> list[dict]:
    """Interactive sessions whose process runs (or of another host: unknown); payload-free."""
    from dispatcher.bridge.presence import sessions

    return [
        {"agent": s.agent, **s.view(now)} for s in sessions(conn) if s.role == "interactive" and s.liveness != "dead"
    ]


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.0f}h"
    return f"{seconds / 86400:.0f}d"


def _cost(value: float | None) -> str:
    return "-" if value is None else f"${value:.4f}"


def render(snap: dict, filter_agent: str | None = None, details: bool = False):
    """A Rich renderable of one snapshot; ``filter_agent`` keeps only rows that name that agent."""
    from rich.console import Group, RenderableType
    from rich.table import Table
    from rich.text import Text

    def keep(*names: str) -> bool:
        return filter_agent is None or filter_agent in names

    names = [a["agent"] for a in snap["agents"]]
    keys = " ".join(f"{i}:{n}" for i, n in enumerate(names, 1))
    header = Text(
        f"agent-bridge top  {time.strftime('%H:%M:%S', time.localtime(snap['at']))}  "
        f"store {snap['store']}  filter: {filter_agent or 'all'}",
        style="bold",
    )
    parts: list[RenderableType] = [
        header,
        Text(
            f"keys: a cycle agent, 0 all, {keys}  d details  "
            "y allow the oldest approval once, Y for its attempt, n deny it  q quit",
            style="dim",
        ),
    ]
    if snap["error"]:
        parts.append(Text(f"error: {snap['error']}", style="bold red"))

    agents = Table(title="Agents", title_justify="left")
    for col in (
        "agent",
        "listener",
        "pid",
        "enabled",
        "auto",
        "workers",
        "unread",
        "oldest unread",
        "last outcome",
        "today",
    ):
        agents.add_column(col)
    for a in snap["agents"]:
        if not keep(a["agent"]):
            continue
        inbox = snap["inboxes"].get(a["agent"], {"unread": 0, "oldest_age": None})
        last = a["last"]
        last_text = (
            "-"
            if not last
            else (
                f"#{last['message_id']} {last['result']}"
                + (f" ({last['error_kind']})" if last["error_kind"] else "")
                + (f" why={last['reason'].split(': ', 1)[0]}" if last.get("reason") else "")
                + f" {last['duration_seconds']}s"
            )
        )
        stage_style = {"idle": "green", "working": "yellow", "error": "red", "stopped": "dim"}.get(a["stage"], "")
        agents.add_row(
            a["agent"],
            _listener_text(a["stage"], stage_style, a["problems"]),
            str(a["pid"] or "-"),
            "yes" if a["enabled"] else "no",
            {True: "on", False: "off"}.get(a["auto"], "-"),
            _workers_text(a["workers"]),
            str(inbox["unread"]),
            _age(inbox["oldest_age"]),
            last_text,
            _today_text(a.get("today")),
        )
    parts.append(agents)

    flight = Table(title="In flight", title_justify="left")
    for col in ("message", "agent", "state", "elapsed", "budget", "used"):
        flight.add_column(col)
    for f in snap["in_flight"]:
        if keep(f["agent"]):
            used = "-" if not f["budget"] else f"{100 * f['elapsed'] / f['budget']:.0f}%"
            flight.add_row(f"#{f['message_id']}", f["agent"], f["state"], _age(f["elapsed"]), _age(f["budget"]), used)
    parts.append(flight)

    recent = Table(title="Recent outcomes", title_justify="left")
    for col in ("message", "agent", "outcome", "error_kind", "cli_status", "why", "duration", "cost"):
        recent.add_column(col)
    for r in snap["recent"]:
        if keep(r["agent"]):
            style = "green" if r["outcome"] == "succeeded" else "red" if r["outcome"] != "blocked" else "yellow"
            recent.add_row(
                f"#{r['message_id']}",
                r["agent"],
                Text(str(r["outcome"]), style=style),
                r["error_kind"] or "-",
                r["cli_status"] or "-",
                r["why"] or "-",
                _age(r["duration"]),
                _cost(r["cost_usd"]),
            )
    parts.append(recent)

    convs = Table(title="Active conversations", title_justify="left")
    for col in ("conversation", "initiator", "recipient", "turns", "cost", "cost cap"):
        convs.add_column(col)
    for c in snap["conversations"]:
        if keep(c["initiator"], c["recipient"]):
            convs.add_row(
                f"#{c['id']}",
                c["initiator"],
                c["recipient"],
                f"{c['turns']}/{c['max_turns']}",
                _cost(c["cost_usd"]),
                _cost(c["max_cost_usd"]),
            )
    parts.append(convs)

    branches = Table(title="Branches (agent-bridge diff / apply / discard ID)", title_justify="left")
    for col in ("message", "agent", "outcome", "branch", "diffstat", "found", "worktree"):
        branches.add_column(col)
    for b in snap.get("branches", []):
        if keep(b["agent"]):
            branches.add_row(
                f"#{b['message_id']}",
                b["agent"],
                str(b["outcome"] or "running"),
                b["branch"] or "(deleted)",
                b["diffstat"],
                ",".join(b["findings"]) or "-",
                "kept" if b["on_disk"] else "-",
            )
    parts.append(branches)

    waiting = Table(title="Approvals waiting (oldest first: y / Y / n answer it)", title_justify="left")
    for col in ("approval", "agent", "task", "tool", "age"):
        waiting.add_column(col)
    for a in snap.get("approvals", []):
        if keep(a["agent"]):
            waiting.add_row(f"#{a['id']}", a["agent"], f"#{a['task_id']}", a["tool"], _age(a["age"]))
    parts.append(waiting)

    live = Table(title="Interactive sessions", title_justify="left")
    for col in ("session", "agent", "client", "since", "idle", "wake paths", "liveness"):
        live.add_column(col)
    for v in snap.get("sessions", []):
        if keep(v["agent"]):
            client = " ".join(p for p in (v["client"], v["client_version"]) if p) or "-"
            live.add_row(
                f"#{v['id']}",
                v["agent"],
                client,
                _age(v["since_seconds"]),
                _age(v["idle_seconds"]),
                ",".join(v["wake_paths"]) or "-",
                v["liveness"],
            )
    parts.append(live)

    if details:
        latest = snap["latest_diagnostics"]
        body = (
            "no attempt yet"
            if latest is None
            else (
                f"attempt on message #{latest['message_id']} ({latest['agent']}):\n"
                + json.dumps(latest["diagnostics"], indent=1, sort_keys=True)
            )
        )
        parts.append(Text("Latest attempt's diagnostics (d to close)\n" + body))
    return Group(*parts)


APPROVAL_KEYS = {"y": "allow_once", "Y": "allow_attempt", "n": "deny"}


def approval_action(key: str | None, waiting: list[dict], filter_agent: str | None) -> tuple[int, str] | None:
    """(approval id, decision) a key answers (pure): the oldest waiting request shown (of the
    filtered agent), allowed once (y), for its attempt (Y) or denied (n); None for another key."""
    if key not in APPROVAL_KEYS:
        return None
    shown = [a for a in waiting if filter_agent is None or a["agent"] == filter_agent]
    return (shown[0]["id"], APPROVAL_KEYS[key]) if shown else None


def _next_filter(current: str | None, names: list[str], key: str) -> str | None:
    if key == "0" or not names:
        return None
    if key.isdigit():
        index = int(key) - 1
        return names[index] if index < len(names) else current
    if current not in names:
        return names[0]
    index = names.index(current) + 1
    return names[index] if index < len(names) else None


def run_top(settings, filter_agent: str | None = None, once: bool = False) -> None:
    if not once and not sys.stdout.isatty():  # a live screen into a pipe or file would never end
        raise BridgeError(
            "usage_error",
            "`agent-bridge top` draws a live screen and needs a terminal, and its output is not one: "
            "use `agent-bridge top --once` for one frame (scripts, pipes)",
        )
    _rich()
    from rich.console import Console
    from rich.live import Live

    if once:
        Console().print(render(snapshot(settings), filter_agent))
        return
    stdin = sys.stdin
    tty_state = None
    if stdin.isatty():
        import termios
        import tty

        tty_state = termios.tcgetattr(stdin.fileno())
        tty.setcbreak(stdin.fileno())
    details = False
    try:
        snap = snapshot(settings)
        with Live(render(snap, filter_agent), refresh_per_second=4, screen=True) as live:
            while True:
                key = _read_key(stdin, REFRESH_SECONDS) if tty_state is not None else _sleep(REFRESH_SECONDS)
                if key == "q":
                    return
                if (answer := approval_action(key, snap["approvals"], filter_agent)) is not None:
                    from dispatcher.ops.approvals import decide  # a person's key: the same decision as `approve`

                    with contextlib.suppress(BridgeError):  # decided or expired meanwhile: the next frame shows it
                        decide(settings, *answer)
                if key == "d":
                    details = not details
                elif key and (key == "a" or key.isdigit()):
                    filter_agent = _next_filter(filter_agent, [a["agent"] for a in snap["agents"]], key)
                snap = snapshot(settings)
                live.update(render(snap, filter_agent, details))
    except KeyboardInterrupt:
        return
    finally:
        if tty_state is not None:
            import termios

            termios.tcsetattr(stdin.fileno(), termios.TCSADRAIN, tty_state)


def _sleep(seconds: float) -> str | None:
    """``_read_key`` without a terminal: waits, and no key was pressed."""
    time.sleep(seconds)
    return None


def _read_key(stdin, timeout: float) -> str | None:
    import os
    import select

    ready, _, _ = select.select([stdin], [], [], timeout)
    if not ready:
        return None
    data = os.read(stdin.fileno(), 16).decode(errors="replace")
    return data[-1:] or None
