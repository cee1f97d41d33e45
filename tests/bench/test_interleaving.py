"""How the latency benchmark orders its calls (bench/measure.py ``_timed_interleaved``): blocks of
consecutive calls per system, the systems' order alternating round by round, and a block's first
call after another system's kept apart as the switch."""

from dataclasses import dataclass

import anyio

from bench.measure import _timed_interleaved


@dataclass
class Answer:
    ok: bool = True
    value: int | None = 1
    error: str | None = None


def run(keys: str, calls: int, warmup: int, block: int) -> tuple[list[str], dict]:
    order: list[str] = []

    def call_of(key: str):
        async def call() -> Answer:
            order.append(key)
            return Answer()

        return call

    timed = {key: (call_of(key), None) for key in keys}
    res = anyio.run(lambda: _timed_interleaved(timed, calls, warmup, 60.0, block))
    return order, res


def test_call_by_call_alternates_the_order_and_keeps_every_sample():
    order, res = run("ab", calls=3, warmup=1, block=1)
    assert order == ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert res["a"]["n"] == res["b"]["n"] == 3
    assert res["a"]["after_switch"] is None


def test_blocks_run_each_system_in_a_row_and_set_apart_the_first_call_after_another():
    order, res = run("ab", calls=6, warmup=2, block=4)
    # Rounds of 4 calls each, b first in the odd round: b's second block follows its own first.
    assert order == ["a"] * 4 + ["b"] * 8 + ["a"] * 4
    # Round 0: a's calls 0-1 warm up, 2-3 timed; b's first (call 0) is warm-up. Round 1: b goes
    # first (after itself, 4 timed), a's call 4 follows b's block (after_switch), 5-7 timed.
    assert res["a"]["after_switch"]["n"] == 1
    assert res["a"]["n"] == 5
    assert res["b"]["after_switch"]["n"] == 0
    assert res["b"]["n"] == 6
