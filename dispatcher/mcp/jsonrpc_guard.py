"""Which stdin lines the SDK cannot answer, and the JSON-RPC error lines owed for them.

The SDK's stdio transport drops a line it cannot validate as a JSON-RPC message, and it
reads a request whose id is not an integer or a string (``1.5``, ``true``, ``null``) as a
notification, which is never answered. Either way the caller would wait forever. The
rule here: **every line that is not a notification, a response or blank gets an answer.**

The reply's id is the request's own top-level ``id`` whenever it can be read, even when
the rest of the line is broken (a raw control character in a string, a number too long
to convert, nesting too deep for the SDK's reader): a number is echoed as written (also a
float or a 5000-digit integer), a string re-encoded as JSON. Otherwise the id is ``null``
as JSON-RPC 2.0 prescribes: no id member, an unreadable one, or one that is not a string
or a number (``true``, an object, a list, ``null``).

Replies are finished JSON text, because the SDK's types cannot carry a float, a boolean,
an oversized integer or a lone surrogate as an id. The top-level members are found by a
small iterative scanner, so no nesting depth can make the search recurse.
"""

import json
import re
import sys
from dataclasses import dataclass, field
from typing import Any

from mcp import types as mcp_types

# The nesting depth the SDK's JSON reader (pydantic's jiter) accepts; a test pins it.
SDK_MAX_DEPTH = 201

_WS = re.compile(r"[ \t\n\r]*")
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_SCALAR = re.compile(r'[^\s,:\[\]{}"]+')
_STRUCTURAL = re.compile(r'"|[\[{]+|[\]}]+')
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
# The members that decide whether a line is a request, a notification or a response.
_ENVELOPE_KEYS = ("id", "method", "result", "error")
_JSON_TYPE_NAMES = {bool: "a boolean", float: "a fraction", type(None): "null", dict: "an object", list: "an array"}


class _Cut(Exception):
    """The line stops being JSON here; what was read before still counts."""


class _NumberTooLong(Exception):
    pass


@dataclass
class _Scanned:
    """One top-level value: for an object, the raw text of its envelope members."""

    kind: str  # "object", "array", "other"
    members: dict[str, str] = field(default_factory=dict)
    keys: set[str] = field(default_factory=set)
    items: list["_Scanned"] = field(default_factory=list)
    depth: int = 0


def _skip_ws(text: str, pos: int) -> int:
    match = _WS.match(text, pos)  # never None: the pattern matches the empty string anywhere
    return pos if match is None else match.end()


def _value_end(text: str, pos: int) -> tuple[int, int]:
    """(end, nesting depth) of the JSON value at ``pos``, found without recursion.

    Runs of brackets count as one step each, so ``[[[[...]]]]`` costs a few regex
    searches however deep it goes.
    """
    if text.startswith('"', pos):
        string = _STRING.match(text, pos)
        if string is None:
            raise _Cut
        return string.end(), 0
    if not text.startswith(("[", "{"), pos):
        scalar = _SCALAR.match(text, pos)
        if scalar is None:
            raise _Cut
        return scalar.end(), 0
    depth = deepest = 0
    while True:
        token = _STRUCTURAL.search(text, pos)
        if token is None:
            raise _Cut
        run = token.group()
        if run == '"':
            string = _STRING.match(text, token.start())
            if string is None:
                raise _Cut
            pos = string.end()
        elif run[0] in "[{":
            depth += len(run)
            deepest = max(deepest, depth)
            pos = token.end()
        elif len(run) >= depth:
            return token.start() + depth, deepest
        else:
            depth -= len(run)
            pos = token.end()


def _scan_object(text: str, pos: int, scanned: _Scanned) -> int:
    """Fill ``scanned`` with the members of the object whose ``{`` is at ``pos``; return its end.

    Raises _Cut where the object breaks off, with the members read until then kept.
    """
    pos = _skip_ws(text, pos + 1)
    if text.startswith("}", pos):
        return pos + 1
    while True:
        key_match = _STRING.match(text, pos)
        if key_match is None:
            raise _Cut
        try:
            key = json.loads(key_match.group(), strict=False)
        except ValueError:
            raise _Cut from None
        scanned.keys.add(key)
        pos = _skip_ws(text, key_match.end())
        if not text.startswith(":", pos):
            raise _Cut
        pos = _skip_ws(text, pos + 1)
        end, depth = _value_end(text, pos)
        scanned.depth = max(scanned.depth, depth + 1)
        if key in _ENVELOPE_KEYS:
            scanned.members[key] = text[pos:end]
        pos = _skip_ws(text, end)
        if text.startswith("}", pos):
            return pos + 1
        if not text.startswith(",", pos):
            raise _Cut
        pos = _skip_ws(text, pos + 1)


def _scan_item(text: str, pos: int) -> tuple[_Scanned, int]:
    """One message (or whatever stands in its place) at ``pos``, and where it ends."""
    if text.startswith("{", pos):
        scanned = _Scanned("object", depth=1)
        try:
            return scanned, _scan_object(text, pos, scanned)
        except _Cut:
            return scanned, len(text)  # a broken tail: the members read so far (the id among them) count
    try:
        end, depth = _value_end(text, pos)
    except _Cut:
        end, depth = len(text), 0
    return _Scanned("other", depth=depth), end


def _scan_line(line: str) -> _Scanned:
    """The line's top-level value: one message, or a batch (array) of them."""
    pos = _skip_ws(line, 0)
    if not line.startswith("[", pos):
        return _scan_item(line, pos)[0]
    batch = _Scanned("array", depth=1)
    pos = _skip_ws(line, pos + 1)
    while pos < len(line) and not line.startswith("]", pos):
        item, pos = _scan_item(line, pos)
        batch.items.append(item)
        batch.depth = max(batch.depth, item.depth + 1)
        pos = _skip_ws(line, pos)
        if not line.startswith(",", pos):
            break
        pos = _skip_ws(line, pos + 1)
    return batch


def _id_json(raw: str | None) -> str:
    """The id to answer with, as JSON text: the request's own number or string, else null."""
    if raw is not None and _NUMBER.fullmatch(raw):
        return raw
    if raw is not None and raw.startswith('"'):
        try:
            return json.dumps(json.loads(raw, strict=False))
        except ValueError:
            pass
    return "null"


def _expects_answer(scanned: _Scanned) -> bool:
    """Everything is answered but a response and a notification."""
    if scanned.kind != "object":
        return True
    if "method" not in scanned.keys and scanned.keys & {"result", "error"}:
        return False  # a response (result or error, no method)
    if "id" not in scanned.keys and scanned.members.get("method", "").startswith('"'):  # noqa: SIM103 - a case a line
        return False  # a notification (a string method, no id)
    return True


def _parse_int(token: str) -> int:
    if len(token.lstrip("-")) > sys.get_int_max_str_digits():
        raise _NumberTooLong
    return int(token)


def _has_lone_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        return _LONE_SURROGATE.search(value) is not None
    if isinstance(value, dict):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_lone_surrogate(v) for v in value)
    return False


def _problem(line: str, scanned: _Scanned) -> tuple[int, str]:
    """(JSON-RPC error code, message) saying what is wrong with the line and what to do."""
    nothing = "nothing was done."
    if scanned.depth > SDK_MAX_DEPTH:
        return mcp_types.INVALID_REQUEST, (
            f"invalid_request: the message is nested deeper than {SDK_MAX_DEPTH} levels; {nothing} "
            "Flatten the arguments."
        )
    try:
        parsed = json.loads(line, parse_int=_parse_int)
    except _NumberTooLong:
        return mcp_types.INVALID_REQUEST, (
            f"invalid_request: an integer has more than {sys.get_int_max_str_digits()} digits; {nothing} "
            "Send large numbers as strings."
        )
    except RecursionError:
        return mcp_types.INVALID_REQUEST, f"invalid_request: the message is nested too deeply; {nothing}"
    except json.JSONDecodeError as exc:
        return mcp_types.PARSE_ERROR, (
            f"parse_error: the line is not valid JSON ({exc.msg.removesuffix(' at')}, character {exc.pos}); {nothing} "
            "Send one JSON-RPC message per line, with control characters in strings escaped (\\r, \\t)."
        )
    if isinstance(parsed, list):
        return mcp_types.INVALID_REQUEST, (
            f"invalid_request: JSON-RPC batches are not supported; {nothing} Send one request per line."
        )
    if _has_lone_surrogate(parsed):
        return mcp_types.INVALID_REQUEST, (
            "invalid_text: the request holds a lone surrogate escape (\\ud800-\\udfff), which is not "
            f"valid Unicode; {nothing} Send well-formed UTF-16 pairs or plain UTF-8."
        )
    if (
        isinstance(parsed, dict)
        and "id" in parsed
        and (isinstance(parsed["id"], bool) or not isinstance(parsed["id"], int | str))
    ):
        got = _JSON_TYPE_NAMES[type(parsed["id"])]
        return mcp_types.INVALID_REQUEST, (
            f"invalid_request: a request id must be a string or an integer, not {got}; {nothing}"
        )
    return mcp_types.INVALID_REQUEST, (
        'invalid_request: not a valid JSON-RPC 2.0 request (it needs "jsonrpc": "2.0", a string '
        f"method and, if any, object params); {nothing}"
    )


def _reply(id_json: str, code: int, message: str) -> str:
    error = json.dumps({"code": code, "message": message})
    return f'{{"jsonrpc":"2.0","id":{id_json},"error":{error}}}'


def _answers(scanned: _Scanned) -> list[str]:
    """The ids owed an answer (as JSON text) for one top-level value."""
    if scanned.kind == "array":
        owed = [_id_json(item.members.get("id")) for item in scanned.items if _expects_answer(item)]
        return owed if scanned.items else ["null"]
    return [_id_json(scanned.members.get("id"))] if _expects_answer(scanned) else []


def _notification_with_id(message: Any, line: str) -> bool:
    """A request whose id the SDK rejected is read by it as a notification (never answered)."""
    return isinstance(message, mcp_types.JSONRPCNotification) and "id" in _scan_line(line).keys


def replies_for_line(line: str) -> list[str] | None:
    """None: the SDK answers this line itself. Otherwise the error lines owed for it (maybe none)."""
    try:
        message = mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValueError:
        message = None
    if message is not None and not _notification_with_id(message, line):
        return None
    if not line.strip():
        return []  # a blank line is no message
    scanned = _scan_line(line)
    owed = _answers(scanned)
    if not owed:
        return []
    code, text = _problem(line, scanned)
    return [_reply(id_json, code, text) for id_json in owed]
