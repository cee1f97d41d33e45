"""Running doctor's table of checks, and its report: JSON (``report``) or lines (``render``)."""

from dataclasses import asdict

from dispatcher.core.findings import ERROR, OK, WARN, Finding, finding
from dispatcher.ops.doctor.check import CONFIG, STORE, Check
from dispatcher.ops.doctor.context import Context, one_line
from dispatcher.ops.doctor.table import CHECKS


def run_checks(checks: tuple[Check, ...] = CHECKS) -> list[Finding]:
    from dispatcher.core.locations import InvalidSetting, Locations

    try:
        locations = Locations.from_env()
    except InvalidSetting as exc:
        return [finding("invalid_setting", one_line(exc.message), variable=exc.variable)]
    ctx = Context(locations)
    shown: list[Finding] = []
    group: list[Finding] = []  # the findings of the current group, shown agent by agent
    failures: list[Exception] = []  # the exceptions reported (kept: one fact that fails is one check_failed)
    try:
        for index, check in enumerate(checks):
            if _ready(check, ctx):
                found = _safe(check, ctx, failures)
                ctx.found += found
                group += found
            following = checks[index + 1] if index + 1 < len(checks) else None
            if not check.group or following is None or following.group != check.group:
                shown += sorted(group, key=lambda f: f.agent or "")
                group = []
    finally:
        if ctx.conn is not None:
            ctx.conn.close()
    return shown


def _ready(check: Check, ctx: Context) -> bool:
    """Whether what ``check`` needs is there: a valid config.json, a readable store of the current schema."""
    from dispatcher.ops.doctor.config import read_config
    from dispatcher.ops.doctor.store import read_store

    try:
        if check.needs == CONFIG:
            return ctx.config is not None or read_config(ctx)[0] == "config_ok"
        if check.needs == STORE:
            read_store(ctx)
            return ctx.conn is not None and ctx.schema_current
    except Exception:  # noqa: BLE001 - the check that read it first reported check_failed
        return False
    return True


def _safe(check: Check, ctx: Context, failures: list[Exception]) -> list[Finding]:
    """A check that fails unexpectedly, or reports another code than its own, is one finding, not
    the end of the report (the checks that fail by the same exception, of a fact they share: one)."""
    try:
        found = check(ctx)
    except Exception as exc:  # noqa: BLE001 - a check that fails unexpectedly is one finding, not the end of the report
        if any(exc is failed for failed in failures):
            return []
        failures.append(exc)
        return [finding("check_failed", f"the {check.name} check failed ({type(exc).__name__}: {one_line(exc)[:160]})")]
    if stray := sorted({f.code for f in found} - {check.name}):
        return [finding("check_failed", f"the {check.name} check reported {', '.join(stray)}, not its own code")]
    return found


def shown_while_working(ctx: Context, group: str) -> dict[str, list[str]]:
    """Per agent, the codes the rows of one ``group`` of the table report that a person must see
    while working (``surfaces`` beyond doctor): how ``top`` shows what keeps a launcher from running."""
    from dispatcher.core.findings import STATUSLINE

    shown: dict[str, list[str]] = {}
    for check in CHECKS:
        if check.group == group and STATUSLINE in check.code.surfaces and _ready(check, ctx):
            for f in _safe(check, ctx, []):
                if f.agent is not None and f.code == check.name:
                    shown.setdefault(f.agent, []).append(f.code)
    return shown


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
