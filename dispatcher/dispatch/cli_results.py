"""Payload-free diagnostics from an agent CLI's raw output, read after the worker is gone.

The launchers ``exec`` the CLI (so the worker's process-group leader *is* the CLI, and
nothing of the launcher is left to outlive it). They therefore cannot summarise the
CLI's output themselves: each one sends that output to a fixed file in the private
attempt directory, and the supervisor calls ``cli_diagnostics`` once the worker's whole
tree is gone. Only booleans, numbers, counts and short enum words come out; the raw
files (model text) stay in the attempt directory.

The files were written by the worker, so they are read as untrusted input: no links,
a size cap, and any parse failure is a status, never an exception.
"""

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import BridgeError
from ..private_files import read_private_text

CLAUDE_OUTPUT = "claude-result.json"
KIMI_OUTPUT = "kimi-stream.jsonl"
KIMI_HOME = "kimi-code-home"
MAX_OUTPUT_BYTES = 64 * 1024 * 1024
_ENUM = re.compile(r"[A-Za-z0-9_.:-]{1,64}")


def _enum(value: Any) -> str | None:
    return value if isinstance(value, str) and _ENUM.fullmatch(value) else None


def _integer(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(value: Any) -> int | float | None:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def _json(text: str) -> Any:
    """Parsed JSON, or None for anything unreadable (also absurd nesting or huge integers)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def claude_diagnostics(text: str | None) -> dict[str, Any]:
    """From ``claude -p --output-format json``: only the final ``type: result`` object counts."""
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
    return {
        "result_json": status,
        "is_error": result.get("is_error") if isinstance(result.get("is_error"), bool) else None,
        "subtype": _enum(result.get("subtype")),
        "terminal_reason": _enum(result.get("terminal_reason")),
        "num_turns": _integer(result.get("num_turns")),
        "total_cost_usd": _number(result.get("total_cost_usd")),
        "duration_ms": _number(result.get("duration_ms")),
        "api_error_status": _integer(result.get("api_error_status")),
        "permission_denials_count": len(denials) if isinstance(denials, list) else None,
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
        calls = obj.get("tool_calls") if isinstance(obj.get("tool_calls"), list) else []
        for call in calls:
            diag["tool_calls"] += 1
            function = call.get("function") if isinstance(call, dict) else None
            name = function.get("name") if isinstance(function, dict) else None
            if isinstance(name, str) and name.startswith("mcp__agent_bridge__"):
                diag["bridge_tool_calls"] += 1
    elif role == "tool":
        diag["tool_results"] += 1


def kimi_diagnostics(stream: str | None, wire: str | None, exit_code: int | None) -> dict[str, Any]:
    """From Kimi's ``--output-format stream-json`` lines (counts) and its session's wire.jsonl (the last turn)."""
    diag: dict[str, Any] = {
        "stream_json": "missing", "exit_code": exit_code, "cli_version": None, "assistant_messages": 0,
        "tool_calls": 0, "bridge_tool_calls": 0, "tool_results": 0, "retries": 0, "last_retry_error_name": None,
        "last_retry_status_code": None, "completed_with_resume_hint": False, "unparsed_lines": 0,
        "turn_reason": None, "turn_error_code": None, "turn_error_name": None,
    }
    lines = [line for line in (stream or "").splitlines() if line.strip()]
    for line in lines:
        obj = _json(line)
        if isinstance(obj, dict):
            _count_stream_line(diag, obj)
        else:
            diag["unparsed_lines"] += 1
    if lines:
        diag["stream_json"] = "ok" if diag["unparsed_lines"] < len(lines) else "invalid"
    for line in (wire or "").splitlines():
        event = _json(line)
        if isinstance(event, dict) and event.get("type") == "turn.ended":
            error = event.get("error") if isinstance(event.get("error"), dict) else {}
            diag["turn_reason"] = _enum(event.get("reason"))
            diag["turn_error_code"] = _enum(error.get("code"))
            diag["turn_error_name"] = _enum(error.get("name"))
    return diag


def _read(path: Path) -> str | None:
    try:
        return read_private_text(path, MAX_OUTPUT_BYTES)
    except BridgeError:
        return None  # a link, a FIFO, a foreign or hard-linked file: treated as no output


def _last_kimi_wire(home: Path) -> str | None:
    wires = [p for p in home.glob("sessions/*/*/agents/main/wire.jsonl") if not p.is_symlink()]
    return _read(max(wires, key=lambda p: p.lstat().st_mtime)) if wires else None


def _claude(attempt_dir: Path, exit_code: int | None) -> dict[str, Any]:
    return claude_diagnostics(_read(attempt_dir / CLAUDE_OUTPUT))


def _kimi(attempt_dir: Path, exit_code: int | None) -> dict[str, Any]:
    return kimi_diagnostics(_read(attempt_dir / KIMI_OUTPUT), _last_kimi_wire(attempt_dir / KIMI_HOME), exit_code)


# The output file a launcher leaves in the attempt directory, and how to read it.
_PARSERS: dict[str, Callable[[Path, int | None], dict[str, Any]]] = {CLAUDE_OUTPUT: _claude, KIMI_OUTPUT: _kimi}


def cli_diagnostics(attempt_dir: Path, exit_code: int | None) -> dict[str, Any] | None:
    """The diagnostics of the CLI whose output file the launcher named, or None (no known CLI ran)."""
    for name, parse in _PARSERS.items():
        if (attempt_dir / name).exists() or (attempt_dir / name).is_symlink():
            return parse(attempt_dir, exit_code)
    return None
