"""hook_rules.decide: one case per row of the rule (announce or not, block or not)."""

import pytest

from dispatcher.bridge.hook_rules import (
    MIN_GAP_SECONDS,
    REMIND_SECONDS,
    STOP_BLOCK_CAP,
    SessionState,
    decide,
    decide_wait,
    release_wait,
)

T = 1_000_000.0


def told(ids, at=T - 1000.0, last=None, blocks=0):
    return SessionState({i: at for i in ids}, at if last is None else last, blocks)


CASES = [
    # (name, event, waiting, state, now, stop_hook_active, announce, block, why)
    ("nothing waits", "UserPromptSubmit", (), SessionState(), T, False, False, False, "empty"),
    ("nothing waits, Stop", "Stop", (), told([1]), T, False, False, False, "empty"),
    ("first notice on a prompt", "UserPromptSubmit", (1, 2), SessionState(), T, False, True, False, "new"),
    ("first notice after a tool", "PostToolUse", (1,), SessionState(), T, False, True, False, "new"),
    (
        "a new id after a tool, gap over",
        "PostToolUse",
        (1, 2),
        told([1], last=T - MIN_GAP_SECONDS),
        T,
        False,
        True,
        False,
        "new",
    ),
    (
        "a new id after a tool within the gap: deferred",
        "PostToolUse",
        (1, 2),
        told([1], last=T - 1),
        T,
        False,
        False,
        False,
        "gap",
    ),
    (
        "a new id on a prompt ignores the gap",
        "UserPromptSubmit",
        (1, 2),
        told([1], last=T - 1),
        T,
        False,
        True,
        False,
        "new",
    ),
    (
        "already told, recently",
        "UserPromptSubmit",
        (1,),
        told([1], last=T - 5),
        T,
        False,
        False,
        False,
        "announced_recently",
    ),
    (
        "already told, after a tool, recently",
        "PostToolUse",
        (1,),
        told([1], last=T - 5),
        T,
        False,
        False,
        False,
        "announced_recently",
    ),
    (
        "already told long ago: remind",
        "UserPromptSubmit",
        (1,),
        told([1], last=T - REMIND_SECONDS),
        T,
        False,
        True,
        False,
        "remind",
    ),
    (
        "already told long ago, after a tool: remind",
        "PostToolUse",
        (1,),
        told([1], last=T - REMIND_SECONDS - 1),
        T,
        False,
        True,
        False,
        "remind",
    ),
    ("clock set back: remind", "UserPromptSubmit", (1,), told([1], last=T + 50), T, False, True, False, "remind"),
    ("Stop with a new id blocks", "Stop", (1,), SessionState(), T, False, True, True, "stop_new"),
    (
        "Stop with a new id within the gap still blocks",
        "Stop",
        (1, 2),
        told([1], last=T - 1),
        T,
        False,
        True,
        True,
        "stop_new",
    ),
    (
        "Stop never reminds",
        "Stop",
        (1,),
        told([1], last=T - REMIND_SECONDS * 10),
        T,
        False,
        False,
        False,
        "stop_nothing_new",
    ),
    (
        "Stop while stop_hook_active never blocks",
        "Stop",
        (1,),
        SessionState(),
        T,
        True,
        False,
        False,
        "stop_hook_active",
    ),
    (
        "Stop at the block cap",
        "Stop",
        (1, 2),
        told([1], blocks=STOP_BLOCK_CAP),
        T,
        False,
        False,
        False,
        "stop_block_cap",
    ),
    ("Stop just under the cap", "Stop", (1, 2), told([1], blocks=STOP_BLOCK_CAP - 1), T, False, True, True, "stop_new"),
]


@pytest.mark.parametrize(
    ("name", "event", "waiting", "state", "now", "active", "announce", "block", "why"), CASES, ids=[c[0] for c in CASES]
)
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


@pytest.mark.parametrize(
    "doc",
    [
        None,
        [],
        "x",
        {"announced": "x"},
        {"announced": {"a": 1, "2": "y", "3": True}},
        {"last_at": "now", "stop_blocks": -1},
        {"stop_blocks": True},
        {"announced": {"4": float("nan")}},
    ],
)
def test_a_malformed_state_counts_as_nothing_announced(doc):
    state = SessionState.from_json(doc)
    assert state.announced == {} and state.last_at is None and state.stop_blocks == 0


def test_state_round_trips():
    state = SessionState({1: T, 5: T + 1}, T + 1, 2)
    assert SessionState.from_json(state.as_json()) == state


# --- decide_wait: the waiting Stop hook (one case per row) ------------------------------------

ME, OTHER = "w-me", "w-other"


def held(ids=(), last=None, waiter=ME):
    return SessionState({i: T - 1000.0 for i in ids}, last, 0, waiter)


WAIT_CASES = [
    # (name, waiting, state, now, start, announce, why, waiter after)
    ("starting with nothing waiting takes the slot", (), SessionState(), T, True, False, "wait_started", ME),
    ("starting takes the slot from an older waiter", (1,), held([1], waiter=OTHER), T, True, False, "wait_started", ME),
    ("an older waiter finds the slot taken", (1, 2), held([1], waiter=OTHER), T, False, False, "superseded", OTHER),
    (
        "a waiter whose slot was freed by a wake ends",
        (1, 2),
        held([1], waiter=None),
        T,
        False,
        False,
        "superseded",
        None,
    ),
    ("nothing waits: keep waiting", (), held(), T, False, False, "wait_nothing_new", ME),
    (
        "only announced ids wait: keep waiting, never remind",
        (1,),
        held([1], last=T - REMIND_SECONDS * 10),
        T,
        False,
        False,
        "wait_nothing_new",
        ME,
    ),
    ("a new id wakes", (1, 2), held([1], last=T - MIN_GAP_SECONDS), T, False, True, "wake", None),
    ("a new id with no notice before wakes", (5,), held(), T, False, True, "wake", None),
    ("a new id within the gap: deferred", (1, 2), held([1], last=T - 1), T, False, False, "wait_gap", ME),
    ("clock set back: the gap does not hold it", (1, 2), held([1], last=T + 30), T, False, True, "wake", None),
    ("a new id already there at the start wakes at once", (3,), held(waiter=OTHER), T, True, True, "wake", None),
]


@pytest.mark.parametrize(
    ("name", "waiting", "state", "now", "start", "announce", "why", "waiter"),
    WAIT_CASES,
    ids=[c[0] for c in WAIT_CASES],
)
def test_wait_rule(name, waiting, state, now, start, announce, why, waiter):
    verdict = decide_wait(waiting, state, now, ME, start=start)
    assert (verdict.announce, verdict.block, verdict.why) == (announce, announce, why)
    assert verdict.state.waiter == waiter


def test_a_wake_records_the_ids_so_the_next_waiter_does_not_wake_for_them_again():
    woke = decide_wait((1, 2), held([1], last=T - 100), T, ME)
    assert woke.state.announced == {1: T - 1000.0, 2: T} and woke.state.last_at == T
    nxt = decide_wait((1, 2), woke.state, T + 100, OTHER, start=True)
    assert (nxt.announce, nxt.why) == (False, "wait_started")
    assert decide_wait((1, 2), nxt.state, T + 200, OTHER).why == "wait_nothing_new"


def test_an_id_announced_by_another_hook_never_wakes_the_waiter():
    waiting = decide_wait((), SessionState(), T, ME, start=True).state
    by_prompt = decide("UserPromptSubmit", (4,), waiting, T + 1).state
    assert by_prompt.waiter == ME  # other hooks keep the waiter's slot
    assert decide_wait((4,), by_prompt, T + 100, ME).why == "wait_nothing_new"


def test_the_stop_answer_keeps_the_slot_and_a_deferred_wake_comes_after_the_gap():
    state = decide("Stop", (1,), held(waiter=ME), T).state
    assert state.waiter == ME
    deferred = decide_wait((1, 2), state, T + 1, ME)
    assert deferred.why == "wait_gap"
    assert decide_wait((1, 2), deferred.state, T + MIN_GAP_SECONDS, ME).why == "wake"


def test_the_waiter_token_round_trips_and_junk_is_dropped():
    assert SessionState.from_json(held([1], last=T).as_json()) == held([1], last=T)
    for junk in (5, "", "x" * 65, True):
        assert SessionState.from_json({"waiter": junk}).waiter is None


def test_an_ending_waiter_frees_only_its_own_slot():
    assert release_wait(held([1], last=T), ME) == SessionState({1: T - 1000.0}, T, 0, None)
    assert release_wait(held([1], waiter=OTHER), ME) == held([1], waiter=OTHER)
    assert release_wait(held(waiter=None), ME) == held(waiter=None)
