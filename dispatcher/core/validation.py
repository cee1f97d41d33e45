"""Checks on caller-supplied values, shared by the config loader and the domain layer."""

import re
import unicodedata
from collections.abc import Collection

from dispatcher.core.errors import BridgeError

AGENT_ID_PATTERN = r"[a-z0-9][a-z0-9_-]{0,31}"
_AGENT_ID_RE = re.compile(AGENT_ID_PATTERN)
# Unicode line and paragraph separators are not category Cc but still break lines.
_LINE_BREAKS = {"\u2028", "\u2029", "\x85"}
MAX_DEDUP_KEY_CHARS = 200
# The dispatcher's own keys live here; an agent's key there could suppress or forge a notice.
SYSTEM_DEDUP_PREFIX = "agent-bridge:"


def has_control_chars(value: str) -> bool:
    return any(ch in _LINE_BREAKS or unicodedata.category(ch) in ("Cc", "Cs") for ch in value)


def check_agent_id(value: object, field: str = "agent") -> str:
    if not isinstance(value, str) or not _AGENT_ID_RE.fullmatch(value):
        raise BridgeError(
            "invalid_agent_id",
            f"{field} must be a short name matching {AGENT_ID_PATTERN} "
            "(lower-case letters, digits, '_' or '-'; no control characters).",
        )
    return value


def check_dedup_key(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_DEDUP_KEY_CHARS:
        raise BridgeError(
            "invalid_dedup_key",
            f"dedup_key must be a non-empty string of at most {MAX_DEDUP_KEY_CHARS} characters.",
        )
    if has_control_chars(value):
        raise BridgeError(
            "invalid_dedup_key",
            "dedup_key must not contain control characters or line breaks.",
        )
    if value.casefold().startswith(SYSTEM_DEDUP_PREFIX):
        raise BridgeError(
            "invalid_dedup_key",
            f"dedup_key must not start with '{SYSTEM_DEDUP_PREFIX}': that namespace is reserved for the "
            "bridge's own notices. Pick another key.",
        )
    return value


def check_message_id(value: object, field: str = "message_id") -> int:
    # bool is an int subclass; True must not mean message #1.
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2**63:
        raise BridgeError("invalid_message_id", f"{field} must be a positive integer id.")
    return value


def check_body(value: object, max_bytes: int, field: str = "text") -> str:
    if not isinstance(value, str) or not value.strip():
        raise BridgeError("empty_text", f"{field} must be a non-empty string.")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise BridgeError("invalid_text", f"{field} is not valid Unicode (it holds a lone surrogate).") from None
    if size > max_bytes:
        raise BridgeError(
            "text_too_large",
            f"{field} is {size} bytes in UTF-8; the limit is {max_bytes} "
            "(AGENT_BRIDGE_MAX_BODY_BYTES). Send a shorter text or a file path instead.",
        )
    return value


def clamp(value: object, low: int, high: int, field: str) -> int:
    """Clamp a number into [low, high]; refuse non-numbers, NaN and non-positive values."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise BridgeError("invalid_number", f"{field} must be a number.")
    if value <= 0:
        raise BridgeError("invalid_number", f"{field} must be positive (it is clamped to {low}..{high}).")
    return int(min(max(value, low), high))


def check_recipient(sender: str, recipient: object, agents: Collection[str]) -> str:
    """A recipient is another declared agent (a message, a conversation)."""
    if not isinstance(recipient, str) or recipient not in agents or recipient == sender:
        valid = sorted(a for a in agents if a != sender)
        raise BridgeError(
            "unknown_recipient",
            f"recipient must be another declared agent: one of {', '.join(valid) or '(none declared)'}.",
            valid=valid,
        )
    return recipient
