"""``agent-bridge doctor``: what is wrong and how to fix it, read-only.

A table of checks (``table.CHECKS``), each a function of one area (``store``, ``config``,
``clis``, ``listeners``, ``statusline``, ``stale``, ``spend``) returning findings. Every finding
has a stable ``code``, a ``level`` (ok / warn / error), a one-line ``message`` and a one-line
``fix``; each code, its levels and its fix are declared once, in ``dispatcher.core.findings``,
which the status line and ``top`` read too. Doctor never creates or changes anything: the store
is opened ``mode=ro`` (never ``open_store``), a missing store or runtime directory is reported,
not created, and the listener's state is read from /proc/locks and its progress document.
"""

from dispatcher.core.findings import ERROR, OK, WARN, Finding
from dispatcher.ops.doctor.clis import auth_finding, permission_finding
from dispatcher.ops.doctor.context import Context
from dispatcher.ops.doctor.listeners import check_listeners
from dispatcher.ops.doctor.runner import render, report, run_checks
from dispatcher.ops.doctor.statusline import StatuslineRun, statusline_speed

__all__ = [
    "ERROR",
    "OK",
    "WARN",
    "Context",
    "Finding",
    "StatuslineRun",
    "auth_finding",
    "check_listeners",
    "permission_finding",
    "render",
    "report",
    "run_checks",
    "statusline_speed",
]
