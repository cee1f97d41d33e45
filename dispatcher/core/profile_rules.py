"""What a valid permission profile means, without pydantic: the rules on one, and its plain form.

``PermissionProfile`` (``permissions``, pydantic) is the one definition of a valid profile. A
process that must stay light keeps the profiles config.json declares as ``ProfileView``s: a
supervisor launches its worker from the listener's ``ConfigView`` (README, "The listener's
footprint"). Both read the profile through ``ProfileRules``, so each rule is written once here.
"""

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LEVELS = ("bridge", "read", "edit", "shell", "project")

# One allowed command: words of plain characters (no shell syntax, quotes, globs or
# parentheses), optionally ending in `*`. Every CLI matches it as a prefix of words: the
# command must start with exactly these words; a trailing `*` says so and changes nothing.
_WORD = r"[A-Za-z0-9_./=:@+,%-]+"
COMMAND_PATTERN = re.compile(rf"{_WORD}(?: {_WORD})*(?: ?\*)?")

PERMISSIONS_ENV = "AGENT_BRIDGE_PERMISSIONS"
# The longest an agent's request for approval (its profile's ``ask``) may wait: the ceiling of
# ``approval_timeout_seconds``, and so what a CLI's asking hook must be given (clis.command_gate).
MAX_APPROVAL_TIMEOUT_SECONDS = 86400

DESCRIPTIONS = {
    "bridge": "use the agent_bridge tools only: no file, search or shell tool",
    "read": "read, search and list files inside the workspace",
    "edit": "read, search, list, create and edit files inside the workspace",
    "shell": "read and edit files inside the workspace, and run only the allowed commands",
    "project": "do what the workspace's own CLI settings allow",
}


def command_allowed(prefixes: Iterable[tuple[str, ...]], words: Sequence[str]) -> bool:
    """The one allow-list rule: the command's first words are exactly one allowed prefix's words."""
    return any(len(words) >= len(prefix) and tuple(words[: len(prefix)]) == prefix for prefix in prefixes)


class ProfileRules:
    """The rules on a valid profile, shared by ``PermissionProfile`` and ``ProfileView``."""

    level: str
    allow_commands: tuple[str, ...]
    extra_dirs: tuple[str, ...]

    @property
    def writes(self) -> bool:
        """Whether this level may create and edit files (in the workspace and ``extra_dirs``)."""
        return self.level in ("edit", "shell", "project")

    def resolved_extra_dirs(self) -> tuple[str, ...]:
        """``extra_dirs`` with ``~`` expanded, as a launcher needs them."""
        return tuple(str(Path(d).expanduser()) for d in self.extra_dirs)

    def allows_command(self, words: Sequence[str]) -> bool:
        """Whether a command, as its words, starts with one of ``allow_commands``."""
        return command_allowed(self.command_prefixes(), words)

    def command_prefixes(self) -> tuple[tuple[str, ...], ...]:
        """Each allowed command as its words, without the optional trailing ``*``."""
        return tuple(tuple(command.rstrip("*").split()) for command in self.allow_commands)

    def to_env(self) -> str:
        """The profile as the launcher gets it (``PERMISSIONS_ENV``), ``extra_dirs`` resolved."""
        document = {
            "level": self.level,
            "allow_commands": list(self.allow_commands),
            "extra_dirs": list(self.resolved_extra_dirs()),
            **({"ask": True} if getattr(self, "ask", False) else {}),  # (docs/approvals.md)
        }
        return json.dumps(document, separators=(",", ":"))


@dataclass(frozen=True)
class ProfileView(ProfileRules):
    """A profile ``PermissionProfile`` validated, as a process without pydantic keeps it."""

    level: str
    allow_commands: tuple[str, ...] = ()
    extra_dirs: tuple[str, ...] = ()
    ask: bool = False

    @classmethod
    def of(cls, document: Mapping[str, Any]) -> "ProfileView":
        """``document``: what ``PermissionProfile.model_dump(mode="json")`` gave (lists for tuples)."""
        return cls(
            document["level"],
            tuple(document["allow_commands"]),
            tuple(document["extra_dirs"]),
            bool(document.get("ask", False)),
        )
