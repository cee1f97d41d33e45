"""``agent-bridge show MESSAGE_ID``: one message as a person needs it after a dispatch.

The message, its replies, and its attempt: outcome, the CLI's own status, cost and tokens,
the permission level the worker ran at and the tools its CLI denied (names only), and where
the attempt's private files are. Read-only: it never writes the store or creates it.
"""

import re
from pathlib import Path
from typing import Any

from dispatcher.bridge.approvals import state as approval_state
from dispatcher.core.clock import iso, now
from dispatcher.core.diffstat import worktree_line, worktree_summary
from dispatcher.core.errors import BridgeError
from dispatcher.core.locations import LocationsLike, shown
from dispatcher.core.private_files import read_untrusted
from dispatcher.core.reasons import failure_reason, reason_code
from dispatcher.store import Connection, Row
from dispatcher.store import approvals as approval_rows
from dispatcher.store.attempts import get_attempt
from dispatcher.store.grants import grant_row
from dispatcher.store.messages import fetch_message
from dispatcher.store.readonly import open_read_only
from dispatcher.store.views import replies_to

ATTEMPT_FIELDS = (
    "state",
    "outcome",
    "error_kind",
    "cli_status",
    "exit_code",
    "duration_seconds",
    "cost_usd",
    "input_tokens",
    "output_tokens",
    "max_cost_usd",
    "cost_overshoot_usd",
    "permission_level",
    "denied_tools",
)


# The error kinds a launcher's own exit code gives (dispatch/outcome.py): its last line says why.
LAUNCHER_KINDS = ("launcher_usage", "cli_not_found", "permissions_unenforceable")
# A launcher's own line (launchers/_common.sh's `fail`): `<name>.sh: <reason>`.
_LAUNCHER_LINE = re.compile(r"^[A-Za-z0-9_.-]+\.sh: \S.*$", re.MULTILINE)
LAUNCHER_LOG_BYTES = 64 * 1024
MAX_LAUNCHER_LINE = 240


def launcher_said(attempt_dir: Path, error_kind: str | None) -> str | None:
    """The launcher's own one-line reason from the attempt's ``worker.log``, when the attempt ended on
    one of the launcher's exit codes (it failed before any CLI ran, so the line is the launcher's)."""
    if error_kind not in LAUNCHER_KINDS:
        return None
    log = read_untrusted(attempt_dir, "worker.log", LAUNCHER_LOG_BYTES)
    lines = _LAUNCHER_LINE.findall(log or "")
    return lines[-1][:MAX_LAUNCHER_LINE] if lines else None


def attempt_headline(attempt: dict[str, Any]) -> str:
    """The outcome led by its cause, then the details that differ from it: ``failed (auth_error);
    error_kind no_evidence`` (the CLI's status says why; the bridge's kind is how it looked)."""
    outcome = attempt["outcome"] or attempt["state"]
    code = reason_code(attempt["outcome"], attempt["error_kind"], attempt["cli_status"])
    if code is None:
        why = f" ({attempt['error_kind']})" if attempt["error_kind"] else ""
        return f"{outcome}{why}, cli_status {attempt['cli_status'] or 'unknown'}"
    details = [f"{name} {attempt[name]}" for name in ("error_kind", "cli_status") if attempt[name] not in (None, code)]
    return f"{outcome} ({code})" + (f"; {', '.join(details)}" if details else "")


def _replies(conn: Connection, message_id: int) -> list[dict[str, Any]]:
    return [{**row, "created_at": iso(row["created_at"])} for row in replies_to(conn, message_id)]


def _attempt(conn: Connection, message_id: int, runtime: Path) -> dict[str, Any] | None:
    row = get_attempt(conn, message_id)
    if row is None:
        return None
    attempt_dir = runtime / "attempts" / str(message_id)
    return {
        **{field: row[field] for field in ATTEMPT_FIELDS},
        "started_at": iso(row["started_at"]),
        "finished_at": iso(row["finished_at"]),
        "attempt_dir": str(attempt_dir) if attempt_dir.is_dir() else None,
        "reason": failure_reason(row["outcome"], row["error_kind"], row["cli_status"]),
        "launcher_said": launcher_said(attempt_dir, row["error_kind"]),
        "worktree": worktree_summary(row),
        "approvals": [
            {
                "id": a["id"],
                "tool": a["tool"],
                "decision": approval_state(a, now()),
                "decided_by": a["decided_by"],
                "decided_at": iso(a["decided_at"]),
                "requested_at": iso(a["requested_at"]),
            }
            for a in approval_rows.of_attempt(conn, message_id)
        ],
    }


def _grant(conn: Connection, message_id: int) -> dict[str, Any] | None:
    """A person's grant for this task (``retry --allow``): what, by whom, when, and the task it retries."""
    import json

    row = grant_row(conn, message_id)
    if row is None:
        return None
    return {
        "retry_of": row["retry_of"],
        "grants": json.loads(row["grants"]),
        "granted_by": row["granted_by"],
        "granted_at": iso(row["granted_at"]),
    }


def message_fields(row: Row) -> dict[str, Any]:
    """One message as a person reads it (``show``, ``inbox``): who, what kind, when, the text."""
    return {
        "id": row["id"],
        "sender": row["sender"],
        "recipient": row["recipient"],
        "kind": row["kind"],
        "origin": row["origin"],
        "reply_to": row["reply_to"],
        "conversation_id": row["conversation_id"],
        "created_at": iso(row["created_at"]),
        "acknowledged_at": iso(row["acknowledged_at"]),
        "text": row["text"],
    }


def message_report(settings: LocationsLike, message_id: int) -> dict[str, Any]:
    conn = open_read_only(settings.db, named_rows=True)
    if conn is None:
        raise BridgeError(
            "message_not_found", f"there is no store at {shown(settings.db)} yet, so no message #{message_id}."
        )
    try:
        row = fetch_message(conn, message_id)
        if row is None:
            raise BridgeError(
                "message_not_found", f"there is no message #{message_id} in {shown(settings.db)}; check the id."
            )
        return {
            **message_fields(row),
            "replies": _replies(conn, message_id),
            "dispatch": _attempt(conn, message_id, settings.private_dir()),
            "grant": _grant(conn, message_id),
        }
    finally:
        conn.close()


def _first_line(text: str, width: int = 100) -> str:
    line = text.splitlines()[0] if text else ""
    return line if len(line) <= width and "\n" not in text.strip() else line[:width] + " …"


def reason_lines(attempt: dict[str, Any]) -> list[str]:
    """Why it failed and what to do, then the launcher's own line when it said one."""
    lines = [f"  why: {attempt['reason']}"] if attempt["reason"] else []
    if attempt["launcher_said"]:
        lines.append(f"  the launcher said: {attempt['launcher_said']}")
    return lines


def render_report(report: dict[str, Any]) -> str:
    """The report as lines for a terminal: the dispatch first, since that is what a person asks about."""
    head = f"message #{report['id']} {report['kind'] or 'message'} {report['sender']} -> {report['recipient']}"
    lines = [
        head
        + f", sent {report['created_at']}, "
        + (f"acknowledged {report['acknowledged_at']}" if report["acknowledged_at"] else "not acknowledged")
    ]
    if (grant := report.get("grant")) is not None:
        lines.append(
            f"retry of #{grant['retry_of']}, granted {', '.join(grant['grants'])} for this task alone"
            f" by {grant['granted_by']} at {grant['granted_at']}"
        )
    attempt = report["dispatch"]
    if attempt is None:
        lines.append("dispatch: none (no headless worker was started for it)")
    else:
        lines.append(
            f"dispatch: {attempt_headline(attempt)}, permission level {attempt['permission_level'] or 'unknown'}"
        )
        lines += reason_lines(attempt)
        if attempt["denied_tools"]:
            lines.append(f"  denied by the CLI: {attempt['denied_tools'].replace(',', ', ')}")
        cost = "unknown" if attempt["cost_usd"] is None else f"${attempt['cost_usd']:.4f}"
        tokens = f"{attempt['input_tokens'] or 0} in / {attempt['output_tokens'] or 0} out"
        lines.append(
            f"  cost {cost}, tokens {tokens}, started {attempt['started_at']}, finished {attempt['finished_at'] or '-'}"
        )
        if attempt["attempt_dir"]:
            lines.append(f"  attempt files: {attempt['attempt_dir']}")
        if attempt["worktree"]:
            lines.append(f"  worktree: {worktree_line(attempt['worktree'])}")
        for asked in attempt.get("approvals", ()):
            by = f" by {asked['decided_by']} at {asked['decided_at']}" if asked["decided_by"] else ""
            lines.append(f"  approval #{asked['id']} {asked['tool']}: {asked['decision']}{by}")
    lines += ["", report["text"], ""]
    for reply in report["replies"]:
        lines.append(
            f"reply #{reply['id']} {reply['kind']} from {reply['sender']}"
            f"{' (system)' if reply['origin'] == 'system' else ''}: {_first_line(reply['text'])}"
        )
    return "\n".join(lines)
