"""Notices, out of band: what a person's ``notify_command`` is told, and when (docs/notices.md).

Pure rules. A notice names an event and carries payload-free fields only (the agent, a message
id, an outcome, an error kind, and the command that shows more): never a task's text, a reply,
or a tool's input. ``dispatch.notify`` runs the command in the background.
"""

from dataclasses import dataclass

EVENTS = ("approval_waiting", "attempt_failed", "budget_held", "budget_reached", "listener_stopped")
# What a notice may carry, as environment variables: AGENT_BRIDGE_NOTICE_<FIELD>; in the
# command's arguments as {field}.
FIELDS = ("event", "agent", "message_id", "outcome", "error_kind", "show", "summary")
ENV_PREFIX = "AGENT_BRIDGE_NOTICE_"


@dataclass(frozen=True)
class Notice:
    event: str
    agent: str
    message_id: int | None = None
    outcome: str | None = None
    error_kind: str | None = None

    def __post_init__(self) -> None:
        if self.event not in EVENTS:
            raise ValueError(f"unknown notice event {self.event!r}")

    @property
    def show(self) -> str:
        """The command a person runs to see more (it reads the store, where the payload stays)."""
        if self.event == "approval_waiting":
            return f"agent-bridge approvals show {self.message_id}"
        if self.message_id is not None:
            return f"agent-bridge show {self.message_id}"
        return f"agent-bridge listener status --agent {self.agent}"

    @property
    def summary(self) -> str:
        """One line for a desktop or phone notice."""
        what = {
            "approval_waiting": f"{self.agent} asks to run a tool (approval #{self.message_id})",
            "attempt_failed": f"{self.agent}'s attempt on msg#{self.message_id} ended {self.outcome}",
            "budget_held": f"{self.agent} reached its daily budget: its new tasks wait until midnight",
            "budget_reached": f"{self.agent} reached a budget"
            + (f" (msg#{self.message_id})" if self.message_id is not None else ""),
            "listener_stopped": f"{self.agent}'s listener stopped on an error",
        }[self.event]
        kind = f" [{self.error_kind}]" if self.error_kind and self.error_kind != self.outcome else ""
        return f"agent-bridge: {what}{kind}; {self.show}"

    def fields(self) -> dict[str, str]:
        """Every field as text ('' when it has none)."""
        return {
            "event": self.event,
            "agent": self.agent,
            "message_id": "" if self.message_id is None else str(self.message_id),
            "outcome": self.outcome or "",
            "error_kind": self.error_kind or "",
            "show": self.show,
            "summary": self.summary,
        }


def attempt_notice(agent: str, message_id: int, outcome: str | None, error_kind: str | None) -> Notice | None:
    """The notice a finished attempt gives: ``attempt_failed`` for failed, timeout or crashed,
    ``budget_reached`` for budget_exceeded; None for succeeded and blocked (a blocked task is the
    worker's honest answer, shown with its reply; an approval it asked for has a notice of its own)."""
    if outcome in ("failed", "timeout", "crashed"):
        return Notice("attempt_failed", agent, message_id, outcome, error_kind)
    if outcome == "budget_exceeded":
        return Notice("budget_reached", agent, message_id, outcome, error_kind)
    return None


def notice_argv(command: list[str] | tuple[str, ...], notice: Notice) -> list[str]:
    """``command`` with each ``{field}`` in its arguments replaced by the field's text (the
    program itself is never rewritten). Plain replacement: no format spec, no other braces read."""
    values = notice.fields()
    argv = [command[0]]
    for argument in command[1:]:
        for name, value in values.items():
            argument = argument.replace("{" + name + "}", value)
        argv.append(argument)
    return argv


def notice_environment(notice: Notice) -> dict[str, str]:
    """The notice's fields as AGENT_BRIDGE_NOTICE_<FIELD> variables."""
    return {ENV_PREFIX + name.upper(): value for name, value in notice.fields().items()}
