"""Doctor's checks of each auto agent's systemd user unit (an agent with auto off needs no
listener: auto_off says it). ``systemctl --user`` is asked once per unit per run."""

import subprocess
from functools import partial

from dispatcher.core.findings import Finding, finding
from dispatcher.ops.doctor.check import CONFIG, check
from dispatcher.ops.doctor.context import Context, one_line


def _units(ctx: Context) -> tuple[bool, bool, list[tuple[str, str]]]:
    """Whether a user manager runs, whether our units are installed, and each auto agent with its unit's name."""
    from dispatcher.dispatch.systemd_unit import unit_installed, unit_name, user_manager_available

    config = ctx.valid_config()
    manager, installed = ctx.fact("systemd", lambda: (user_manager_available(), unit_installed()))
    return manager, installed, [(a, unit_name(a)) for a in sorted(config.agents) if config.agents[a].auto]


def _asked(ctx: Context) -> list[tuple[str, str, str | None, str | None, str]]:
    """For each auto agent whose unit is installed under a user manager: its unit, systemctl's
    is-enabled and (when enabled) is-active answers, and why one gave none."""
    manager, installed, units = _units(ctx)
    if not (manager and installed):
        return []

    def ask(unit: str) -> tuple[str | None, str | None, str]:
        enabled, why = _systemctl("is-enabled", unit)
        active, why_active = _systemctl("is-active", unit) if enabled == "enabled" else (None, "")
        return enabled, active, why or why_active

    return [(agent, unit, *ctx.fact(("unit", unit), partial(ask, unit))) for agent, unit in units]


def no_manager_finding(agent: str, unit: str, enabled: bool) -> Finding:
    """No systemd user manager: what to run instead of the units (never a `systemctl` command)."""
    state = f"{unit} is enabled, but" if enabled else "no unit for it, and"
    return finding(
        "unit_no_manager",
        f"{state} no systemd user manager runs here: start {agent}'s listener with "
        f"`agent-bridge listener enable --agent {agent}` (detached; again after a reboot)",
        agent,
    )


@check(CONFIG, "unit")
def unit_no_manager(ctx: Context) -> list[Finding]:
    """Is there no systemd user manager to run the units?"""
    from dispatcher.dispatch.systemd_unit import unit_dir

    manager, installed, units = _units(ctx)
    if manager:
        return []
    return [
        no_manager_finding(agent, unit, installed and (unit_dir() / "default.target.wants" / unit).exists())
        for agent, unit in units
    ]


@check(CONFIG, "unit")
def unit_not_installed(ctx: Context) -> list[Finding]:
    """Is there no unit for an auto agent, so its listener does not start at login?"""
    manager, installed, units = _units(ctx)
    if not manager or installed:
        return []
    said = "no systemd user unit for {agent}: its listener does not start at login"
    return [finding("unit_not_installed", said.format(agent=agent), agent) for agent, _ in units]


@check(CONFIG, "unit")
def unit_unknown(ctx: Context) -> list[Finding]:
    """Could `systemctl --user` not say whether a unit is enabled or active?"""
    return [
        finding(
            "unit_unknown",
            f"`systemctl --user` could not say whether {unit} is {'enabled' if enabled is None else 'active'}: {why}",
            agent,
        )
        for agent, unit, enabled, active, why in _asked(ctx)
        if enabled is None or (enabled == "enabled" and active is None)
    ]


@check(CONFIG, "unit")
def unit_not_enabled(ctx: Context) -> list[Finding]:
    """Is an installed unit not enabled?"""
    return [
        finding("unit_not_enabled", f"{unit} is {enabled}", agent, unit=unit)
        for agent, unit, enabled, _, _ in _asked(ctx)
        if enabled is not None and enabled != "enabled"
    ]


@check(CONFIG, "unit")
def unit_not_active(ctx: Context) -> list[Finding]:
    """Is an enabled unit not active?"""
    return [
        finding("unit_not_active", f"{unit} is enabled but {active}", agent, unit=unit)
        for agent, unit, enabled, active, _ in _asked(ctx)
        if enabled == "enabled" and active is not None and active != "active"
    ]


@check(CONFIG, "unit")
def unit_ok(ctx: Context) -> list[Finding]:
    """Which units are enabled and active?"""
    return [
        finding("unit_ok", f"{unit} is enabled and active", agent)
        for agent, unit, enabled, active, _ in _asked(ctx)
        if enabled == "enabled" and active == "active"
    ]


def _systemctl(verb: str, unit: str) -> tuple[str | None, str]:
    """systemctl's one-word answer (``enabled``, ``inactive``, ...), or None with the reason it
    gave none (its first stderr line: e.g. "Failed to connect to bus: No medium found")."""
    try:
        done = subprocess.run(  # noqa: S603 - a fixed argv
            ["systemctl", "--user", verb, unit],  # noqa: S607 - systemctl from PATH, as the user runs it
            capture_output=True,
            text=True,
            timeout=5,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError:
        return None, "systemctl is not on PATH"
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"systemctl failed ({type(exc).__name__})"
    answer = done.stdout.strip().split("\n")[0].strip()
    if answer:
        return answer, ""
    reason = next((line.strip() for line in done.stderr.splitlines() if line.strip()), "")
    return None, one_line(reason)[:160] or f"no answer (exit {done.returncode})"
