"""``agent-bridge approvals``, ``approve`` and ``deny``: a person answers a worker's request for a
tool beyond its level (docs/approvals.md). The only way a request is decided: no MCP tool can.
"""

import json
import os
import pwd
from typing import Any

from dispatcher.bridge import approvals
from dispatcher.core import clock
from dispatcher.core.clock import iso
from dispatcher.core.errors import BridgeError
from dispatcher.core.locations import LocationsLike
from dispatcher.store import approvals as rows
from dispatcher.store import open_store, store_errors
from dispatcher.store.store_clock import store_now


def person() -> str:
    """Who decides: this process's OS user (recorded on the request)."""
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return f"uid {os.getuid()}"


def _listed(row: Any, now: float) -> dict[str, Any]:
    return {
        "id": row["id"],
        "agent": row["agent"],
        "task_id": row["message_id"],
        "tool": row["tool"],
        "age_seconds": round(max(0.0, now - row["requested_at"]), 1),
        "state": approvals.state(row, now),
        "waits_until": iso(row["expires_at"]),
        "decided_by": row["decided_by"],
        "decided_at": iso(row["decided_at"]),
    }


def waiting(settings: LocationsLike) -> list[dict[str, Any]]:
    """The requests a person can still answer, oldest first (never their input)."""
    with store_errors():
        conn = open_store(settings.db)
        try:
            now = store_now(conn)
            return [_listed(row, now) for row in rows.waiting(conn, now)]
        finally:
            conn.close()


def one(settings: LocationsLike, approval_id: int) -> dict[str, Any]:
    """One request with its input, as the worker's CLI gave it."""
    with store_errors():
        conn = open_store(settings.db)
        try:
            now = store_now(conn)
            row = rows.get_request(conn, approval_id)
        finally:
            conn.close()
    if row is None:
        raise BridgeError(
            "approval_unknown", f"there is no approval #{approval_id}; `agent-bridge approvals` lists those waiting."
        )
    return {**_listed(row, now), "input": json.loads(row["input"])}


def decide(settings: LocationsLike, approval_id: int, decision: str) -> dict[str, Any]:
    with store_errors():
        conn = open_store(settings.db)
        try:
            now = store_now(conn)
            row = approvals.decide(conn, approval_id, decision, person(), now)
            decided = rows.get_request(conn, approval_id)
        finally:
            conn.close()
    return _listed(decided or row, clock.now())


def render(listed: list[dict[str, Any]]) -> str:
    if not listed:
        return "no approval waits"
    lines = [f"{'id':>5}  {'agent':<12} {'task':>6}  {'tool':<24} age"]
    for item in listed:
        lines.append(
            f"{item['id']:>5}  {item['agent']:<12} {item['task_id']:>6}  {item['tool']:<24} {item['age_seconds']:.0f}s"
        )
    lines.append("`agent-bridge approvals show ID` shows a request's input; `approve ID [--for-attempt]` or `deny ID`.")
    return "\n".join(lines)
