"""Codex's result: the ``codex exec --json`` event stream and its stderr (the worker log)."""

import re
from typing import Any

from dispatcher.clis.results import as_dict, auth_refused, parse_json, sum_known, tokens


def codex_status(
    events: str, exit_code: int | None, completed: int, failed: int, errors: int, auth: bool = False
) -> str:
    """Codex's ``--json`` stream: a ``turn.failed`` (or a top-level ``error``) is a failed turn;
    ``auth``: its error said the API refused the credentials (401/403)."""
    if events == "missing" or (completed == 0 and failed == 0 and errors == 0):
        return "no_result"
    if auth and completed == 0:
        return "auth_error"
    if failed or errors:
        return "api_error" if completed == 0 else "error"
    return "ok" if exit_code in (0, None) else "error"


# What Codex 0.171.0 reports when a permission refused a tool call. In the --json events: a
# command_execution that failed on the sandbox (the OS error of its write); in its stderr
# (the attempt's worker.log), one ERROR line per refused call: the permission hook's denial
# (whose reason names the tool), a command its safety check or execpolicy rejected, a patch
# outside the writable roots, a patch the sandbox stopped.
_CODEX_SANDBOX_ERRORS = re.compile(r"Read-only file system|Operation not permitted|Permission denied")
_CODEX_LOG_DENIALS = (
    (re.compile(r"blocked by PreToolUse hook: denied (exec_command|apply_patch)\b"), None),
    (re.compile(r"error=exec_command failed: CreateProcess \{ message: \\?\"Rejected\("), "exec_command"),
    (re.compile(r"error=patch rejected: "), "apply_patch"),
    (re.compile(r"^Failed to write file ", re.MULTILINE), "apply_patch"),
)


def codex_denied_tools(events: list[dict], log: str | None) -> list[str]:
    """The tools Codex reported refused (names only, sorted, unique; pure)."""
    denied: set[str] = set()
    for event in events:
        item = as_dict(event.get("item"))
        output = item.get("aggregated_output")
        if (
            event.get("type") == "item.completed"
            and item.get("type") == "command_execution"
            and item.get("status") == "failed"
            and isinstance(output, str)
            and _CODEX_SANDBOX_ERRORS.search(output)
        ):
            denied.add("exec_command")
    for pattern, tool in _CODEX_LOG_DENIALS:
        for found in pattern.finditer(log or ""):
            denied.add(tool or found.group(1))
    return sorted(denied)


def codex_diagnostics(text: str | None, exit_code: int | None, log: str | None = None) -> dict[str, Any]:
    """From ``codex exec --json``: counts of events, usage summed over ``turn.completed``; with
    its stderr (``log``), the tools a permission refused (``denied_tools``)."""
    diag: dict[str, Any] = {
        "events_json": "missing",
        "exit_code": exit_code,
        "turns_completed": 0,
        "turns_failed": 0,
        "error_events": 0,
        "warning_items": 0,
        "tool_calls": 0,
        "failed_tool_calls": 0,
        "unparsed_lines": 0,
        "reasoning_tokens": None,
    }
    usage: dict[str, list[int | None]] = {k: [] for k in ("input", "cached", "cache_write", "output", "reasoning")}
    lines = [line for line in (text or "").splitlines() if line.strip()]
    parsed: list[dict] = []
    auth = False
    for line in lines:
        event = parse_json(line)
        if not isinstance(event, dict):
            diag["unparsed_lines"] += 1
            continue
        parsed.append(event)
        kind = event.get("type")
        item = as_dict(event.get("item"))
        if kind == "turn.completed":
            diag["turns_completed"] += 1
            u = event.get("usage")
            usage["input"].append(tokens(u, "input_tokens"))
            usage["cached"].append(tokens(u, "cached_input_tokens"))
            usage["cache_write"].append(tokens(u, "cache_write_input_tokens"))
            usage["output"].append(tokens(u, "output_tokens"))
            usage["reasoning"].append(tokens(u, "reasoning_output_tokens"))
        elif kind == "turn.failed":
            diag["turns_failed"] += 1
            auth = auth or auth_refused(as_dict(event.get("error")).get("message"))
        elif kind == "error":
            diag["error_events"] += 1
            auth = auth or auth_refused(event.get("message"))
        elif kind == "item.completed" and item.get("type") == "error":
            diag["warning_items"] += 1
        elif kind == "item.completed" and item.get("type") == "mcp_tool_call":
            diag["tool_calls"] += 1
            diag["failed_tool_calls"] += item.get("status") == "failed"
    if lines:
        diag["events_json"] = "ok" if diag["unparsed_lines"] < len(lines) else "invalid"
    diag["reasoning_tokens"] = sum_known(usage["reasoning"])
    diag["denied_tools"] = codex_denied_tools(parsed, log)
    diag.update(
        cli="codex",
        cli_status=codex_status(
            diag["events_json"],
            exit_code,
            diag["turns_completed"],
            diag["turns_failed"],
            diag["error_events"],
            auth,
        ),
        cost_usd=None,
        input_tokens=sum_known(usage["input"]),
        output_tokens=sum_known(usage["output"]),
        cache_read_tokens=sum_known(usage["cached"]),
        cache_write_tokens=sum_known(usage["cache_write"]),
    )
    return diag
