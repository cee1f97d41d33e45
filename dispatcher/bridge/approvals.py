"""Approvals: a worker asks a person for a tool beyond its level, and only a person decides
(docs/approvals.md). The table is ``store.approvals``.

- A request is made for a worker only, by its server (``approval_prompt``) or by its CLI's shell
  hook (``clis.shell_approval``), each with the attempt proven (``WorkerScope``: the attempt's
  token), for its own attempt, and only when its agent's profile sets ``ask``. A call a person
  already allowed for the rest of the attempt (``covers``) is allowed at once, without a new request.
- It waits until ``waits_until``: the agent's ``approval_timeout_seconds``, never past the
  attempt's own deadline (less a margin for the worker to answer ``blocked``). No decision by
  then is a denial.
- A decision is taken by ``agent-bridge approve`` / ``deny`` (or ``top``), never by an MCP tool:
  no tool of any role calls ``decide``.
"""

import json
from collections.abc import Awaitable, Callable
from typing import Any

from dispatcher.bridge.worker_scope import WorkerScope
from dispatcher.core.errors import BridgeError
from dispatcher.store import Connection, Row, write_transaction
from dispatcher.store import approvals as rows
from dispatcher.store.attempts import get_attempt

# Left to the worker after a denial by timeout: time to answer ``blocked`` before its own deadline.
ANSWER_MARGIN_SECONDS = 30.0
MAX_INPUT_BYTES = 65536
# How often a waiting worker looks at its request again (a person's decision is a store write).
POLL_SECONDS = 0.5


def waits_until(now: float, approval_timeout: float, attempt_deadline: float | None) -> float:
    """Until when a request made at ``now`` waits (pure): its timeout, capped by the attempt's
    deadline less ``ANSWER_MARGIN_SECONDS`` (and never before ``now``)."""
    until = now + approval_timeout
    if attempt_deadline is not None:
        until = min(until, attempt_deadline - ANSWER_MARGIN_SECONDS)
    return max(until, now)


def state(row: Row | dict[str, Any], now: float) -> str:
    """A request's state (pure): its decision, else ``waiting`` before its expiry, else ``expired``
    (its worker took that as a denial)."""
    if row["decision"] is not None:
        return str(row["decision"])
    return "waiting" if now < row["expires_at"] else "expired"


def prompt_answer(outcome: str, tool: str, tool_input: Any) -> dict[str, Any]:
    """What Claude Code's ``--permission-prompt-tool`` reads back (pure): allow with the input
    unchanged, or deny with a message the model sees, which names the tool."""
    if outcome in ("allow_once", "allow_attempt"):
        return {"behavior": "allow", "updatedInput": tool_input}
    why = "a person denied it" if outcome == "deny" else "no person answered in time"
    return {
        "behavior": "deny",
        "message": f"{tool} was not approved ({why}). Do not try it another way: answer "
        f"'blocked: denied {tool}' with what you needed it for.",
    }


def covers(allowed_input: Any, tool_input: Any) -> bool:
    """Whether a request a person allowed for the rest of the attempt (its input) covers a new
    call of the same tool (pure): every call of a tool, except a shell command (an input with a
    ``command``): that same command only, not another one of the same program."""
    command = tool_input.get("command") if isinstance(tool_input, dict) else None
    if not isinstance(command, str):
        return True
    return isinstance(allowed_input, dict) and allowed_input.get("command") == command


async def decision(
    read: Callable[[], Row | None], now: Callable[[], float], sleep: Callable[[float], Awaitable[Any]]
) -> str:
    """Wait for a person's decision on a request (``read`` gives its row): the decision once taken,
    or ``expired`` once it expired (or is gone). The one waiting rule of the MCP ``approval_prompt``
    and the shell hooks: it looks again every ``POLL_SECONDS``, never past the request's expiry."""
    while True:
        row = read()
        at = now()
        if row is None:
            return "expired"
        if (outcome := state(row, at)) != "waiting":
            return outcome
        await sleep(min(POLL_SECONDS, max(0.0, row["expires_at"] - at)))


def encode_input(tool_input: Any) -> str:
    text = json.dumps(tool_input, sort_keys=True, ensure_ascii=False)
    if len(text.encode()) > MAX_INPUT_BYTES:
        raise BridgeError("approval_input_too_large", f"the tool's input is over {MAX_INPUT_BYTES} bytes; denied.")
    return text


def ask(
    conn: Connection, scope: WorkerScope, tool: str, tool_input: Any, now: float, approval_timeout: float
) -> tuple[int | None, str | None]:
    """(the request's id, None) for a new request, or (None, 'allow_attempt') when a person
    allowed this call for this attempt already (``covers``). One transaction; ``worker_scope`` outside its attempt."""
    text = encode_input(tool_input)
    with write_transaction(conn):
        scope.own_message(conn)  # the binding: token, agent, unsettled attempt
        message_id = int(scope.message_id or 0)
        if any(covers(json.loads(allowed), tool_input) for allowed in rows.allowed_for_attempt(conn, message_id, tool)):
            return None, "allow_attempt"
        attempt = get_attempt(conn, message_id)
        deadline = attempt["deadline"] if attempt is not None else None
        until = waits_until(now, approval_timeout, deadline)
        return rows.insert_request(
            conn, message_id=message_id, agent=scope.agent, tool=tool, tool_input=text, now=now, expires_at=until
        ), None


def decide(conn: Connection, approval_id: int, decision: str, by: str, now: float) -> Row:
    """A person's decision on a waiting request, recorded with who and when; the request as it was.
    ``approval_unknown`` / ``approval_closed`` (decided or expired already), nothing changed."""
    if decision not in rows.DECISIONS:
        raise ValueError(decision)
    with write_transaction(conn):
        row = rows.get_request(conn, approval_id)
        if row is None:
            raise BridgeError(
                "approval_unknown",
                f"there is no approval #{approval_id}; `agent-bridge approvals` lists those waiting.",
            )
        if not rows.decide(conn, approval_id, decision, by, now):
            raise BridgeError(
                "approval_closed",
                f"approval #{approval_id} is {state(row, now)} already; nothing was changed "
                "(a request that expired was denied to its worker).",
            )
        return row
