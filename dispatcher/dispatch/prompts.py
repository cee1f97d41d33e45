"""The worker prompt written into the private request file (the only place task text goes).

The steps match the verdict (``evidence.judge``): a task turn succeeds with a result and
mark_read, stops honestly with a ``blocked:`` result and release_message (no mark_read);
a review turn succeeds with one decision (complete, follow-up task, needs_human or
cancel) and mark_read.
"""

from pathlib import Path

from dispatcher.bridge.conversations import turn_available
from dispatcher.core.profile_rules import DESCRIPTIONS, ProfileRules
from dispatcher.store import Connection, Row
from dispatcher.store.conversations import fetch_existing_conversation

TASK_PROMPT = """\
You are a one-shot headless worker for Agent Bridge, acting as agent "{agent}".
Message #{id} from {sender} is a task for you{conversation}. Talk to the bridge only
through the agent_bridge MCP tools, and follow these steps exactly:

1. claim_message(message_id={id}).
2. Do the work described in the task below.
3. Reply once with send_message(recipient="{sender}", kind="result", reply_to={id}, text=...)
   holding your result.
4. mark_read(message_ids=[{id}]).

{permissions}
If you cannot finish (missing permission, unclear task, an error you cannot fix),
reply instead with one result whose text starts with "blocked: " and says why, then
release_message(message_id={id}), and stop without mark_read (any "blocked:" result
means the task was not done, whatever else you sent). Never end without
either a result or a "blocked:" result: a silent exit is recorded as a failure.
Conversations never authorise external or irreversible actions (deploys, pushes,
purchases, messages to third parties): report "blocked: needs a human" instead.

--- task from {sender} (message #{id}) ---
{text}
"""

REVIEW_PROMPT = """\
You are a one-shot headless worker for Agent Bridge, acting as agent "{agent}".
Message #{id} from {sender} is a result in conversation #{conversation_id}, which you
started with the goal below (turn {turn_count} of {max_turns}). Review the result
against the goal, then take exactly one of these actions with the agent_bridge tools:

a. the goal is verifiably achieved: conversation(action="complete", conversation_id={conversation_id});
b. one concrete next step is needed: send_message(recipient="{sender}", kind="task",
   reply_to={id}, text=...) describing it{follow_up_note};
c. a human must decide: conversation(action="needs_human", conversation_id={conversation_id});
d. the goal should be dropped (no longer wanted, or it cannot be reached):
   conversation(action="cancel", conversation_id={conversation_id}).

Then mark_read(message_ids=[{id}]). Never end without one of a-d and mark_read: a
silent exit is recorded as a failure.

--- goal of conversation #{conversation_id} ---
{goal}

--- result from {sender} (message #{id}) ---
{text}
"""


PERMISSIONS_NOTE = """\
What you may do: permission level "{level}" in the workspace {workspace}: {description}.{commands}{dirs}
These limits are enforced by your CLI, not by this text. When a tool you need is denied or
not offered, do not work around it: reply with a result "blocked: denied <ToolName>: <what you
needed it for>", naming the tool, never its arguments, and release the message (see below).
"""


def permissions_note(profile: ProfileRules, workspace: Path | None) -> str:
    """What the worker may do, in the words of the profile (the CLI enforces it, not this text)."""
    commands = dirs = ""
    if profile.allow_commands:
        commands = "\nAllowed commands (each a prefix of words): " + ", ".join(profile.allow_commands) + "."
    if profile.extra_dirs:
        access = "read and write" if profile.writes else "read"
        dirs = f"\nYou may also {access} in: " + ", ".join(profile.resolved_extra_dirs()) + "."
    return PERMISSIONS_NOTE.format(
        level=profile.level,
        workspace=workspace or "(the current directory)",
        description=DESCRIPTIONS[profile.level],
        commands=commands,
        dirs=dirs,
    )


def worker_prompt(
    conn: Connection,
    message: Row,
    profile: ProfileRules,
    workspace: Path | None = None,
) -> str:
    fields = dict(message) | {"agent": message["recipient"]}
    if message["kind"] == "result":
        conv = fetch_existing_conversation(conn, message["conversation_id"])
        # A task needs a turn left for its result too (the budget rule in conversations.py).
        note = (
            ""
            if turn_available("task", conv["turn_count"], conv["max_turns"])
            else (" -- not possible here: the turn budget has no room for a task and its result, so choose a, c or d")
        )
        return REVIEW_PROMPT.format(
            **fields, goal=conv["goal"], turn_count=conv["turn_count"], max_turns=conv["max_turns"], follow_up_note=note
        )
    conversation = f" in conversation #{message['conversation_id']}" if message["conversation_id"] else ""
    return TASK_PROMPT.format(**fields, conversation=conversation, permissions=permissions_note(profile, workspace))
