"""Issue 33, items 1 and 2: the approval rules (pure), and that only a person's command decides."""

import ast
from pathlib import Path

import anyio
import pytest

from dispatcher.bridge.approvals import (
    ANSWER_MARGIN_SECONDS,
    POLL_SECONDS,
    covers,
    decision,
    encode_input,
    prompt_answer,
    state,
    waits_until,
)
from dispatcher.core.errors import BridgeError

PROJECT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("timeout", "deadline", "until"),
    [
        (600, None, 1600.0),  # its own timeout
        (600, 1300.0, 1300.0 - ANSWER_MARGIN_SECONDS),  # never past the worker's own deadline, less the margin
        (600, 1010.0, 1000.0),  # a deadline already too close: it does not wait at all
    ],
)
def test_how_long_a_request_waits(timeout, deadline, until):
    assert waits_until(1000.0, timeout, deadline) == until


@pytest.mark.parametrize(
    ("decision", "expires_at", "now", "said"),
    [
        ("allow_once", 10.0, 20.0, "allow_once"),
        ("deny", 10.0, 5.0, "deny"),
        (None, 10.0, 5.0, "waiting"),
        (None, 10.0, 10.0, "expired"),
    ],
)
def test_a_requests_state(decision, expires_at, now, said):
    assert state({"decision": decision, "expires_at": expires_at}, now) == said


@pytest.mark.parametrize("outcome", ["allow_once", "allow_attempt"])
def test_an_allowed_request_runs_the_input_unchanged(outcome):
    assert prompt_answer(outcome, "Edit", {"a": 1}) == {"behavior": "allow", "updatedInput": {"a": 1}}


@pytest.mark.parametrize(("outcome", "why"), [("deny", "a person denied it"), ("expired", "no person answered")])
def test_a_denied_or_unanswered_request_tells_the_worker_to_answer_blocked(outcome, why):
    answer = prompt_answer(outcome, "Bash", {"command": "secret"})
    assert answer["behavior"] == "deny"
    assert why in answer["message"] and "blocked: denied Bash" in answer["message"]
    assert "secret" not in answer["message"]


@pytest.mark.parametrize(
    ("allowed", "call", "covered"),
    [
        ({"file_path": "/w/a"}, {"file_path": "/w/b"}, True),  # a tool: every call of it
        ({"command": "uv run pytest"}, {"command": "uv run pytest"}, True),  # a command: that one
        ({"command": "uv run pytest"}, {"command": "uv run pytest", "description": "d"}, True),
        ({"command": "uv run pytest"}, {"command": "uv run pytest -x"}, False),  # not a prefix of it
        ({"command": "uv run pytest"}, {"command": "uv run ruff check"}, False),
        ({"file_path": "/w/a"}, {"command": "uv run pytest"}, False),
    ],
)
def test_what_allowed_for_the_attempt_covers(allowed, call, covered):
    assert covers(allowed, call) is covered


def _waited(rows: list) -> tuple[str, list[float]]:
    """``decision`` over a fake clock (each look one step later) and rows read in turn."""
    clock, slept, seen = iter(float(t) for t in range(100)), [], iter(rows)

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    return anyio.run(decision, lambda: next(seen), lambda: next(clock), sleep), slept


def test_a_waiting_request_is_looked_at_until_decided_or_expired():
    waiting, soon = {"decision": None, "expires_at": 1.5}, {"decision": None, "expires_at": 0.25}
    assert _waited([waiting, {**waiting, "decision": "allow_once"}]) == ("allow_once", [POLL_SECONDS])
    assert _waited([waiting, waiting, waiting]) == ("expired", [POLL_SECONDS, POLL_SECONDS])
    assert _waited([soon, soon]) == ("expired", [0.25])  # never sleeps past its expiry
    assert _waited([None]) == ("expired", [])  # gone (pruned): denied


def test_an_oversized_input_is_refused():
    with pytest.raises(BridgeError) as refused:
        encode_input({"x": "y" * 70000})
    assert refused.value.code == "approval_input_too_large"


def test_only_the_persons_command_calls_the_decision():
    """No MCP module (any role's tools), no hook (the shell hook's ``ask`` included), no worker code calls ``decide``: the commands
    (``cli``, ``top``'s keys and ``ops.approvals``) are the one caller (and ``bridge.approvals`` calls the store's)."""
    callers = set()
    for path in (PROJECT / "dispatcher").rglob("*.py"):
        tree = ast.parse(path.read_text())
        imported = {
            alias.name if isinstance(node, ast.Import) else f"{node.module}.{alias.name}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom)
            for alias in node.names
        }
        if not any(
            name.endswith(("bridge.approvals", "store.approvals")) or ".approvals." in name for name in imported
        ):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and "decide" in (
                getattr(node.func, "attr", None),
                getattr(node.func, "id", None),
            ):
                callers.add(str(path.relative_to(PROJECT)))
    assert callers == {
        "dispatcher/ops/cli.py",  # approve, deny
        "dispatcher/ops/top.py",  # a person's key
        "dispatcher/ops/approvals.py",
        "dispatcher/bridge/approvals.py",
    }
    assert not [
        c
        for c in callers
        if c.startswith(("dispatcher/mcp/", "dispatcher/wake/", "dispatcher/dispatch/", "dispatcher/clis/"))
    ]
    # The shell hook that asks (clis.shell_approval) is among the modules looked at, and records only.
    hook = (PROJECT / "dispatcher" / "clis" / "shell_approval.py").read_text()
    assert "bridge import approvals" in hook and ".decide(" not in hook
