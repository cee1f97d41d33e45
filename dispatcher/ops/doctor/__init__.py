"""``agent-bridge doctor``: what is wrong and how to fix it, read-only.

A table of checks (``table.CHECKS``): one function per check, each answering one question and
named by the finding code it reports (``store_mode``, ``cli_not_found``, ``listener_not_running``),
in the module of its area (``store``, ``config``, ``clis``, ``listeners``, ``units``,
``statusline``, ``stale``, ``spend``, ``pointers``, ``worktrees``). Every finding has that stable
``code``, a ``level`` (ok / warn / error), a one-line ``message`` and a one-line ``fix``; each
code, its levels and its fix are declared once, in ``dispatcher.core.findings``, which the status
line and ``top`` read too. Doctor never creates or changes anything: the store is opened
``mode=ro`` (never ``open_store``), a missing store or runtime directory is reported, not
created, and the listener's state is read from /proc/locks and its progress document.
"""

from dispatcher.core.findings import ERROR, OK, WARN, Finding
from dispatcher.ops.doctor.context import Context
from dispatcher.ops.doctor.runner import render, report, run_checks
from dispatcher.ops.doctor.statusline import StatuslineRun

__all__ = ["ERROR", "OK", "WARN", "Context", "Finding", "StatuslineRun", "render", "report", "run_checks"]
