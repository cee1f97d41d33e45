"""Payload-free diagnostics from an agent CLI's raw output, read after the worker is gone.

The launchers ``exec`` the CLI (so the worker's process-group leader *is* the CLI, and
nothing of the launcher is left to outlive it). They therefore cannot summarise the
CLI's output themselves: each one sends that output to a fixed file in the private
attempt directory, and the supervisor calls ``cli_diagnostics`` once the worker's whole
tree is gone. Only booleans, numbers, counts, short enum words and lists of tool names
(the tools a CLI reported denied) come out; the raw files (model text) stay in the
attempt directory.

Every CLI's diagnostics also carry the ledger's common keys (``LEDGER_KEYS``): ``cli``,
``cli_status`` (one word of ``CLI_STATUSES``, decided by a pure ``*_status`` function per
CLI), ``cost_usd`` (Claude and opencode report one), and ``input_tokens``, ``output_tokens``,
``cache_read_tokens``, ``cache_write_tokens`` (None when the CLI did not say). The
settle transaction copies them into the attempt's ledger columns.

The files were written by the worker, so they are read as untrusted input: no links,
a size cap, and any parse failure is a status, never an exception.
"""

import contextlib
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dispatcher.core.private_files import read_untrusted
from dispatcher.dispatch.cli_profiles import opencode

CLAUDE_OUTPUT = "claude-result.json"
KIMI_OUTPUT = "kimi-stream.jsonl"
KIMI_HOME = "kimi-code-home"
CODEX_OUTPUT = "codex-events.jsonl"
GEMINI_OUTPUT = "gemini-result.json"
OPENCODE_OUTPUT = opencode.OUTPUT

# What the CLI itself said about its run, one word (never the verdict: the store decides that).
CLI_STATUSES = (
    "ok",  # it completed its turn normally
    "api_error",  # the model API failed (connection, 4xx/5xx after the CLI's retries)
    "budget_exceeded",  # it stopped at its cost cap (Claude --max-budget-usd)
    "max_turns",  # it stopped at its turn cap (Claude --max-turns, Gemini exit 53)
    "retryable",  # it said trying again later may work (Kimi exit 75)
    "auth_error",  # no usable credentials: not logged in, an invalid API key (``auth_refused``)
    "input_error",  # its input or arguments were refused (Gemini exit 42)
    "config_error",  # its configuration was refused (Gemini exit 52)
    "untrusted_workspace",  # Gemini exit 55
    "cancelled",  # Gemini exit 130
    "error",  # any other failure it reported
    "no_result",  # it left no readable result (killed, crashed, or never started)
)
LEDGER_KEYS = (
    "cli",
    "cli_status",
    "cost_usd",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
)
MAX_OUTPUT_BYTES = 64 * 1024 * 1024
_ENUM = re.compile(r"[A-Za-z0-9_.:-]{1,64}")


# What the four CLIs print when they have no usable credentials, from their real outputs:
# Claude 2.1.332's result "Not logged in · Please run /login" (and "Invalid API key · Please
# run /login"), Kimi 2.1.0's "No model configured. Run `kimi` and use /login to sign in",
# Codex 0.171.0's "unexpected status 401 Unauthorized: Incorrect API key provided", Gemini's
# "Please set an Auth method" (exit 41) and an API's own authentication error words.
_AUTH_REFUSED = re.compile(
    r"Not logged in|Invalid API key|use /login|Please run /login|status 40[13] (Unauthorized|Forbidden)"
    r"|Please set an Auth method|authentication_error|invalid_api_key|API key not valid|API_KEY_INVALID",
    re.IGNORECASE,
)
AUTH_HTTP_STATUSES = (401, 403)


def auth_refused(text: Any, http_status: Any = None) -> bool:
    """The one rule for ``auth_error``: the CLI's own words (or the API's HTTP status) say it has
    no usable credentials. Only a bool comes out; the text is never kept."""
    if http_status in AUTH_HTTP_STATUSES:
        return True
    return isinstance(text, str) and _AUTH_REFUSED.search(text[:MAX_OUTPUT_BYTES]) is not None


def _enum(value: Any) -> str | None:
    return value if isinstance(value, str) and _ENUM.fullmatch(value) else None


def _integer(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(value: Any) -> int | float | None:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def _dict(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one: untrusted output never raises."""
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _json(text: str) -> Any:
    """Parsed JSON, or None for anything unreadable (also absurd nesting or huge integers)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _tokens(usage: Any, *names: str) -> int | None:
    """The first of ``names`` that ``usage`` holds as a non-negative integer."""
    if isinstance(usage, dict):
        for name in names:
            value = _integer(usage.get(name))
            if value is not None and value >= 0:
                return value
    return None


def _sum(values: list[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


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


_TOOL_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,40}")  # what the ledger keeps of a tool (attempts._ENUM_WORD)
MAX_DENIED_TOOLS = 16  # attempts.MAX_LIST_ITEMS


def denied_tool_names(denials: Any) -> list[str] | None:
    """The names of the tools a CLI reported denied, first seen first, each once; never their
    arguments. None when the CLI gave no list; a name that is not a plain tool name is left out."""
    if not isinstance(denials, list):
        return None
    names: list[str] = []
    for denial in denials:
        name = denial.get("tool_name") if isinstance(denial, dict) else None
        if isinstance(name, str) and _TOOL_NAME.fullmatch(name) and name not in names:
            names.append(name)
    return names[:MAX_DENIED_TOOLS]


def _claude_usage(usage: Any, model_usage: Any) -> Any:
    """``usage``, unless it is all zeros while ``modelUsage`` counted tokens: a budget stop
    (2.1.332) reports ``usage`` as zeros and the real counts only per model."""
    if _tokens(usage, "input_tokens") or _tokens(usage, "output_tokens") or not isinstance(model_usage, dict):
        return usage
    per_model = [m for m in model_usage.values() if isinstance(m, dict)]
    if not per_model:
        return usage
    return {
        "input_tokens": _sum([_tokens(m, "inputTokens") for m in per_model]),
        "output_tokens": _sum([_tokens(m, "outputTokens") for m in per_model]),
        "cache_read_input_tokens": _sum([_tokens(m, "cacheReadInputTokens") for m in per_model]),
        "cache_creation_input_tokens": _sum([_tokens(m, "cacheCreationInputTokens") for m in per_model]),
    }


def claude_stream_usage(lines: list[Any]) -> dict[str, int | None]:
    """The usage Claude's stream-json reported so far, before its result: each ``assistant``
    event carries its API message's ``usage`` (repeated per content block: the last one per
    message id counts), summed over the messages."""
    by_id: dict[str, Any] = {}
    for event in lines:
        message = _dict(event.get("message")) if isinstance(event, dict) and event.get("type") == "assistant" else {}
        if isinstance(message.get("id"), str) and isinstance(message.get("usage"), dict):
            by_id[message["id"]] = message["usage"]
    usages = list(by_id.values())
    return {
        "input_tokens": _sum([_tokens(u, "input_tokens") for u in usages]),
        "output_tokens": _sum([_tokens(u, "output_tokens") for u in usages]),
        "cache_read_input_tokens": _sum([_tokens(u, "cache_read_input_tokens") for u in usages]),
        "cache_creation_input_tokens": _sum([_tokens(u, "cache_creation_input_tokens") for u in usages]),
    }


def claude_diagnostics(text: str | None) -> dict[str, Any]:
    """From ``claude -p --output-format stream-json`` (or ``json``): the final ``type: result``
    object counts; until there is one (a run still going, or ended before its result), the
    usage its ``assistant`` events reported (``claude_stream_usage``)."""
    result, status = None, "missing"
    if text is not None and text.strip():
        status = "invalid"
        whole = _json(text)
        candidates = [whole] if whole is not None else [_json(line) for line in reversed(text.splitlines())]
        result = next((c for c in candidates if isinstance(c, dict) and c.get("type") == "result"), None)
        if result is not None:
            status = "ok"
    result = result or {}
    denials = result.get("permission_denials")
    is_error = result.get("is_error") if isinstance(result.get("is_error"), bool) else None
    subtype, terminal_reason = _enum(result.get("subtype")), _enum(result.get("terminal_reason"))
    cost, api_error_status = _number(result.get("total_cost_usd")), _integer(result.get("api_error_status"))
    usage = _claude_usage(result.get("usage"), result.get("modelUsage"))
    if not result and text:
        usage = claude_stream_usage([_json(line) for line in text.splitlines()])
    return {
        "result_json": status,
        "is_error": is_error,
        "subtype": subtype,
        "terminal_reason": terminal_reason,
        "num_turns": _integer(result.get("num_turns")),
        "total_cost_usd": cost,
        "duration_ms": _number(result.get("duration_ms")),
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
        "input_tokens": _tokens(usage, "input_tokens"),
        "output_tokens": _tokens(usage, "output_tokens"),
        "cache_read_tokens": _tokens(usage, "cache_read_input_tokens"),
        "cache_write_tokens": _tokens(usage, "cache_creation_input_tokens"),
    }


def _count_stream_line(diag: dict[str, Any], obj: dict) -> None:
    role, kind = obj.get("role"), obj.get("type")
    if role == "meta" and kind == "system.version":
        diag["cli_version"] = _enum(obj.get("version"))
    elif role == "meta" and kind == "turn.step.retrying":
        diag["retries"] += 1
        diag["last_retry_error_name"] = _enum(obj.get("error_name"))
        diag["last_retry_status_code"] = _integer(obj.get("status_code"))
    elif role == "meta" and kind == "session.resume_hint":
        diag["completed_with_resume_hint"] = True
    elif role == "assistant":
        diag["assistant_messages"] += 1
        calls = _list(obj.get("tool_calls"))
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
# hook's refusal (cli_profiles/kimi.py); Kimi's own path checks (a symlink that leads out of
# the working directory, a dangling or too deep link, a sensitive file such as .env or a key).
_KIMI_NOT_FOUND = re.compile(r'Tool "[^"\n]{1,200}" not found')
_KIMI_HOOK_DENIAL = re.compile(r"Denied by the Agent Bridge permission profile \(level [a-z]+\): ")
_KIMI_PATH_BLOCKED = re.compile(r'"[^\n]+ Access is blocked(\.| to protect secrets\.|; use the real path [^\n]+\.)')
_TOOL_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,40}")
MAX_DENIED_TOOLS = 16


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
                if name is not None and _TOOL_NAME.fullmatch(name):
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
        obj = _json(line)
        if isinstance(obj, dict):
            _count_stream_line(diag, obj)
        else:
            diag["unparsed_lines"] += 1
    if lines:
        diag["stream_json"] = "ok" if diag["unparsed_lines"] < len(lines) else "invalid"
    events = [event for line in (wire or "").splitlines() if isinstance(event := _json(line), dict)]
    for event in events:
        if event.get("type") == "turn.ended":
            error = _dict(event.get("error"))
            diag["turn_reason"] = _enum(event.get("reason"))
            diag["turn_error_code"] = _enum(error.get("code"))
            diag["turn_error_name"] = _enum(error.get("name"))
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
        input_tokens=_sum([_tokens(u, "inputOther") for u in usage]),
        output_tokens=_sum([_tokens(u, "output") for u in usage]),
        cache_read_tokens=_sum([_tokens(u, "inputCacheRead") for u in usage]),
        cache_write_tokens=_sum([_tokens(u, "inputCacheCreation") for u in usage]),
        denied_tools=_kimi_denials(events),
    )
    return diag


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
        item = _dict(event.get("item"))
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
        event = _json(line)
        if not isinstance(event, dict):
            diag["unparsed_lines"] += 1
            continue
        parsed.append(event)
        kind = event.get("type")
        item = _dict(event.get("item"))
        if kind == "turn.completed":
            diag["turns_completed"] += 1
            u = event.get("usage")
            usage["input"].append(_tokens(u, "input_tokens"))
            usage["cached"].append(_tokens(u, "cached_input_tokens"))
            usage["cache_write"].append(_tokens(u, "cache_write_input_tokens"))
            usage["output"].append(_tokens(u, "output_tokens"))
            usage["reasoning"].append(_tokens(u, "reasoning_output_tokens"))
        elif kind == "turn.failed":
            diag["turns_failed"] += 1
            auth = auth or auth_refused(_dict(event.get("error")).get("message"))
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
    diag["reasoning_tokens"] = _sum(usage["reasoning"])
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
        input_tokens=_sum(usage["input"]),
        output_tokens=_sum(usage["output"]),
        cache_read_tokens=_sum(usage["cached"]),
        cache_write_tokens=_sum(usage["cache_write"]),
    )
    return diag


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
    whole = _json(text)
    if whole is not None:
        return [whole]
    found = [_json(line) for line in reversed(text.splitlines())]
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


MAX_DENIED_TOOLS = 16  # what the ledger keeps of a list (attempts.MAX_LIST_ITEMS)
_TOOL_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,40}")  # a name the ledger keeps (attempts._ENUM_WORD)


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
        if not isinstance(entry, dict) or not isinstance(name, str) or not _TOOL_NAME.fullmatch(name):
            continue
        count, fail = _integer(entry.get("count")) or 0, _integer(entry.get("fail")) or 0
        decisions = _dict(entry.get("decisions"))
        decided = sum(v for v in (_integer(x) for x in decisions.values()) if v is not None and v > 0)
        rejected = _integer(decisions.get("reject")) or 0
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
    stats = _dict(doc.get("stats"))
    error = _dict(doc.get("error"))
    models = _dict(stats.get("models"))
    per_model = [m.get("tokens") for m in models.values() if isinstance(m, dict)]
    tools = _dict(stats.get("tools"))
    if per_model:  # -o json: tokens per model
        inputs = _sum([_tokens(t, "input", "prompt") for t in per_model])
        outputs = _sum([_tokens(t, "candidates", "output") for t in per_model])
        cached = _sum([_tokens(t, "cached") for t in per_model])
    else:  # stream-json's result line: flat totals
        inputs, outputs, cached = (
            _tokens(stats, "input_tokens"),
            _tokens(stats, "output_tokens"),
            _tokens(stats, "cached"),
        )
    error_code = _integer(error.get("code"))
    api = [m.get("api") for m in models.values() if isinstance(m, dict)]
    return {
        "result_json": status,
        "exit_code": exit_code,
        "error_type": _enum(error.get("type")),
        "error_code": error_code,
        "models": len(models),
        "api_requests": _sum([_tokens(a, "totalRequests") for a in api]),
        "api_errors": _sum([_tokens(a, "totalErrors") for a in api]),
        "tool_calls": _integer(tools.get("totalCalls")) if tools else _integer(stats.get("tool_calls")),
        "tool_failures": _integer(tools.get("totalFail")) if tools else None,
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


WORKER_LOG = "worker.log"


def _read(attempt_dir: Path, relative: str) -> str | None:
    # A link, a FIFO, a foreign or hard-linked file: treated as no output (read_untrusted).
    return read_untrusted(attempt_dir, relative, MAX_OUTPUT_BYTES)


def _subdirs(directory: Path, relative: str) -> list[str]:
    """The names of the real directories (never links) in ``directory/relative``."""
    try:
        with os.scandir(directory / relative) as entries:
            return [e.name for e in entries if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def _last_kimi_wire(attempt_dir: Path) -> str | None:
    """The newest ``sessions/*/*/agents/main/wire.jsonl`` under the Kimi home, walked without links."""
    wires = []
    for a in _subdirs(attempt_dir, f"{KIMI_HOME}/sessions"):
        for b in _subdirs(attempt_dir, f"{KIMI_HOME}/sessions/{a}"):
            wire = f"{KIMI_HOME}/sessions/{a}/{b}/agents/main/wire.jsonl"
            with contextlib.suppress(OSError):
                wires.append(((attempt_dir / wire).lstat().st_mtime, wire))
    return _read(attempt_dir, max(wires)[1]) if wires else None


def _claude(attempt_dir: Path, exit_code: int | None) -> dict[str, Any]:
    return claude_diagnostics(_read(attempt_dir, CLAUDE_OUTPUT))


def _kimi(attempt_dir: Path, exit_code: int | None) -> dict[str, Any]:
    return kimi_diagnostics(
        _read(attempt_dir, KIMI_OUTPUT), _last_kimi_wire(attempt_dir), exit_code, _read(attempt_dir, WORKER_LOG)
    )


def _codex(attempt_dir: Path, exit_code: int | None) -> dict[str, Any]:
    return codex_diagnostics(_read(attempt_dir, CODEX_OUTPUT), exit_code, _read(attempt_dir, WORKER_LOG))


def _gemini(attempt_dir: Path, exit_code: int | None) -> dict[str, Any]:
    # On an error Gemini leaves stdout empty and prints its error object on stderr (worker.log).
    text = _read(attempt_dir, GEMINI_OUTPUT)
    if not (text or "").strip():
        text = _read(attempt_dir, WORKER_LOG)
    return gemini_diagnostics(text, exit_code)


def _opencode(attempt_dir: Path, exit_code: int | None) -> dict[str, Any]:
    return opencode.diagnostics(_read(attempt_dir, OPENCODE_OUTPUT), exit_code, auth_refused)


# The output file a launcher leaves in the attempt directory, and how to read it.
_PARSERS: dict[str, Callable[[Path, int | None], dict[str, Any]]] = {
    CLAUDE_OUTPUT: _claude,
    KIMI_OUTPUT: _kimi,
    CODEX_OUTPUT: _codex,
    GEMINI_OUTPUT: _gemini,
    OPENCODE_OUTPUT: _opencode,
}


def cli_diagnostics(attempt_dir: Path, exit_code: int | None) -> dict[str, Any] | None:
    """The diagnostics of the CLI whose output file the launcher named, or None (no known CLI ran)."""
    for name, parse in _PARSERS.items():
        if (attempt_dir / name).exists() or (attempt_dir / name).is_symlink():
            return parse(attempt_dir, exit_code)
    return None
