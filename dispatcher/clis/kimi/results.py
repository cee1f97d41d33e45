"""Kimi Code's result: its ``--output-format stream-json`` lines, the wire of its session
(``usage.record``, ``turn.ended``) and its stderr (the worker log)."""

import re
from typing import Any

from dispatcher.clis.results import (
    MAX_DENIED_TOOLS,
    TOOL_NAME,
    as_dict,
    as_list,
    auth_refused,
    enum_word,
    integer,
    parse_json,
    sum_known,
    tokens,
)


def _count_stream_line(diag: dict[str, Any], obj: dict) -> None:
    role, kind = obj.get("role"), obj.get("type")
    if role == "meta" and kind == "system.version":
        diag["cli_version"] = enum_word(obj.get("version"))
    elif role == "meta" and kind == "turn.step.retrying":
        diag["retries"] += 1
        diag["last_retry_error_name"] = enum_word(obj.get("error_name"))
        diag["last_retry_status_code"] = integer(obj.get("status_code"))
    elif role == "meta" and kind == "session.resume_hint":
        diag["completed_with_resume_hint"] = True
    elif role == "assistant":
        diag["assistant_messages"] += 1
        calls = as_list(obj.get("tool_calls"))
        for call in calls:
            diag["tool_calls"] += 1
            function = call.get("function") if isinstance(call, dict) else None
            name = function.get("name") if isinstance(function, dict) else None
            if isinstance(name, str) and name.startswith("mcp__agent_bridge__"):
                diag["bridge_tool_calls"] += 1
    elif role == "tool":
        diag["tool_results"] += 1


KIMI_RETRYABLE_EXIT = 75
_KIMI_FAILED_REASONS = ("failed", "error", "cancelled", "aborted", "interrupted")


def kimi_status(
    stream_json: str,
    exit_code: int | None,
    turn_reason: str | None,
    turn_error_code: str | None,
    retryable: bool | None = None,
    auth: bool = False,
) -> str:
    """Kimi has no result object: its exit code (75: retryable), then the wire's last turn.

    Kimi 2.1.0 exits 0 or 1 only; whether a failed turn is worth retrying is the wire's
    ``turn.ended.error.retryable`` (a rate limit, a refused connection). ``auth``: it said it
    has no usable credentials (on stderr, or a 401/403 from the API).
    """
    if auth and exit_code != 0:
        return "auth_error"
    if exit_code == KIMI_RETRYABLE_EXIT or (exit_code != 0 and retryable is True):
        return "retryable"
    stepped_out = [r for r in (turn_reason, turn_error_code) if r and ("max_step" in r or "step_limit" in r)]
    if stepped_out:
        return "max_turns"
    if exit_code == 0 and turn_error_code is None and turn_reason not in _KIMI_FAILED_REASONS:
        return "ok"
    if exit_code is None and stream_json == "missing":
        return "no_result"
    if turn_error_code is not None and ("api" in turn_error_code or "provider" in turn_error_code):
        return "api_error"
    return "error"


# Kimi's refusals, each a tool result with ``isError`` in the wire (the denied tool's name comes
# from its ``tool.call`` event): a call of a tool the agent file does not list; the permission
# hook's refusal (clis/kimi/profile.py); Kimi's own path checks (a symlink that leads out of
# the working directory, a dangling or too deep link, a sensitive file such as .env or a key).
_KIMI_NOT_FOUND = re.compile(r'Tool "[^"\n]{1,200}" not found')
_KIMI_HOOK_DENIAL = re.compile(r"Denied by the Agent Bridge permission profile \(level [a-z]+\): ")
_KIMI_PATH_BLOCKED = re.compile(r'"[^\n]+ Access is blocked(\.| to protect secrets\.|; use the real path [^\n]+\.)')


def _kimi_denials(events: list[dict]) -> list[str]:
    """The names of the tools whose calls Kimi refused (not offered, refused by the hook or by
    its own path checks), sorted and unique; never their arguments."""
    names: dict[str, str] = {}
    denied: set[str] = set()
    for event in events:
        loop = event.get("event") if event.get("type") == "context.append_loop_event" else None
        if not isinstance(loop, dict):
            continue
        call_id = loop.get("toolCallId")
        if loop.get("type") == "tool.call" and isinstance(call_id, str) and isinstance(loop.get("name"), str):
            names[call_id] = loop["name"]
        elif loop.get("type") == "tool.result" and isinstance(loop.get("result"), dict):
            result = loop["result"]
            output = result.get("output")
            if (
                result.get("isError") is True
                and isinstance(output, str)
                and (
                    _KIMI_NOT_FOUND.fullmatch(output.strip())
                    or _KIMI_HOOK_DENIAL.match(output)
                    or _KIMI_PATH_BLOCKED.fullmatch(output.strip())
                )
            ):
                name = names.get(call_id) if isinstance(call_id, str) else None
                if name is not None and TOOL_NAME.fullmatch(name):
                    denied.add(name)
    return sorted(denied)[:MAX_DENIED_TOOLS]


def kimi_diagnostics(
    stream: str | None, wire: str | None, exit_code: int | None, log: str | None = None
) -> dict[str, Any]:
    """From Kimi's ``--output-format stream-json`` lines (counts), its session's wire.jsonl
    (the last turn, and ``denied_tools``: the tools whose calls Kimi refused) and its stderr
    (``log``: whether it said it is not logged in)."""
    diag: dict[str, Any] = {
        "stream_json": "missing",
        "exit_code": exit_code,
        "cli_version": None,
        "assistant_messages": 0,
        "tool_calls": 0,
        "bridge_tool_calls": 0,
        "tool_results": 0,
        "retries": 0,
        "last_retry_error_name": None,
        "last_retry_status_code": None,
        "completed_with_resume_hint": False,
        "unparsed_lines": 0,
        "turn_reason": None,
        "turn_error_code": None,
        "turn_error_name": None,
        "turn_error_retryable": None,
    }
    usage: list[dict] = []
    lines = [line for line in (stream or "").splitlines() if line.strip()]
    for line in lines:
        obj = parse_json(line)
        if isinstance(obj, dict):
            _count_stream_line(diag, obj)
        else:
            diag["unparsed_lines"] += 1
    if lines:
        diag["stream_json"] = "ok" if diag["unparsed_lines"] < len(lines) else "invalid"
    events = [event for line in (wire or "").splitlines() if isinstance(event := parse_json(line), dict)]
    for event in events:
        if event.get("type") == "turn.ended":
            error = as_dict(event.get("error"))
            diag["turn_reason"] = enum_word(event.get("reason"))
            diag["turn_error_code"] = enum_word(error.get("code"))
            diag["turn_error_name"] = enum_word(error.get("name"))
            diag["turn_error_retryable"] = error.get("retryable") if isinstance(error.get("retryable"), bool) else None
        elif event.get("type") == "usage.record" and isinstance(event.get("usage"), dict):
            usage.append(event["usage"])
    diag.update(
        cli="kimi",
        cli_status=kimi_status(
            diag["stream_json"],
            exit_code,
            diag["turn_reason"],
            diag["turn_error_code"],
            diag["turn_error_retryable"],
            auth_refused(log, diag["last_retry_status_code"]),
        ),
        cost_usd=None,  # Kimi reports tokens, never a price
        input_tokens=sum_known([tokens(u, "inputOther") for u in usage]),
        output_tokens=sum_known([tokens(u, "output") for u in usage]),
        cache_read_tokens=sum_known([tokens(u, "inputCacheRead") for u in usage]),
        cache_write_tokens=sum_known([tokens(u, "inputCacheCreation") for u in usage]),
        denied_tools=_kimi_denials(events),
    )
    return diag
