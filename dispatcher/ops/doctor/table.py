"""Doctor's table of checks, in the order they run: one row per check, each a function that
answers one question and is named by the finding code it reports.

A row is made by ``@check(needs, group)`` (``check.py``) on the function; the code's level(s) and
fix text are declared once in ``dispatcher.core.findings.CODES``, which the status line and
``top`` read too, and the reference table in docs/troubleshooting.md is generated from this one.

How to add a check:

1. Declare its code in ``CODES`` (``dispatcher/core/findings.py``): ``Code(name, levels, fix)``.
   ``levels``: the levels it can have (with several, each finding says which:
   ``finding(..., level=WARN)``); ``fix``: a one-line ``str.format`` template
   (``"chmod 700 {directory}"``), or a dict of named templates when the fix depends on the case
   (``finding(..., variant="open")`` picks one); an ``ok``-only code has no fix. Only for a code a
   person must see while working, add ``STATUS_SURFACES`` and its ``short`` words, and show it in
   the status line (``dispatch/statusline.py``, cheap checks only: no process, no pydantic) and in
   ``top`` (``ops/top.py``); ``tests/ops/test_budget_views.py`` checks that the three agree.
2. Write the check in the module of its area under ``dispatcher/ops/doctor/``: a function named
   by the code, ``def x(ctx: Context) -> list[Finding]``, decorated ``@check(needs, group)``,
   reporting only ``finding("x", message, ...)``. What several checks ask (a CLI's version, a
   listener's status) is read once per run through ``ctx.fact``.
3. Add it to ``CHECKS`` below, where it should run (after the checks that give it what it
   ``needs``, next to the other outcomes of its ``group``).
4. Give it a passing and a failing case in ``tests/ops/test_doctor_checks.py`` (or the area's test).
"""

# Each module by its own name, not through the package (whose __init__ imports the runner, which imports this).
import dispatcher.ops.doctor.clis as clis
import dispatcher.ops.doctor.config as config
import dispatcher.ops.doctor.listeners as listeners
import dispatcher.ops.doctor.pointers as pointers
import dispatcher.ops.doctor.spend as spend
import dispatcher.ops.doctor.stale as stale
import dispatcher.ops.doctor.statusline as statusline
import dispatcher.ops.doctor.store as store
import dispatcher.ops.doctor.units as units
import dispatcher.ops.doctor.worktrees as worktrees
from dispatcher.ops.doctor.check import ALWAYS, CONFIG, STORE, Check

__all__ = ["ALWAYS", "CHECKS", "CONFIG", "RUNNER_CODES", "STORE", "Check"]

# The codes the runner itself reports, with the question each answers.
RUNNER_CODES = {
    "invalid_setting": "Is an AGENT_BRIDGE_* setting one doctor cannot read (a relative path, a bad URL)?",
    "check_failed": "Did a check fail unexpectedly, or report another code than its own?",
}

CHECKS: tuple[Check, ...] = (
    # the store (opened read-only once, by the first that asks) and the runtime directory
    store.disk_low,
    store.store_dir_mode,
    store.store_missing,
    store.store_not_file,
    store.store_owner,
    store.store_mode,
    store.store_unreadable,
    store.store_busy,
    store.store_corrupt,
    store.schema_too_new,
    store.schema_old,
    store.store_ok,
    store.runtime_dir_mode,
    store.runtime_dir_owner,
    # config.json (read once), the launchers and the workspaces
    config.config_writable_by_others,
    config.config_invalid,
    config.config_ok,
    config.launcher_ok,
    config.launcher_missing,
    config.launcher_not_executable,
    config.launcher_writable_by_others,
    config.launcher_variable_unset,
    config.workspace_unsafe,
    config.workspace_ok,
    config.workspace_missing,
    # the git worktree each attempt of an editing agent runs in
    worktrees.isolation_refused,
    worktrees.isolation_ok,
    # each agent's CLI, its credentials and its permissions
    clis.cli_not_found,
    clis.cli_version_unknown,
    clis.cli_version_untested,
    clis.cli_ok,
    clis.cli_auth_ok,
    clis.cli_not_authenticated,
    clis.permissions_unenforceable,
    clis.permissions_unconfined,
    clis.permissions_ok,
    # each agent's listener and systemd unit
    listeners.auto_off,
    listeners.listener_disabled,
    listeners.listener_ok,
    listeners.listener_not_running,
    listeners.listener_error,
    listeners.last_attempt_failed,
    listeners.listener_cli_missing,
    units.unit_no_manager,
    units.unit_not_installed,
    units.unit_unknown,
    units.unit_not_enabled,
    units.unit_not_active,
    units.unit_ok,
    # spend
    spend.cost_known,
    spend.cost_unknown,
    spend.budget_reached,
    # what our registrations, hooks, status line and units name as the store
    pointers.registrations_ok,
    pointers.registration_elsewhere,
    # the status line and the settings of each CLI that has one
    statusline.statusline_failed,
    statusline.statusline_slow,
    statusline.statusline_ok,
    statusline.statusline_configured,
    statusline.statusline_not_configured,
    statusline.statusline_settings_unreadable,
    # what is stuck
    stale.stale_attempt,
    stale.conversation_needs_human,
    stale.conversation_blocked,
    stale.unread,
    stale.unread_old,
    stale.nothing_stuck,
    worktrees.orphan_worktree,
    worktrees.orphan_branch,
)
