"""A worker's server acts only on its own attempt.

A headless worker's server (role ``worker``) is started with the message id and the attempt
token of the attempt it serves (``AGENT_BRIDGE_MESSAGE_ID``, ``AGENT_BRIDGE_WORKER_TOKEN``).
Every tool call first proves that binding against the attempt row (the token matches and the
attempt is not settled), then:

- claim, release and acknowledge act only on that message, and the server claims under the
  attempt's own claim owner (the one the barrier took the claim with);
- a send must reply to that message and go to its sender: a result, a notice or a plain note,
  and a task only as the next turn of the message's conversation, where the conversation's
  turn budget counts it; every message it writes records the attempt (``sent_by_attempt``);
- reads (receive, get) see only that message, its replies, the message it answers and its
  conversation; ``conversation`` acts only on that conversation;
- ``start_conversation`` is refused: a conversation started by a worker would start a new
  chain of dispatched tasks that no existing budget bounds.

Everything else is refused with one code, ``worker_scope``. Task text can steer a worker, so
a worker must not be able to start an unbounded chain of tasks between agents, nor to take,
answer or acknowledge another task (which would then never get an attempt or a notice).
"""

from dataclasses import dataclass

from dispatcher.core.errors import BridgeError
from dispatcher.store import Connection, Row
from dispatcher.store.attempts import get_attempt
from dispatcher.store.messages import fetch_message, in_thread_of

CODE = "worker_scope"


def attempt_claim_owner(agent: str, message_id: int) -> str:
    """The claim owner of the attempt at ``message_id``: the barrier claims with it, the
    supervisor renews it, and only that attempt's worker server acts as it."""
    return f"{agent}-attempt-{message_id}"


def _refuse(what: str) -> BridgeError:
    return BridgeError(CODE, f"{what} A worker acts only on the message it was started for; nothing was changed.")


@dataclass(frozen=True)
class WorkerScope:
    """The attempt a worker's server is bound to; ``message_id`` or ``token`` None when the
    server was started without them (then every tool call is refused)."""

    agent: str
    message_id: int | None
    token: str | None

    @property
    def claim_owner(self) -> str:
        return attempt_claim_owner(self.agent, self.message_id or 0)

    def own_message(self, conn: Connection) -> Row:
        """The message of this worker's attempt, once the binding is proven; else ``worker_scope``."""
        if self.message_id is None or not self.token:
            raise _refuse(
                "this worker's server was started without its attempt (AGENT_BRIDGE_MESSAGE_ID and "
                "AGENT_BRIDGE_WORKER_TOKEN)."
            )
        import secrets  # here: it loads OpenSSL, which the listener (importing this module) never needs

        attempt = get_attempt(conn, self.message_id)
        if (
            attempt is None
            or attempt["agent"] != self.agent
            or not secrets.compare_digest(str(attempt["worker_token"] or ""), self.token)
        ):
            raise _refuse(f"this server's token is not that of the attempt at message #{self.message_id}.")
        if attempt["state"] == "finished":
            raise _refuse(f"the attempt at message #{self.message_id} is settled.")
        row = fetch_message(conn, self.message_id)
        if row is None:
            raise _refuse(f"message #{self.message_id} is gone.")
        return row

    def check_message(self, conn: Connection, message_ids: list[int]) -> None:
        """Claim, release and acknowledge: only the attempt's own message."""
        own = self.own_message(conn)["id"]
        if any(i != own for i in message_ids):
            raise _refuse(f"this worker may claim, release or acknowledge only message #{own}.")

    def check_read(self, conn: Connection, message_id: int) -> None:
        own = self.own_message(conn)["id"]
        if not in_thread_of(conn, own, message_id):
            raise _refuse(f"this worker may read only message #{own}, its thread and its conversation.")

    def check_send(
        self, conn: Connection, *, recipient: str, kind: str | None, reply_to: int | None, conversation_id: int | None
    ) -> None:
        """A reply to the attempt's message, to its sender; a task only inside its conversation."""
        own = self.own_message(conn)
        if reply_to != own["id"] or recipient != own["sender"]:
            raise _refuse(f"a worker's message must reply_to #{own['id']} and go to its sender, {own['sender']}.")
        if conversation_id is not None and conversation_id != own["conversation_id"]:
            raise _refuse(f"message #{own['id']} is not in conversation #{conversation_id}.")
        if kind == "task" and own["conversation_id"] is None:
            raise _refuse(
                "a worker may send a task only as the next turn of its message's conversation, where the "
                "turn budget counts it; answer with a result instead."
            )

    def check_conversation(self, conn: Connection, conversation_id: int) -> None:
        own = self.own_message(conn)
        if own["conversation_id"] is None or conversation_id != own["conversation_id"]:
            raise _refuse(f"this worker may act only on the conversation of message #{own['id']}.")

    def refuse_new_conversation(self, conn: Connection) -> None:  # noqa: ARG002 - the tools' call shape
        raise _refuse(
            "a worker may not start a conversation: its goal would be a new task that no budget of this attempt bounds."
        )
