"""One error root for everything the bridge reports, with families under it.

``BridgeError`` carries a stable machine ``code`` (snake_case, part of the public
contract) and a message saying what was wrong and what to do. Domain functions raise
it *before* writing anything, or inside a transaction that is then rolled back, so a
refusal never leaves a partial write behind. The MCP layer turns it into a tool error,
the CLI's one top-level handler into ``agent-bridge: <code>: <message>`` and an exit code.

Families: ``StateChangedError`` (a refusal that rolls back, then records a rule's move
alone), ``ConfigError`` (config.json), ``DispatchRefused`` (nothing was launched) with
``AlreadyAttempted``, and ``StoreUnavailable`` (the database backend's and OS errors
wrapped at the store boundary).
"""

from collections.abc import Callable
from pathlib import Path
from typing import Any


class BridgeError(Exception):
    def __init__(self, code: str, message: str, **details: object) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class StateChangedError(BridgeError):
    """A refusal that nonetheless records a state transition the rules demand.

    Two conversation rules refuse a send *and* move the conversation: touching an
    expired conversation settles it as ``expired``, and a send past the turn budget
    moves it to ``needs_human``. The refused transaction rolls back whole (nothing it
    wrote stays); ``keep`` then records only the move, in a transaction of its own.
    """

    def __init__(self, code: str, message: str, *, keep: Callable[[Any], None], **details: object) -> None:
        super().__init__(code, message, **details)
        self.keep = keep


class ConfigError(BridgeError):
    """config.json is unusable; ``reason`` says why (the listener shows it as its error)."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__("config_invalid", f"config {path} is invalid: {reason}")
        self.path = path
        self.reason = reason


class DispatchRefused(BridgeError):
    """A dispatch was refused before anything was launched."""


class AlreadyAttempted(DispatchRefused):
    def __init__(self, message_id: int) -> None:
        super().__init__(
            "already_attempted", f"message #{message_id} was already attempted; attempts are never repeated."
        )
        self.message_id = message_id


class RequestRefused(BridgeError):
    """A person's request (``send``, ``conversation``) broke one of the bridge's rules; nothing
    was sent. It keeps the rule's code and message, and ends the command as a usage error."""

    @classmethod
    def of(cls, exc: BridgeError) -> "RequestRefused":
        return cls(exc.code, exc.message)


class StoreUnavailable(BridgeError):
    """The store could not complete an operation (locked, full, read-only, corrupt, unreadable)."""


# Reinstalling with one extra drops the others: every hint names them all.
ALL_EXTRAS = "metrics,otel,postgres,top"


def missing_extra(needs: str, package: str) -> BridgeError:
    """``missing_extra``: ``needs`` (what the user ran or named) needs an optional ``package`` this
    installation lacks; the fix reinstalls with every extra, so that none is dropped."""
    return BridgeError(
        "missing_extra",
        f"{needs} needs the optional {package} package, which this installation lacks; nothing was changed. "
        f"Reinstall with every extra: `uv tool install --force './agent-bridge[{ALL_EXTRAS}]'` from your clone "
        f"(or 'git+<repository-url>[{ALL_EXTRAS}]'), or `uv sync --all-extras` in a checkout",
    )
