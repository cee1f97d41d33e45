"""Running doctor's table of checks, and its report: JSON (``report``) or lines (``render``)."""

from collections.abc import Callable
from dataclasses import asdict

from dispatcher.core.findings import ERROR, OK, WARN, Finding, finding
from dispatcher.ops.doctor.context import Context, one_line
from dispatcher.ops.doctor.table import CHECKS, CONFIG, STORE, Check


def run_checks() -> list[Finding]:
    from dispatcher.core.locations import InvalidSetting, Locations

    try:
        locations = Locations.from_env()
    except InvalidSetting as exc:
        return [finding("invalid_setting", one_line(exc.message), variable=exc.variable)]
    ctx = Context(locations)
    findings: list[Finding] = []
    try:
        for check in CHECKS:
            if _ready(check, ctx):
                findings += _safe(check.run, ctx)
    finally:
        if ctx.conn is not None:
            ctx.conn.close()
    return findings


def _ready(check: Check, ctx: Context) -> bool:
    """Whether what ``check`` needs is there, from the checks before it in the table."""
    if check.needs == CONFIG:
        return ctx.config is not None
    if check.needs == STORE:
        return ctx.conn is not None and ctx.schema_current
    return True


def _safe(check: Callable[[Context], list[Finding]], ctx: Context) -> list[Finding]:
    """A check that fails unexpectedly is one finding, not the end of the report."""
    try:
        return check(ctx)
    except Exception as exc:  # noqa: BLE001 - a check that fails unexpectedly is one finding, not the end of the report
        return [
            finding(
                "check_failed",
                f"the {check.__name__.removeprefix('check_')} check failed ({type(exc).__name__}: {one_line(exc)[:160]})",
            )
        ]


def report(findings: list[Finding]) -> dict:
    errors = sum(f.level == ERROR for f in findings)
    warnings = sum(f.level == WARN for f in findings)
    return {"ok": errors == 0, "errors": errors, "warnings": warnings, "findings": [asdict(f) for f in findings]}


def render(findings: list[Finding]) -> str:
    lines = []
    for f in findings:
        who = f"[{f.agent}] " if f.agent else ""
        fix = f" — fix: {f.fix}" if f.fix and f.level != OK else ""
        lines.append(f"{f.level.upper():5} {f.code}: {who}{f.message}{fix}")
    errors = sum(f.level == ERROR for f in findings)
    warnings = sum(f.level == WARN for f in findings)
    lines.append(f"{errors} error(s), {warnings} warning(s)")
    return "\n".join(lines)
