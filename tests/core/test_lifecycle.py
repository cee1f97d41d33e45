"""The end states in ``dispatcher.core.lifecycle`` are defined once: they agree with the transition
tables they summarise, and no other module of ``dispatcher/`` spells them out again."""

import ast

from harness import dispatcher_modules

from dispatcher.bridge.conversations import STATES, TRANSITIONS
from dispatcher.core.lifecycle import FAILURE_OUTCOMES, TERMINAL_CONVERSATION_STATES
from dispatcher.dispatch.attempts import OUTCOMES


def test_terminal_conversation_states_are_those_no_event_leaves():
    left_by_some_event = {state for _, allowed_from in TRANSITIONS.values() for state in allowed_from}
    assert set(TERMINAL_CONVERSATION_STATES) == set(STATES) - left_by_some_event


def test_failure_outcomes_are_outcomes_and_success_is_not_one():
    assert set(FAILURE_OUTCOMES) < set(OUTCOMES)
    assert {"succeeded", "blocked"}.isdisjoint(FAILURE_OUTCOMES)


def test_no_other_module_spells_them_out():
    rules = {frozenset(TERMINAL_CONVERSATION_STATES), frozenset(FAILURE_OUTCOMES)}
    copies = [
        f"{path}:{node.lineno}"
        for path, tree in dispatcher_modules()
        if path != "dispatcher/core/lifecycle.py"
        for node in ast.walk(tree)
        if isinstance(node, ast.Tuple | ast.List | ast.Set)
        and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts)
        and frozenset(e.value for e in node.elts) in rules
    ]
    assert copies == [], f"import them from dispatcher.core.lifecycle instead: {copies}"
