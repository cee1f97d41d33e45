"""Reading opencode 1.18.33's ``run --format json`` events (one JSON object per line): status,
usage and cost as opencode reports them (summed over its ``step_finish`` events), the tools a
permission refused, and ``auth_error`` from its error event. Untrusted input: never raises.

The events (docs/opencode.md): per model request one ``step_start``, a ``tool_use`` per finished
tool call (``part.tool``, ``part.state.status`` ``completed``/``error``), one ``step_finish``
(``part.tokens{input,output,reasoning,cache{read,write}}``, ``part.cost`` in USD from the model's
configured price); a failed session adds an ``error`` event (``error.name``, ``error.data.message``,
``error.data.statusCode``) and exits 1. There is no final summary event.
"""

import math
from typing import Any

from dispatcher.clis.results import MAX_DENIED_TOOLS, TOOL_NAME, as_dict, auth_refused, parse_json, sum_known, tokens

CLI = "opencode"
MAX_TOKENS = 10**12  # a larger count is no report of a real run (the ledger's columns are 64-bit)
MAX_COST_USD = 10**6
# opencode's tool result when a permission rule refused the call, or when the run auto-rejected an ask.
DENIAL_TEXTS = ("prevents you from using this specific tool call", "rejected permission to use this specific tool")


def status(events: str, exit_code: int | None, steps: int, errors: int, auth: bool) -> str:
    """opencode's own word on its run (pure): an ``error`` event or a non-zero exit is a failure;
    ``auth``: its error said the API refused the credentials (401/403, ``ProviderAuthError``)."""
    if auth:
        return "auth_error"
    if events == "missing" or (steps == 0 and errors == 0):
        return "no_result"
    if errors:
        return "api_error" if steps == 0 else "error"
    return "ok" if exit_code in (0, None) else "error"


def _cost(part: dict[str, Any]) -> float | None:
    """The step's cost in USD: a finite, non-negative, plausible number, else None."""
    cost = part.get("cost")
    if not isinstance(cost, int | float) or isinstance(cost, bool):
        return None
    return float(cost) if math.isfinite(cost) and 0 <= cost <= MAX_COST_USD else None


def _tokens(counts: dict[str, Any], key: str) -> int | None:
    value = tokens(counts, key)
    return value if value is not None and value <= MAX_TOKENS else None


def diagnostics(text: str | None, exit_code: int | None) -> dict[str, Any]:
    """From ``opencode run --format json``: counts, usage and cost summed over ``step_finish``,
    the tools refused (names only), and the shared ``auth_error`` rule on its error event."""
    diag: dict[str, Any] = {
        "events_json": "missing",
        "exit_code": exit_code,
        "steps": 0,
        "error_events": 0,
        "tool_calls": 0,
        "failed_tool_calls": 0,
        "unparsed_lines": 0,
    }
    usage: dict[str, list[int | None]] = {k: [] for k in ("input", "output", "reasoning", "read", "write")}
    costs: list[float] = []
    denied: set[str] = set()
    auth = False
    lines = [line for line in (text or "").splitlines() if line.strip()]
    for line in lines:
        event = parse_json(line)
        if not isinstance(event, dict):
            diag["unparsed_lines"] += 1
            continue
        kind, part = event.get("type"), as_dict(event.get("part"))
        if kind == "step_finish":
            diag["steps"] += 1
            counts = as_dict(part.get("tokens"))
            for key in ("input", "output", "reasoning"):
                usage[key].append(_tokens(counts, key))
            for key in ("read", "write"):
                usage[key].append(_tokens(as_dict(counts.get("cache")), key))
            if (cost := _cost(part)) is not None:
                costs.append(cost)
        elif kind == "tool_use":
            diag["tool_calls"] += 1
            state = as_dict(part.get("state"))
            if state.get("status") == "error":
                diag["failed_tool_calls"] += 1
                error, tool = state.get("error"), part.get("tool")
                refused = isinstance(error, str) and any(t in error for t in DENIAL_TEXTS)
                if refused and isinstance(tool, str) and TOOL_NAME.fullmatch(tool):
                    denied.add(tool)
        elif kind == "error":
            diag["error_events"] += 1
            error = as_dict(event.get("error"))
            data = as_dict(error.get("data"))
            auth = auth or error.get("name") == "ProviderAuthError"
            auth = auth or auth_refused(data.get("message"), data.get("statusCode"))
    if lines:
        diag["events_json"] = "ok" if diag["unparsed_lines"] < len(lines) else "invalid"
    diag.update(
        reasoning_tokens=sum_known(usage["reasoning"]),
        denied_tools=sorted(denied)[:MAX_DENIED_TOOLS],
        cli=CLI,
        cli_status=status(diag["events_json"], exit_code, diag["steps"], diag["error_events"], auth),
        # 0 is what a model without a configured price reports: unknown, so the agent's prices apply.
        cost_usd=round(sum(costs), 10) if sum(costs) > 0 else None,
        input_tokens=sum_known(usage["input"]),
        output_tokens=sum_known(usage["output"]),
        cache_read_tokens=sum_known(usage["read"]),
        cache_write_tokens=sum_known(usage["write"]),
    )
    return diag
