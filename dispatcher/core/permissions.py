"""A worker's permission profile: one vocabulary for what a headless worker may do in its workspace.

An agent's ``permissions`` block in config.json names a ``level``; each CLI's launcher turns it
into that CLI's own mechanism (tool lists, permission rules, an OS sandbox), never into a
request to the model. The levels, each including the one before:

- ``bridge``: the bridge tools only (the default: a config without a profile keeps it);
- ``read``: read, search and list inside the workspace;
- ``edit``: also create and edit files inside the workspace;
- ``shell``: also run the commands that match ``allow_commands``; every other command is denied;
- ``project``: the workspace's own CLI settings decide, as when a person runs the CLI there.

``extra_dirs`` are further directories the worker may read, and write at ``edit`` and above.
The supervisor hands the profile to the launcher as one JSON value (``PERMISSIONS_ENV``).
"""

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from dispatcher.core.profile_rules import COMMAND_PATTERN as COMMAND_PATTERN

# The rules on a valid profile live with its plain form (what a supervisor keeps); callers import
# them from here too: explicit re-exports.
from dispatcher.core.profile_rules import DESCRIPTIONS as DESCRIPTIONS
from dispatcher.core.profile_rules import LEVELS as LEVELS
from dispatcher.core.profile_rules import PERMISSIONS_ENV as PERMISSIONS_ENV
from dispatcher.core.profile_rules import ProfileRules
from dispatcher.core.profile_rules import command_allowed as command_allowed

Level = Literal["bridge", "read", "edit", "shell", "project"]

# The bridge tools a worker may call: what its prompts use (claim, result, acknowledge,
# release, conversation moves) plus reading messages. Not `listener` (a task text must not
# be able to switch dispatching off) and not `start_conversation` (an unattended worker
# answers its task; it does not open new threads to other agents). Every launcher offers
# exactly these, by name (dispatcher/clis/).
WORKER_BRIDGE_TOOLS = (
    "send_message",
    "receive_messages",
    "claim_message",
    "release_message",
    "mark_read",
    "get_message",
    "conversation",
)
# The bridge tools a worker must not even see (a CLI that offers every tool of a server gets
# these denied by name, so the model is never offered them).
NON_WORKER_BRIDGE_TOOLS = ("start_conversation", "listener")

MAX_ALLOW_COMMANDS = 64
MAX_EXTRA_DIRS = 16


class PermissionProfile(ProfileRules, BaseModel):
    """A valid profile; what it means (``writes``, ``to_env`` ...): ``ProfileRules``."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    level: Level
    allow_commands: tuple[str, ...] = Field(default=(), max_length=MAX_ALLOW_COMMANDS)
    extra_dirs: tuple[str, ...] = Field(default=(), max_length=MAX_EXTRA_DIRS)
    # A worker that needs a tool its level does not give asks a person (docs/approvals.md) and
    # waits up to the agent's approval_timeout_seconds; false: it is denied at once, as before.
    ask: bool = False

    @field_validator("allow_commands", mode="before")
    @classmethod
    def _commands(cls, value: object) -> object:
        if isinstance(value, list):
            value = tuple(value)
        for command in value if isinstance(value, tuple) else ():
            if not isinstance(command, str) or not COMMAND_PATTERN.fullmatch(command):
                raise ValueError(
                    f"allow_commands entry {command!r} is not a plain command prefix: use words of letters, "
                    "digits and _ . / = : @ + , % - separated by single spaces, optionally ending in *"
                )
        return value

    @field_validator("extra_dirs", mode="before")
    @classmethod
    def _dirs(cls, value: object) -> object:
        if isinstance(value, list):
            value = tuple(value)
        for directory in value if isinstance(value, tuple) else ():
            if not isinstance(directory, str) or not directory or not Path(directory).expanduser().is_absolute():
                raise ValueError(f"extra_dirs entry {directory!r} must be an absolute path (~ is expanded)")
        return value

    @model_validator(mode="after")
    def _fits_level(self) -> "PermissionProfile":
        if self.level == "shell" and not self.allow_commands:
            raise ValueError('level shell needs allow_commands, e.g. ["git status", "uv run pytest*"]')
        if self.level != "shell" and self.allow_commands:
            raise ValueError(f"allow_commands is used only at level shell, not at {self.level}; remove it")
        if self.level == "bridge" and self.extra_dirs:
            raise ValueError("extra_dirs needs level read or above; level bridge has no file tools")
        return self

    def resolved(self) -> "PermissionProfile":
        """The same profile with ``~`` expanded in ``extra_dirs``, as a launcher needs it."""
        return self.model_copy(update={"extra_dirs": self.resolved_extra_dirs()})

    @classmethod
    def from_json(cls, data: object) -> "PermissionProfile":
        """A profile from parsed JSON (lists where the model has tuples); raises ValidationError."""
        if isinstance(data, dict):
            data = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
        return cls.model_validate(data)


BRIDGE_ONLY = PermissionProfile(level="bridge")


class ProfileError(ValueError):
    """``AGENT_BRIDGE_PERMISSIONS`` holds no valid profile (a launcher fails closed on it)."""


def profile_from_env(env: Mapping[str, str]) -> PermissionProfile:
    """The profile the supervisor handed to the launcher; ``bridge`` when none was (a launcher run by hand)."""
    raw = env.get(PERMISSIONS_ENV)
    if not raw:
        return BRIDGE_ONLY
    try:
        return PermissionProfile.from_json(json.loads(raw))
    except (ValueError, ValidationError) as exc:
        raise ProfileError(f"{PERMISSIONS_ENV} is not a valid permission profile: {exc}") from None
