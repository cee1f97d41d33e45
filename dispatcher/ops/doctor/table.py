"""Doctor's table of checks, in the order they run: each check function, the codes it reports
(declared with their levels and fixes in ``dispatcher.core.findings.CODES``), and what it needs.

How to add a check (one ``Code`` entry per code it reports + one function + one row here):

1. Declare each code it reports in ``CODES`` (``dispatcher/core/findings.py``):
   ``Code(name, levels, fix)``. ``levels``: the levels it can have (with several, each finding
   says which: ``finding(..., level=WARN)``); ``fix``: a one-line ``str.format`` template
   (``"chmod 700 {directory}"``), or a dict of named templates when the fix depends on the case
   (``finding(..., variant="open")`` picks one); an ``ok``-only code has no fix. Only for a code a
   person must see while working, add ``STATUS_SURFACES`` and its ``short`` words, and show it in
   the status line (``dispatch/statusline.py``, cheap checks only: no process, no pydantic) and in
   ``top`` (``ops/top.py``); ``tests/ops/test_budget_views.py`` checks that the three agree.
2. Write the check as one function ``check_x(ctx: Context) -> list[Finding]`` in the module of its
   area under ``dispatcher/ops/doctor/``, building each finding with ``finding(code, message, ...)``.
3. Add a row ``Check(check_x, emits=(...codes...), needs=...)`` to ``CHECKS`` in
   this module, where it should run (after the checks that give it what it ``needs``).
4. Add the code to the legend in ``docs/troubleshooting.md`` (``tests/test_docs.py`` compares it
   with this table) and a test that makes doctor report it.
"""

from collections.abc import Callable
from dataclasses import dataclass

from dispatcher.core.findings import Finding
from dispatcher.ops.doctor.clis import check_auth, check_clis, check_permissions
from dispatcher.ops.doctor.config import check_config, check_launcher_variables, check_launchers, check_workspaces
from dispatcher.ops.doctor.context import Context
from dispatcher.ops.doctor.listeners import check_listener_clis, check_listeners, check_units
from dispatcher.ops.doctor.pointers import check_store_pointers
from dispatcher.ops.doctor.spend import check_spend
from dispatcher.ops.doctor.stale import check_stale
from dispatcher.ops.doctor.statusline import check_statusline
from dispatcher.ops.doctor.store import check_runtime, check_store
from dispatcher.ops.doctor.worktrees import check_isolation, check_worktrees

ALWAYS, CONFIG, STORE = "always", "config", "store"


@dataclass(frozen=True)
class Check:
    run: Callable[[Context], list[Finding]]
    emits: tuple[str, ...]  # every code it can report
    needs: str = ALWAYS  # CONFIG: a valid config.json; STORE: a readable store of the current schema


# The codes the runner itself reports: a setting it cannot read, a check that failed unexpectedly.
RUNNER_CODES = ("invalid_setting", "check_failed")

CHECKS = (
    Check(
        check_store,
        (
            "store_ok",
            "store_dir_mode",
            "store_missing",
            "store_not_file",
            "store_owner",
            "store_mode",
            "store_unreadable",
            "store_busy",
            "store_corrupt",
            "schema_too_new",
            "schema_old",
            "disk_low",
        ),
    ),
    Check(check_runtime, ("runtime_dir_mode", "runtime_dir_owner")),
    Check(check_config, ("config_ok", "config_writable_by_others", "config_invalid")),
    Check(
        check_launchers,
        ("launcher_ok", "launcher_missing", "launcher_not_executable", "launcher_writable_by_others"),
        CONFIG,
    ),
    Check(check_launcher_variables, ("launcher_variable_unset",), CONFIG),
    Check(check_workspaces, ("workspace_ok", "workspace_missing", "workspace_unsafe"), CONFIG),
    Check(check_isolation, ("isolation_ok", "isolation_refused"), CONFIG),
    Check(check_clis, ("cli_ok", "cli_not_found", "cli_version_unknown", "cli_version_untested"), CONFIG),
    Check(check_auth, ("cli_auth_ok", "cli_not_authenticated"), CONFIG),
    Check(check_permissions, ("permissions_ok", "permissions_unenforceable", "permissions_unconfined"), CONFIG),
    Check(
        check_listeners,
        (
            "listener_ok",
            "auto_off",
            "listener_disabled",
            "listener_not_running",
            "listener_error",
            "last_attempt_failed",
        ),
        CONFIG,
    ),
    Check(check_listener_clis, ("listener_cli_missing",), CONFIG),
    Check(
        check_units,
        ("unit_ok", "unit_no_manager", "unit_not_installed", "unit_unknown", "unit_not_enabled", "unit_not_active"),
        CONFIG,
    ),
    Check(check_spend, ("cost_known", "cost_unknown", "budget_reached"), CONFIG),
    Check(check_store_pointers, ("registrations_ok", "registration_elsewhere"), CONFIG),
    Check(
        check_statusline,
        (
            "statusline_ok",
            "statusline_slow",
            "statusline_failed",
            "statusline_configured",
            "statusline_not_configured",
            "claude_settings_unreadable",
        ),
    ),
    Check(
        check_stale,
        ("nothing_stuck", "stale_attempt", "conversation_needs_human", "conversation_blocked", "unread", "unread_old"),
        STORE,
    ),
    Check(check_worktrees, ("orphan_worktree", "orphan_branch"), STORE),
)
