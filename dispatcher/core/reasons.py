"""Why a dispatch failed, in one payload-free line: ``<code>: <what to do>``.

Every place a person or agent looks first after a failed dispatch (``listener status``,
``listener progress``, the status line, ``top``, ``show``, the sender's notice) shows the
same line, made here from the attempt's enums only (outcome, error_kind, the CLI's own
status), never from model output. The cause is the most specific of them: the CLI's own
status when it names one, else a timeout or crash (a lost host's by its kind), else the
bridge's error kind.
"""

from dispatcher.core.lifecycle import FAILURE_OUTCOMES

SHOW_HINT = "`agent-bridge show ID` has the attempt's files"

# The CLI's own status, when it names the cause.
CLI_STATUS_FIXES = {
    "auth_error": "the agent's CLI is not logged in or its API key was refused; log in with the CLI as the "
    "listener's user (Claude: `claude`, then /login) or give the listener its API key, and check with "
    "`agent-bridge doctor`",
    "api_error": "the model API failed after the CLI's own retries (network, quota, outage); check the "
    "provider, then send the task again",
    "retryable": "the CLI said a later try may work (a rate limit, a dropped connection); send the task again later",
    "max_turns": "the CLI stopped at its turn cap; raise the agent's max_turns or split the task",
    "budget_exceeded": "the CLI stopped at max_cost_usd_per_task; raise it or split the task",
    "config_error": "the CLI refused its configuration; run `agent-bridge doctor`",
    "input_error": "the CLI refused its input or arguments; run `agent-bridge doctor`",
    "untrusted_workspace": "the CLI does not trust the agent's workspace; trust it in the CLI once, interactively",
}

# The bridge's own error kinds, when the CLI named nothing.
ERROR_KIND_FIXES = {
    "cli_not_found": "the agent's CLI is not installed or not on the listener's PATH; install it or set its "
    "*_BIN variable, and check with `agent-bridge doctor`",
    "launcher_usage": "the launcher was invoked wrongly; check the agent's launcher in config.json",
    "permissions_unenforceable": "its CLI cannot enforce the agent's permission level on this machine; pick "
    "another level (README: Worker permissions)",
    "workspace_unsafe": "the agent's workspace holds or lies in the bridge's own files (its config, store, "
    "runtime, a launcher, its code) or is the home directory, so nothing was started; set the agent's workspace "
    "in config.json to a project directory (`agent-bridge doctor` names the file)",
    "spawn_unrecorded": "the worker was not started because its start could not be recorded (store busy or "
    "full); send the task again",
    "no_evidence": "the worker ended without answering or acknowledging the task; " + SHOW_HINT,
}

# A crash whose cause the bridge knows better than "its supervisor died".
CRASH_FIXES = {
    "host_lost": "the host that ran the worker stopped renewing its attempt (the machine, or its supervisor, "
    "died); check that host's listener, then send the task again",
}

OUTCOME_FIXES = {
    "timeout": "the worker overran worker_timeout_seconds and was killed; raise it or split the task",
    "crashed": "the supervisor died while the worker ran; see the listener's dispatcher.log",
    "budget_exceeded": CLI_STATUS_FIXES["budget_exceeded"],
}


def failure_reason(outcome: str | None, error_kind: str | None, cli_status: str | None) -> str | None:
    """``<code>: <what to do>`` for a failed attempt; None for any other outcome."""
    if outcome not in FAILURE_OUTCOMES:
        return None
    if cli_status in CLI_STATUS_FIXES:
        return f"{cli_status}: {CLI_STATUS_FIXES[cli_status]}"
    if outcome == "crashed" and error_kind in CRASH_FIXES:
        return f"{error_kind}: {CRASH_FIXES[error_kind]}"
    if outcome in OUTCOME_FIXES:
        return f"{outcome}: {OUTCOME_FIXES[outcome]}"
    if error_kind in ERROR_KIND_FIXES:
        return f"{error_kind}: {ERROR_KIND_FIXES[error_kind]}"
    return f"{error_kind or outcome}: {SHOW_HINT}"


def reason_code(outcome: str | None, error_kind: str | None, cli_status: str | None) -> str | None:
    """The short form (the status line's): the code of ``failure_reason``."""
    reason = failure_reason(outcome, error_kind, cli_status)
    return None if reason is None else reason.split(": ", 1)[0]
