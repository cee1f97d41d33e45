"""Claude Code's result: the ``type: result`` object of ``claude -p --output-format stream-json``."""

from typing import Any

from dispatcher.clis.results import (
    as_dict,
    auth_refused,
    denied_tool_names,
    enum_word,
    integer,
    number,
    parse_json,
    sum_known,
    tokens,
)


def claude_status(
    result_json: str,
    subtype: str | None,
    terminal_reason: str | None,
    is_error: bool | None,
    api_error_status: int | None = None,
    auth: bool = False,
) -> str:
    """Claude's own status, on ``subtype`` plus ``terminal_reason`` (never ``is_error`` alone).

    Traps: an API failure arrives as ``subtype: success`` with ``is_error: true`` and
    ``terminal_reason: api_error``, and so does "Not logged in" (``auth``: an ``auth_error``);
    a budget stop is a budget stop whatever ``is_error`` says.
    """
    if result_json != "ok":
        return "no_result"
    if auth and is_error is not False:
        return "auth_error"
    if subtype == "error_max_budget_usd" or terminal_reason in ("budget_exhausted", "max_budget_usd"):
        return "budget_exceeded"
    if subtype == "error_max_turns" or terminal_reason == "max_turns":
        return "max_turns"
    if terminal_reason == "api_error" or api_error_status is not None:
        return "api_error"
    if subtype == "success" and is_error is False and terminal_reason in (None, "completed"):
        return "ok"
    return "error"


def _claude_usage(usage: Any, model_usage: Any) -> Any:
    """``usage``, unless it is all zeros while ``modelUsage`` counted tokens: a budget stop
    (2.1.332) reports ``usage`` as zeros and the real counts only per model."""
    if tokens(usage, "input_tokens") or tokens(usage, "output_tokens") or not isinstance(model_usage, dict):
        return usage
    per_model = [m for m in model_usage.values() if isinstance(m, dict)]
    if not per_model:
        return usage
    return {
        "input_tokens": sum_known([tokens(m, "inputTokens") for m in per_model]),
        "output_tokens": sum_known([tokens(m, "outputTokens") for m in per_model]),
        "cache_read_input_tokens": sum_known([tokens(m, "cacheReadInputTokens") for m in per_model]),
        "cache_creation_input_tokens": sum_known([tokens(m, "cacheCreationInputTokens") for m in per_model]),
    }


def claude_stream_usage(lines: list[Any]) -> dict[str, int | None]:
    """The usage Claude's stream-json reported so far, before its result: each ``assistant``
    event carries its API message's ``usage`` (repeated per content block: the last one per
    message id counts), summed over the messages."""
    by_id: dict[str, Any] = {}
    for event in lines:
        message = as_dict(event.get("message")) if isinstance(event, dict) and event.get("type") == "assistant" else {}
        if isinstance(message.get("id"), str) and isinstance(message.get("usage"), dict):
            by_id[message["id"]] = message["usage"]
    usages = list(by_id.values())
    return {
        "input_tokens": sum_known([tokens(u, "input_tokens") for u in usages]),
        "output_tokens": sum_known([tokens(u, "output_tokens") for u in usages]),
        "cache_read_input_tokens": sum_known([tokens(u, "cache_read_input_tokens") for u in usages]),
        "cache_creation_input_tokens": sum_known([tokens(u, "cache_creation_input_tokens") for u in usages]),
    }


def claude_diagnostics(text: str | None) -> dict[str, Any]:
    """From ``claude -p --output-format stream-json`` (or ``json``): the final ``type: result``
    object counts; until there is one (a run still going, or ended before its result), the
    usage its ``assistant`` events reported (``claude_stream_usage``)."""
    result, status = None, "missing"
    if text is not None and text.strip():
        status = "invalid"
        whole = parse_json(text)
        candidates = [whole] if whole is not None else [parse_json(line) for line in reversed(text.splitlines())]
        result = next((c for c in candidates if isinstance(c, dict) and c.get("type") == "result"), None)
        if result is not None:
            status = "ok"
    result = result or {}
    denials = result.get("permission_denials")
    is_error = result.get("is_error") if isinstance(result.get("is_error"), bool) else None
    subtype, terminal_reason = enum_word(result.get("subtype")), enum_word(result.get("terminal_reason"))
    cost, api_error_status = number(result.get("total_cost_usd")), integer(result.get("api_error_status"))
    usage = _claude_usage(result.get("usage"), result.get("modelUsage"))
    if not result and text:
        usage = claude_stream_usage([parse_json(line) for line in text.splitlines()])
    return {
        "result_json": status,
        "is_error": is_error,
        "subtype": subtype,
        "terminal_reason": terminal_reason,
        "num_turns": integer(result.get("num_turns")),
        "total_cost_usd": cost,
        "duration_ms": number(result.get("duration_ms")),
        "api_error_status": api_error_status,
        "permission_denials_count": len(denials) if isinstance(denials, list) else None,
        # permission_denials[].tool_name: what Claude itself refused (dontAsk, a deny rule)
        "denied_tools": denied_tool_names(denials),
        "cli": "claude",
        "cli_status": claude_status(
            status,
            subtype,
            terminal_reason,
            is_error,
            api_error_status,
            auth_refused(result.get("result") if is_error else None, api_error_status),
        ),
        "cost_usd": cost if cost is not None and cost >= 0 else None,
        "input_tokens": tokens(usage, "input_tokens"),
        "output_tokens": tokens(usage, "output_tokens"),
        "cache_read_tokens": tokens(usage, "cache_read_input_tokens"),
        "cache_write_tokens": tokens(usage, "cache_creation_input_tokens"),
    }
