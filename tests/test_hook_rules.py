"""hook_rules.decide: one case per row of the rule (announce or not, block or not)."""

import pytest

from dispatcher.hook_rules import MIN_GAP_SECONDS, REMIND_SECONDS, STOP_BLOCK_CAP, SessionState, decide

T = 1_000_000.0


def told(ids, at=T - 1000.0, last=None, blocks=0):
    return SessionState({i: at for i in ids}, at if last is None else last, blocks)


CASES = [
    # (name, event, waiting, state, now, stop_hook_active, announce, block, why)
    ("nothing waits", "UserPromptSubmit", (), SessionState(), T, False, False, False, "empty"),
    ("nothing waits, Stop", "Stop", (), told([1]), T, False, False, False, "empty"),
    ("first notice on a prompt", "UserPromptSubmit", (1, 2), SessionState(), T, False, True, False, "new"),
    ("first notice after a tool", "PostToolUse", (1,), SessionState(), T, False, True, False, "new"),
    ("a new id after a tool, gap over", "PostToolUse", (1, 2), told([1], last=T - MIN_GAP_SECONDS), T, False,
     True, False, "new"),
    ("a new id after a tool within the gap: deferred", "PostToolUse", (1, 2), told([1], last=T - 1), T, False,
     False, False, "gap"),
    ("a new id on a prompt ignores the gap", "UserPromptSubmit", (1, 2), told([1], last=T - 1), T, False,
     True, False, "new"),
    ("already told, recently", "UserPromptSubmit", (1,), told([1], last=T - 5), T, False, False, False,
     "announced_recently"),
    ("already told, after a tool, recently", "PostToolUse", (1,), told([1], last=T - 5), T, False, False, False,
     "announced_recently"),
    ("already told long ago: remind", "UserPromptSubmit", (1,), told([1], last=T - REMIND_SECONDS), T, False,
     True, False, "remind"),
    ("already told long ago, after a tool: remind", "PostToolUse", (1,), told([1], last=T - REMIND_SECONDS - 1), T,
     False, True, False, "remind"),
    ("clock set back: remind", "UserPromptSubmit", (1,), told([1], last=T + 50), T, False, True, False, "remind"),
    ("Stop with a new id blocks", "Stop", (1,), SessionState(), T, False, True, True, "stop_new"),
    ("Stop with a new id within the gap still blocks", "Stop", (1, 2), told([1], last=T - 1), T, False,
     True, True, "stop_new"),
    ("Stop never reminds", "Stop", (1,), told([1], last=T - REMIND_SECONDS * 10), T, False, False, False,
     "stop_nothing_new"),
    ("Stop while stop_hook_active never blocks", "Stop", (1,), SessionState(), T, True, False, False,
     "stop_hook_active"),
    ("Stop at the block cap", "Stop", (1, 2), told([1], blocks=STOP_BLOCK_CAP), T, False, False, False,
     "stop_block_cap"),
    ("Stop just under the cap", "Stop", (1, 2), told([1], blocks=STOP_BLOCK_CAP - 1), T, False, True, True,
     "stop_new"),
]


@pytest.mark.parametrize(("name", "event", "waiting", "state", "now", "active", "announce", "block", "why"), CASES,
                         ids=[c[0] for c in CASES])
def test_rule(name, event, waiting, state, now, active, announce, block, why):
    verdict = decide(event, waiting, state, now, stop_hook_active=active)
    assert (verdict.announce, verdict.block, verdict.why) == (announce, block, why)


def test_an_announcement_records_every_waiting_id_and_the_time():
    verdict = decide("UserPromptSubmit", (3, 1), told([1], at=T - 700, last=T - 700), T)
    assert verdict.state.announced == {1: T - 700, 3: T}
    assert verdict.state.last_at == T


def test_ids_no_longer_waiting_are_forgotten_so_a_released_one_is_announced_again():
    after_read = decide("UserPromptSubmit", (2,), told([1, 2], last=T - 5), T).state
    assert set(after_read.announced) == {2}
    again = decide("PostToolUse", (1, 2), after_read, T + MIN_GAP_SECONDS)
    assert (again.announce, again.why) == (True, "new")


def test_a_deferred_id_is_announced_by_the_next_event_after_the_gap():
    state = told([1], last=T)
    deferred = decide("PostToolUse", (1, 2), state, T + 1)
    assert not deferred.announce and 2 not in deferred.state.announced
    later = decide("PostToolUse", (1, 2), deferred.state, T + MIN_GAP_SECONDS + 1)
    assert (later.announce, later.why) == (True, "new") and 2 in later.state.announced


def test_stop_blocks_count_up_and_anything_else_ends_the_run():
    state = SessionState()
    for n in range(1, STOP_BLOCK_CAP + 1):
        verdict = decide("Stop", (n,), state, T + n)
        assert verdict.block and verdict.state.stop_blocks == n
        state = verdict.state
    capped = decide("Stop", (99,), state, T + 50)
    assert not capped.block and capped.state.stop_blocks == 0
    assert decide("UserPromptSubmit", (1,), state, T + 50).state.stop_blocks == 0


def test_the_same_id_never_blocks_stop_twice():
    first = decide("Stop", (7,), SessionState(), T)
    second = decide("Stop", (7,), first.state, T + 1)
    assert first.block and not second.block


@pytest.mark.parametrize("doc", [None, [], "x", {"announced": "x"}, {"announced": {"a": 1, "2": "y", "3": True}},
                                 {"last_at": "now", "stop_blocks": -1}, {"stop_blocks": True},
                                 {"announced": {"4": float("nan")}}])
def test_a_malformed_state_counts_as_nothing_announced(doc):
    state = SessionState.from_json(doc)
    assert state.announced == {} and state.last_at is None and state.stop_blocks == 0


def test_state_round_trips():
    state = SessionState({1: T, 5: T + 1}, T + 1, 2)
    assert SessionState.from_json(state.as_json()) == state
