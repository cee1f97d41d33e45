"""The one rule for a CLI hook's inbox notice: announce or not, and block or not.

Pure: it gets what waits now (ids, from the payload-free inbox summary), what was already
announced to this CLI session and when, and returns a ``Verdict`` plus the session's next
state. ``dispatcher/wake/hooks.py`` does the reading, writing and printing.

The rule, per (agent, CLI session):

- nothing waits: stay silent;
- an id never announced to this session waits: announce at once, except within
  ``MIN_GAP_SECONDS`` of the previous announcement on ``PostToolUse`` (a turn with many tool
  calls is not flooded); the id stays "never announced", so the next event after the gap,
  any ``UserPromptSubmit``, or the ``Stop`` at the end of the turn announces it: a
  never-announced id is deferred, never dropped;
- only ids already announced wait: remind at most every ``REMIND_SECONDS`` (on
  ``UserPromptSubmit`` and ``PostToolUse``; never on ``Stop``);
- ``Stop`` blocks (exit 2 / asyncRewake: the model gets another turn) only for an id never
  announced to this session, never while ``stop_hook_active`` (Claude is already continuing
  because of a Stop hook), and at most ``STOP_BLOCK_CAP`` times in a row (Claude Code cuts a
  Stop hook off after 8 consecutive blocks; we stay far below). Anything but a block ends the run.

The state only keeps ids that still wait, so it stays small and an id that comes back
(released after a claim) is announced again.

The waiting ``Stop`` hook (``--wait``, ``decide_wait``): after its ``Stop`` answer, a hook that
Claude runs in the background (``asyncRewake``) stays and watches the store, to wake a session
that sits idle. Per session:

- the newest waiter wins: starting to wait takes the session's waiter slot, and an older waiter
  that finds the slot taken ends silently (``superseded``), so at most one waits per session;
- it wakes (exit 2) only for an id never announced to this session: an id a prompt, a tool call
  or another hook already announced never wakes it, so a wake always means new mail;
- never within ``MIN_GAP_SECONDS`` of the previous notice (deferred, not dropped: it wakes once
  the gap is over), so a flood of messages wakes an idle session at most every 10 s;
- a waiter wakes at most once and then ends (the slot is freed); the next waiter starts only
  when the turn that the wake started has ended (its own ``Stop``). ``stop_hook_active`` does not
  stop it from waiting: that turn was started by a hook, but the next wake needs another new id.
"""

from dataclasses import dataclass, field, replace
from typing import Any

MIN_GAP_SECONDS = 10.0
REMIND_SECONDS = 600.0
STOP_BLOCK_CAP = 3

EVENTS = ("UserPromptSubmit", "PostToolUse", "Stop")


@dataclass(frozen=True)
class SessionState:
    """What this CLI session was already told."""

    announced: dict[int, float] = field(default_factory=dict)  # id -> when first announced
    last_at: float | None = None  # when the last notice was given
    stop_blocks: int = 0  # consecutive Stop blocks
    waiter: str | None = None  # the token of the waiting Stop hook that holds the slot

    def as_json(self) -> dict[str, Any]:
        return {
            "announced": {str(k): v for k, v in sorted(self.announced.items())},
            "last_at": self.last_at,
            "stop_blocks": self.stop_blocks,
            "waiter": self.waiter,
        }

    @classmethod
    def from_json(cls, doc: object) -> "SessionState":
        """Lenient: anything malformed counts as "nothing announced yet" (announcing twice beats never)."""
        if not isinstance(doc, dict):
            return cls()
        announced = {}
        raw = doc.get("announced")
        if isinstance(raw, dict):
            for key, when in raw.items():
                if isinstance(key, str) and key.isdigit() and _number(when) is not None:
                    announced[int(key)] = float(when)
        last_at = _number(doc.get("last_at"))
        blocks = doc.get("stop_blocks")
        blocks = blocks if isinstance(blocks, int) and not isinstance(blocks, bool) and 0 <= blocks < 1000 else 0
        waiter = doc.get("waiter")
        waiter = waiter if isinstance(waiter, str) and 0 < len(waiter) <= 64 else None
        return cls(announced, last_at, blocks, waiter)


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if value == value and abs(value) != float("inf") else None


@dataclass(frozen=True)
class Verdict:
    announce: bool  # give the notice now
    block: bool  # Stop only: keep the turn going (exit 2) so the model sees it
    why: str  # a payload-free word for the private log and the tests
    state: SessionState  # the session's state to keep


def decide(
    event: str, waiting: tuple[int, ...], state: SessionState, now: float, *, stop_hook_active: bool = False
) -> Verdict:
    """``waiting``: ids of unread messages now (any order); ``now``: seconds (epoch)."""
    waiting_set = set(waiting)
    kept = {i: t for i, t in state.announced.items() if i in waiting_set}
    fresh = sorted(waiting_set - kept.keys())
    blocks = state.stop_blocks if event == "Stop" else 0
    base = SessionState(kept, state.last_at, 0, state.waiter)  # anything but a block ends a run of Stop blocks

    def silent(why: str) -> Verdict:
        return Verdict(False, False, why, base)

    def told(why: str, block: bool = False) -> Verdict:
        announced = {**kept, **{i: now for i in fresh}}
        return Verdict(True, block, why, SessionState(announced, now, blocks + 1 if block else 0, state.waiter))

    if not waiting_set:
        return silent("empty")
    since = None if state.last_at is None else now - state.last_at
    if event == "Stop":
        if not fresh:
            return silent("stop_nothing_new")
        if stop_hook_active:
            return silent("stop_hook_active")
        if blocks >= STOP_BLOCK_CAP:
            return silent("stop_block_cap")
        return told("stop_new", block=True)
    if fresh:
        if event == "PostToolUse" and since is not None and 0 <= since < MIN_GAP_SECONDS:
            return silent("gap")
        return told("new")
    if since is None or since < 0 or since >= REMIND_SECONDS:  # a clock set back counts as "long ago"
        return told("remind")
    return silent("announced_recently")


def decide_wait(
    waiting: tuple[int, ...], state: SessionState, now: float, waiter: str, *, start: bool = False
) -> Verdict:
    """One look of the waiting ``Stop`` hook ``waiter`` (a token unique to that process).

    ``start``: the waiter begins (right after its ``Stop`` answer, which did not block): it takes
    the slot, whoever held it. Otherwise it must still hold the slot. ``announce`` (with
    ``block``) means: exit 2 now with the notice, and end. ``why == "superseded"`` means: end
    silently. Anything else: keep waiting."""
    if not start and state.waiter != waiter:
        return Verdict(False, False, "superseded", state)
    waiting_set = set(waiting)
    kept = {i: t for i, t in state.announced.items() if i in waiting_set}
    fresh = sorted(waiting_set - kept.keys())
    holding = SessionState(kept, state.last_at, state.stop_blocks, waiter)
    if not fresh:
        return Verdict(False, False, "wait_started" if start else "wait_nothing_new", holding)
    since = None if state.last_at is None else now - state.last_at
    if since is not None and 0 <= since < MIN_GAP_SECONDS:
        return Verdict(False, False, "wait_gap", holding)
    announced = {**kept, **{i: now for i in fresh}}
    return Verdict(True, True, "wake", SessionState(announced, now, 0, None))


def release_wait(state: SessionState, waiter: str) -> SessionState:
    """A waiter that ends (its bound, a signal, Claude gone) frees the slot if it still holds it."""
    return replace(state, waiter=None) if state.waiter == waiter else state
