"""Leases across processes: expiry, takeover, exactly one winner in a claim race, and one answer per conversation turn."""

import pytest
from harness import race, sql, start_agents

pytestmark = pytest.mark.both_backends

RACERS = 8
ROUNDS = 50
MAX_ROUNDS = 400  # a bound, not a target: on an idle machine the first ROUNDS suffice


@pytest.fixture(scope="module")
def racers(env):
    agents = start_agents(["claude"] + ["kimi"] * RACERS, env)
    yield agents[0], agents[1:]
    for agent in agents:
        agent.close()


def test_expired_claim_can_be_taken_over_by_another_process(racers, db_path):
    claude, (first, second, *_) = racers
    task = claude.ok("send_message", recipient="kimi", text="lease", kind="task")["id"]
    first.ok("claim_message", message_id=task, lease_seconds=60)
    assert second.call("claim_message", message_id=task).code == "claimed_by_other"
    assert second.call("release_message", message_id=task).code == "not_claimed_by_you"
    # Hidden from the other process while claimed; mark_read by it is skipped.
    assert task not in [m["id"] for m in second.ok("receive_messages", limit=100)["messages"]]
    assert second.ok("mark_read", message_ids=[task])["skipped"] == [{"id": task, "reason": "claimed_by_other"}]

    # Time passes: move the lease into the past instead of sleeping through it.
    sql(db_path, "UPDATE messages SET claim_expires_at = claim_expires_at - 61 WHERE id = ?", (task,))
    assert task in [m["id"] for m in second.ok("receive_messages", limit=100)["messages"]]
    second.ok("claim_message", message_id=task)
    assert first.call("claim_message", message_id=task).code == "claimed_by_other"
    assert first.call("release_message", message_id=task).code == "not_claimed_by_you"
    assert second.ok("mark_read", message_ids=[task])["acknowledged"] == [task]


def test_exactly_one_winner_per_claim_race(racers):
    """ROUNDS rounds, at least ROUNDS // 2 of them with all eight requests really in flight
    together (every one sent before the first answer); on a loaded machine that can take more
    rounds, so it races until it has them (or gives up after MAX_ROUNDS). Every round is checked."""
    claude, kimis = racers
    overlapped_rounds = rounds = 0
    while (rounds < ROUNDS or overlapped_rounds < ROUNDS // 2) and rounds < MAX_ROUNDS:
        rounds += 1
        task = claude.ok("send_message", recipient="kimi", text=f"race {rounds}", kind="task")["id"]
        results, overlapped = race(kimis, "claim_message", message_id=task)
        overlapped_rounds += overlapped
        winners = [k for k, r in zip(kimis, results, strict=True) if not r.is_error]
        assert len(winners) == 1, [r.text for r in results]
        assert [r.code for r in results if r.is_error] == ["claimed_by_other"] * (RACERS - 1)
        # The store agrees with the answers: the lease is the winner's and no loser's.
        owners = [k.ok("get_message", message_id=task)["owned_by_current_worker"] for k in kimis]
        assert owners == [k is winners[0] for k in kimis]
    assert overlapped_rounds >= ROUNDS // 2, f"only {overlapped_rounds}/{rounds} rounds really overlapped"


TURN_SENDERS = 4


def test_exactly_one_result_takes_a_conversations_turn(racers):
    """The turn race: four processes of the responder answer the in-flight task of one
    conversation together; one answer takes the turn, every other is refused (`not_in_turn`) and nothing of it
    is written. Raced over ROUNDS conversations, at least half of them really in flight together."""
    claude, kimis = racers
    senders = kimis[:TURN_SENDERS]
    overlapped_rounds = rounds = 0
    while (rounds < ROUNDS or overlapped_rounds < ROUNDS // 2) and rounds < MAX_ROUNDS:
        rounds += 1
        conv = claude.ok("start_conversation", recipient="kimi", goal=f"race {rounds}", max_turns=4)
        results, overlapped = race(
            senders, "send_message", recipient="claude", text="mine", kind="result", reply_to=conv["message_id"]
        )
        overlapped_rounds += overlapped
        accepted = [r for r in results if not r.is_error]
        assert len(accepted) == 1, [r.text for r in results]
        assert {r.code for r in results if r.is_error} == {"not_in_turn"}, [r.text for r in results]
        status = claude.ok("conversation", action="status", conversation_id=conv["conversation_id"])
        assert status["turn_count"] == 2
        answers = claude.ok("receive_messages", limit=100)["messages"]
        assert [m["reply_to"] for m in answers if m.get("reply_to") == conv["message_id"]] == [conv["message_id"]]
    assert overlapped_rounds >= ROUNDS // 2, f"only {overlapped_rounds}/{rounds} rounds really overlapped"
