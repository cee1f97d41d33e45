"""Why a dispatch failed, one payload-free line `<code>: <what to do>`, one case per row.
Before, a failed attempt said only its outcome and error kind (`failed (no_evidence)`),
never the cause its CLI named, nor what to do."""

import pytest

from dispatcher.core.lifecycle import FAILURE_OUTCOMES
from dispatcher.core.reasons import CLI_STATUS_FIXES, CRASH_FIXES, ERROR_KIND_FIXES, failure_reason, reason_code


@pytest.mark.parametrize(
    ("outcome", "error_kind", "cli_status", "code"),
    [
        ("succeeded", None, "ok", None),
        ("blocked", None, "ok", None),
        (None, None, None, None),  # not finished
        ("failed", "no_evidence", "auth_error", "auth_error"),  # the CLI's cause wins
        ("failed", "no_evidence", "api_error", "api_error"),
        ("failed", "no_evidence", "retryable", "retryable"),
        ("failed", "no_evidence", "max_turns", "max_turns"),
        ("budget_exceeded", "no_evidence", "budget_exceeded", "budget_exceeded"),
        ("budget_exceeded", None, None, "budget_exceeded"),
        ("timeout", "no_evidence", "no_result", "timeout"),
        ("crashed", "worker_gone", None, "crashed"),
        ("crashed", "host_lost", None, "host_lost"),  # the kind names the cause: another host went silent
        ("failed", "cli_not_found", None, "cli_not_found"),
        ("failed", "launcher_usage", None, "launcher_usage"),
        ("failed", "permissions_unenforceable", None, "permissions_unenforceable"),
        ("failed", "spawn_unrecorded", None, "spawn_unrecorded"),
        ("failed", "no_evidence", "ok", "no_evidence"),  # the CLI was fine; the worker did not answer
        ("failed", "no_evidence", "error", "no_evidence"),
        ("failed", "spawn:FileNotFoundError", None, "spawn:FileNotFoundError"),  # no fix known: where to look
        ("failed", None, None, "failed"),
    ],
)
def test_failure_reason(outcome, error_kind, cli_status, code):
    reason = failure_reason(outcome, error_kind, cli_status)
    assert reason_code(outcome, error_kind, cli_status) == code
    if code is None:
        assert reason is None
    else:
        head, fix = reason.split(": ", 1)
        assert head == code and fix and "\n" not in reason


def test_every_fix_says_what_to_do_in_one_line():
    for fix in (*CLI_STATUS_FIXES.values(), *ERROR_KIND_FIXES.values(), *CRASH_FIXES.values()):
        assert "\n" not in fix and ";" in fix  # the cause; what to do


def test_every_failure_outcome_has_a_reason():
    assert all(failure_reason(outcome, None, None) for outcome in FAILURE_OUTCOMES)
