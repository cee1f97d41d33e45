"""The worker prompt asks for exactly what the verdict counts (see test_verdict.py)."""

import pytest

from dispatcher.bridge import conversations, messages
from dispatcher.core.permissions import BRIDGE_ONLY
from dispatcher.dispatch.prompts import worker_prompt
from dispatcher.store.messages import fetch_message

AGENTS = {"claude", "kimi"}


def test_task_prompt_matches_the_verdict(conn):
    task = messages.send_message(conn, sender="kimi", recipient="claude", text="do X", agents=AGENTS, kind="task")
    prompt = worker_prompt(conn, fetch_message(conn, task["id"]), BRIDGE_ONLY)
    steps = [f"claim_message(message_id={task['id']})", 'kind="result"', f"mark_read(message_ids=[{task['id']}])"]
    assert all(step in prompt for step in steps)
    # The honest stop: a blocked: result and a release, without mark_read.
    assert '"blocked: "' in prompt and f"release_message(message_id={task['id']})" in prompt
    assert "without mark_read" in prompt


def _review(conn, max_turns: int) -> str:
    conv = conversations.start_conversation(
        conn,
        initiator="kimi",
        recipient="claude",
        goal="the goal",
        agents=AGENTS,
        max_body_bytes=100,
        max_turns=max_turns,
    )
    result = messages.send_message(
        conn, sender="claude", recipient="kimi", text="done", agents=AGENTS, kind="result", reply_to=conv["message_id"]
    )
    return worker_prompt(conn, fetch_message(conn, result["id"]), BRIDGE_ONLY)


@pytest.mark.parametrize(("max_turns", "follow_up_possible"), [(2, False), (3, False), (4, True)])
def test_review_prompt_offers_every_decision_and_says_when_a_follow_up_cannot_fit(conn, max_turns, follow_up_possible):
    prompt = _review(conn, max_turns)
    for action in ("complete", "needs_human", "cancel"):
        assert f'conversation(action="{action}"' in prompt
    assert 'kind="task"' in prompt and "mark_read(" in prompt
    assert ("not possible here" not in prompt) is follow_up_possible
