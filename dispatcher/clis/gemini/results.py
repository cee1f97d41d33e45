"""Gemini CLI's result: the object of ``gemini -o json`` (or, on an error, its stderr), and its exit code."""

import json
from typing import Any

from dispatcher.clis.results import (
    MAX_DENIED_TOOLS,
    TOOL_NAME,
    as_dict,
    auth_refused,
    enum_word,
    integer,
    parse_json,
    sum_known,
    tokens,
)

# Gemini CLI's documented exit codes; an API failure exits with its HTTP status mod 256.
GEMINI_EXIT_STATUSES = {
    0: "ok",
    41: "auth_error",
    42: "input_error",
    44: "error",
    52: "config_error",
    53: "max_turns",
    54: "error",
    55: "untrusted_workspace",
    130: "cancelled",
}
_HTTP_EXITS = {status % 256 for status in range(400, 512)}  # 144..255: never a documented code


def _objects(text: str) -> list[Any]:
    """The whole text as JSON; else each line, last first; else each (pretty-printed) object
    starting at the beginning of a line, last first (stderr lines around it are skipped)."""
    whole = parse_json(text)
    if whole is not None:
        return [whole]
    found = [parse_json(line) for line in reversed(text.splitlines())]
    decoder = json.JSONDecoder()
    starts = [0] if text.startswith("{") else []
    starts += [i + 1 for i, ch in enumerate(text) if ch == "\n" and text[i + 1 : i + 2] == "{"]
    for start in reversed(starts[-64:]):
        try:
            found.append(decoder.raw_decode(text, start)[0])
        except (ValueError, RecursionError):
            continue
    return found


def gemini_status(result_json: str, exit_code: int | None, error_code: int | None, auth: bool = False) -> str:
    """Gemini: its exit code first (41 auth, 42 input, 53 turn limit, ...), then the JSON
    ``error.code``; ``auth``: its error said the API refused the key (an HTTP exit otherwise)."""
    code = exit_code if exit_code not in (None, 1) else error_code if error_code is not None else exit_code
    if auth and code != 0:
        return "auth_error"
    if code in GEMINI_EXIT_STATUSES:
        status = GEMINI_EXIT_STATUSES[code]
        return "no_result" if status == "ok" and result_json != "ok" else status
    if code is not None and code in _HTTP_EXITS:
        return "api_error"
    if code is None and result_json != "ok":
        return "no_result"
    return "error"


def gemini_denied_tools(by_name: Any) -> list[str]:
    """The tools Gemini refused to run, by name, from ``stats.tools.byName`` of ``-o json``.

    Gemini 0.61.0 counts a decision (``accept``, ``auto_accept``, ...) for every call it let run;
    a call refused before it ran (denied by policy, a path outside the workspace, a tool that
    was never offered) fails without one. So a name whose failed calls outnumber its runs that
    failed after a decision is a denied tool. Gemini does not tell these refusals apart in its
    stats; its chat record words them ("Tool execution denied by policy.", "Path not in
    workspace: ...")."""
    if not isinstance(by_name, dict):
        return []
    denied = []
    for name, entry in by_name.items():
        if not isinstance(entry, dict) or not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
            continue
        count, fail = integer(entry.get("count")) or 0, integer(entry.get("fail")) or 0
        decisions = as_dict(entry.get("decisions"))
        decided = sum(v for v in (integer(x) for x in decisions.values()) if v is not None and v > 0)
        rejected = integer(decisions.get("reject")) or 0
        if rejected > 0 or (fail > 0 and count > decided):
            denied.append(name)
    return sorted(denied)[:MAX_DENIED_TOOLS]


def gemini_diagnostics(text: str | None, exit_code: int | None) -> dict[str, Any]:
    """From ``gemini -o json`` (one object: ``stats`` or ``error``) or the ``result`` line of stream-json."""
    status, doc = "missing", None
    if text is not None and text.strip():
        status = "invalid"
        doc = next(
            (
                c
                for c in _objects(text)
                if isinstance(c, dict) and ("stats" in c or "error" in c or c.get("type") == "result")
            ),
            None,
        )
        if doc is not None:
            status = "ok"
    doc = doc or {}
    stats = as_dict(doc.get("stats"))
    error = as_dict(doc.get("error"))
    models = as_dict(stats.get("models"))
    per_model = [m.get("tokens") for m in models.values() if isinstance(m, dict)]
    tools = as_dict(stats.get("tools"))
    if per_model:  # -o json: tokens per model
        inputs = sum_known([tokens(t, "input", "prompt") for t in per_model])
        outputs = sum_known([tokens(t, "candidates", "output") for t in per_model])
        cached = sum_known([tokens(t, "cached") for t in per_model])
    else:  # stream-json's result line: flat totals
        inputs, outputs, cached = (
            tokens(stats, "input_tokens"),
            tokens(stats, "output_tokens"),
            tokens(stats, "cached"),
        )
    error_code = integer(error.get("code"))
    api = [m.get("api") for m in models.values() if isinstance(m, dict)]
    return {
        "result_json": status,
        "exit_code": exit_code,
        "error_type": enum_word(error.get("type")),
        "error_code": error_code,
        "models": len(models),
        "api_requests": sum_known([tokens(a, "totalRequests") for a in api]),
        "api_errors": sum_known([tokens(a, "totalErrors") for a in api]),
        "tool_calls": integer(tools.get("totalCalls")) if tools else integer(stats.get("tool_calls")),
        "tool_failures": integer(tools.get("totalFail")) if tools else None,
        "denied_tools": gemini_denied_tools(tools.get("byName")) if tools else None,
        "cli": "gemini",
        "cli_status": gemini_status(
            status, exit_code, error_code, auth_refused(error.get("message"), error_code if error_code != 1 else None)
        ),
        "cost_usd": None,
        "input_tokens": inputs,
        "output_tokens": outputs,
        "cache_read_tokens": cached,
        "cache_write_tokens": None,
    }
