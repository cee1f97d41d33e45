"""A grant for one task (``agent-bridge retry ID --allow ...``; docs/approvals.md): what it may
say, and the profile its attempt runs with. Pure rules; the agent's profile is never changed.

- ``Bash(<command prefix>)``: the command prefix is allowed (as an ``allow_commands`` entry), at
  level ``shell`` at least;
- ``Edit``: edits in the workspace, at level ``edit`` at least.

A profile at ``project`` is left as it is (the workspace's own settings decide there).
"""

import dataclasses
import re
from typing import Any

from dispatcher.core.profile_rules import COMMAND_PATTERN, LEVELS  # (plain: the listener loads this)

_BASH = re.compile(r"^Bash\((.+)\)$")


class GrantRefused(ValueError):
    """A grant this syntax does not know, with what it accepts."""


def parse_grant(text: str) -> tuple[str, str | None]:
    """(``"Bash"``, the command prefix) or (``"Edit"``, None); GrantRefused otherwise."""
    text = text.strip()
    if text == "Edit":
        return "Edit", None
    if (found := _BASH.match(text)) and COMMAND_PATTERN.fullmatch(found.group(1).strip()):
        return "Bash", found.group(1).strip()
    raise GrantRefused(
        f"--allow {text!r} is not a grant: use 'Bash(<command prefix>)' (plain words, optionally ending in *, "
        "e.g. 'Bash(uv run pytest)') or 'Edit'"
    )


def _at_least(level: str, floor: str) -> str:
    if level == "project":
        return level
    return level if LEVELS.index(level) >= LEVELS.index(floor) else floor


def widened(profile: Any, grants: list[str]) -> Any:
    """``profile`` (a ``PermissionProfile`` or a ``ProfileView``) widened by ``grants``; the same
    object when there are none. Never narrower than the profile."""
    if not grants:
        return profile
    level, commands = profile.level, list(profile.allow_commands)
    for grant in grants:
        kind, prefix = parse_grant(grant)
        if kind == "Edit":
            level = _at_least(level, "edit")
        else:
            level = _at_least(level, "shell")
            if level == "shell" and prefix not in commands:
                commands.append(prefix)
    if level != "shell":
        commands = list(profile.allow_commands)
    update = {"level": level, "allow_commands": tuple(commands)}
    if hasattr(profile, "model_copy"):
        return profile.model_copy(update=update)
    return dataclasses.replace(profile, **update)
