"""The worker scope rule (``bridge.worker_scope``), case by case on a real SQLite file: what a
worker's server bound to one attempt may claim, read, send and decide. Over MCP stdio:
tests/mcp/test_worker_scope.py."""

import pytest
from dispatch_harness import record_attempt

from dispatcher.bridge import conversations, messages
from dispatcher.bridge.worker_scope import WorkerScope
from dispatcher.core.config import AgentConfig, BridgeConfig
from dispatcher.core.errors import BridgeError
from dispatcher.dispatch.outcome import settle
from dispatcher.store.messages import in_thread_of

pytestmark = pytest.mark.both_backends

AGENTS = {"claude", "kimi", "codex"}
CONFIG = BridgeConfig(
    agents={a: AgentConfig(launcher="launchers/command_headless.sh", auto=True) for a in sorted(AGENTS)}
)


def _send(conn, sender, recipient, kind="task", **kw) -> int:
    return messages.send_message(conn, sender=sender, recipient=recipient, text="t", agents=AGENTS, kind=kind, **kw)[
        "id"
    ]


def _attempt(conn, message_id: int) -> None:
    """The attempt at ``message_id``, with the token ``tok``."""
    record_attempt(conn, message_id, CONFIG, "tok")


@pytest.fixture
def standalone(conn):
    """kimi's task #own to claude, with an attempt; claude's parent task it answers; another task."""
    parent = _send(conn, "claude", "kimi")
    own = _send(conn, "kimi", "claude", reply_to=parent)
    other = _send(conn, "kimi", "claude")
    reply = _send(conn, "claude", "kimi", kind="notice", reply_to=own)
    _attempt(conn, own)
    return {"own": own, "parent": parent, "other": other, "reply": reply, "scope": WorkerScope("claude", own, "tok")}


# -- the binding ---------------------------------------------------------------------------------
#   case                      agent     message   token    refused
BINDING_TABLE = [
    ("bound", "claude", "own", "tok", False),
    ("no message id", "claude", None, "tok", True),
    ("no token", "claude", "own", None, True),
    ("empty token", "claude", "own", "", True),
    ("wrong token", "claude", "own", "tok2", True),
    ("another agent", "kimi", "own", "tok", True),
    ("no attempt", "claude", "other", "tok", True),
]


@pytest.mark.parametrize(
    ("case", "agent", "message", "token", "refused"), BINDING_TABLE, ids=[r[0] for r in BINDING_TABLE]
)
def test_the_binding(conn, standalone, case, agent, message, token, refused):
    scope = WorkerScope(agent, standalone.get(message), token)
    if refused:
        with pytest.raises(BridgeError) as info:
            scope.own_message(conn)
        assert info.value.code == "worker_scope"
    else:
        assert scope.own_message(conn)["id"] == standalone["own"]


def test_a_settled_attempt_binds_nothing(conn, standalone):
    settle(conn, standalone["own"], fallback="failed")
    with pytest.raises(BridgeError) as info:
        standalone["scope"].own_message(conn)
    assert info.value.code == "worker_scope"


# -- claim, release, acknowledge ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("ids", "refused"), [(["own"], False), (["other"], True), (["own", "other"], True), (["parent"], True)]
)
def test_claim_release_and_acknowledge_only_the_own_message(conn, standalone, ids, refused):
    check = lambda: standalone["scope"].check_message(conn, [standalone[i] for i in ids])  # noqa: E731
    if refused:
        with pytest.raises(BridgeError, match="worker_scope"):
            check()
    else:
        check()


# -- reads ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("which", "visible"), [("own", True), ("reply", True), ("parent", True), ("other", False)])
def test_reads_see_the_message_its_thread_and_nothing_else(conn, standalone, which, visible):
    assert in_thread_of(conn, standalone["own"], standalone[which]) is visible
    if visible:
        standalone["scope"].check_read(conn, standalone[which])
    else:
        with pytest.raises(BridgeError, match="worker_scope"):
            standalone["scope"].check_read(conn, standalone[which])


def test_reads_see_the_conversation(conn):
    conv = conversations.start_conversation(
        conn, initiator="kimi", recipient="claude", goal="g", agents=AGENTS, max_body_bytes=100
    )
    notice = _send(conn, "kimi", "claude", kind="notice", conversation_id=conv["conversation_id"])
    elsewhere = _send(conn, "kimi", "claude", kind="notice")
    assert in_thread_of(conn, conv["message_id"], notice) is True
    assert in_thread_of(conn, conv["message_id"], elsewhere) is False


# -- sends ----------------------------------------------------------------------------------------
#   case                                     recipient  kind      reply_to   conversation  in a conversation  refused
SEND_TABLE = [
    ("a result to the sender", "kimi", "result", "own", None, False, False),
    ("a blocked: result", "kimi", "result", "own", None, False, False),
    ("a notice to the sender", "kimi", "notice", "own", None, False, False),
    ("a plain note to the sender", "kimi", None, "own", None, False, False),
    ("a new task (no reply_to)", "kimi", "task", None, None, False, True),
    ("a standalone task answering its message", "kimi", "task", "own", None, False, True),
    ("a task to a third agent", "codex", "task", "own", None, False, True),
    ("a result to another task", "kimi", "result", "other", None, False, True),
    ("a note to a third agent", "codex", None, "own", None, False, True),
    ("a broadcast", "*", "notice", None, None, False, True),
    ("the conversation's next turn", "kimi", "task", "own", None, True, False),
    ("the next turn, naming its conversation", "kimi", "task", "own", "own", True, False),
    ("the next turn, naming another conversation", "kimi", "task", "own", "other", True, True),
]


@pytest.mark.parametrize(
    ("case", "recipient", "kind", "reply_to", "conversation", "in_conversation", "refused"),
    SEND_TABLE,
    ids=[r[0] for r in SEND_TABLE],
)
def test_what_a_worker_may_send(conn, case, recipient, kind, reply_to, conversation, in_conversation, refused):
    if in_conversation:
        mine = conversations.start_conversation(
            conn, initiator="kimi", recipient="claude", goal="g", agents=AGENTS, max_body_bytes=100
        )
        other = conversations.start_conversation(
            conn, initiator="kimi", recipient="claude", goal="h", agents=AGENTS, max_body_bytes=100
        )
        ids = {"own": mine["message_id"], "other": other["message_id"]}
        conv_ids = {"own": mine["conversation_id"], "other": other["conversation_id"], None: None}
    else:
        ids = {"own": _send(conn, "kimi", "claude"), "other": _send(conn, "kimi", "claude")}
        conv_ids = {None: None}
    _attempt(conn, ids["own"])
    scope = WorkerScope("claude", ids["own"], "tok")
    check = lambda: scope.check_send(  # noqa: E731
        conn, recipient=recipient, kind=kind, reply_to=ids.get(reply_to), conversation_id=conv_ids[conversation]
    )
    if refused:
        with pytest.raises(BridgeError, match="worker_scope"):
            check()
    else:
        check()


# -- conversations --------------------------------------------------------------------------------
def test_conversation_actions_only_on_its_own_conversation_and_never_a_new_one(conn, standalone):
    mine = conversations.start_conversation(
        conn, initiator="kimi", recipient="claude", goal="g", agents=AGENTS, max_body_bytes=100
    )
    other = conversations.start_conversation(
        conn, initiator="kimi", recipient="claude", goal="h", agents=AGENTS, max_body_bytes=100
    )
    _attempt(conn, mine["message_id"])
    scope = WorkerScope("claude", mine["message_id"], "tok")
    scope.check_conversation(conn, mine["conversation_id"])
    for refused in (
        lambda: scope.check_conversation(conn, other["conversation_id"]),
        lambda: standalone["scope"].check_conversation(conn, mine["conversation_id"]),  # a standalone task has none
        lambda: scope.refuse_new_conversation(conn),
    ):
        with pytest.raises(BridgeError, match="worker_scope"):
            refused()
