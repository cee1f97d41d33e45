"""Doctor's checks of each agent's listener and its systemd user unit."""

import subprocess
from pathlib import Path

from dispatcher.core.findings import Finding, finding
from dispatcher.ops.doctor.context import CLIS, Context, cli_of, one_line


def check_listeners(ctx: Context) -> list[Finding]:
    from dispatcher.dispatch.control import listener_status

    found = []
    config = ctx.valid_config()
    for agent in sorted(config.agents):
        status = listener_status(ctx.locations, agent, late_results=False, totals=False)
        if not config.agents[agent].auto:
            found.append(auto_off_finding(agent, status["running"], ctx.locations.config))
        elif not status["enabled"]:
            found.append(finding("listener_disabled", f"the listener of {agent} is disabled", agent))
        elif status["elsewhere"]:
            away = status["elsewhere"]
            found.append(
                finding(
                    "listener_ok",
                    f"the listener of {agent} runs on host {away['host']} (pid {away['pid']}, renewed "
                    f"{away['renewed_seconds_ago']:.0f}s ago)",
                    agent,
                )
            )
        elif not status["running"]:
            found.append(
                finding("listener_not_running", f"the listener of {agent} is not running: its tasks wait", agent)
            )
        elif status["stage"] in ("error", "unknown", "legacy"):
            why = status["config_error"] or (status["progress"] or {}).get("error") or status["progress_state"]
            found.append(
                finding(
                    "listener_error",
                    f"the listener of {agent} (pid {status['pid']}) is in stage "
                    f"{status['stage']}: {one_line(why)[:160]}",
                    agent,
                )
            )
        else:
            found.append(
                finding(
                    "listener_ok", f"the listener of {agent} runs (pid {status['pid']}, stage {status['stage']})", agent
                )
            )
        last = status["last"]
        if isinstance(last, dict) and last.get("result") not in (None, "succeeded", "blocked"):
            kind = f" ({last['error_kind']})" if last.get("error_kind") else ""
            found.append(
                finding(
                    "last_attempt_failed",
                    f"the last attempt of {agent} (message #{last.get('message_id')}) ended {last.get('result')}{kind}",
                    agent,
                )
            )
    return found


def auto_off_finding(agent: str, running: bool, config: Path | None) -> Finding:
    """An agent whose ``auto`` is false: its tasks wait for a person, whether a listener runs or not."""
    return finding(
        "auto_off",
        f"tasks for {agent} wait for a human: auto is off (its listener {'runs' if running else 'is not running'})",
        agent,
        where=f" in {config}" if config else " in config.json",
    )


def no_manager_finding(agent: str, unit: str, enabled: bool) -> Finding:
    """No systemd user manager: what to run instead of the units (never a `systemctl` command)."""
    state = f"{unit} is enabled, but" if enabled else "no unit for it, and"
    return finding(
        "unit_no_manager",
        f"{state} no systemd user manager runs here: start {agent}'s listener with "
        f"`agent-bridge listener enable --agent {agent}` (detached; again after a reboot)",
        agent,
    )


def check_units(ctx: Context) -> list[Finding]:
    from dispatcher.dispatch.systemd_unit import unit_dir, unit_installed, unit_name, user_manager_available

    found = []
    installed, manager = unit_installed(), user_manager_available()
    config = ctx.valid_config()
    for agent in sorted(config.agents):
        unit = unit_name(agent)
        if not config.agents[agent].auto:
            continue  # auto_off says it: no listener is needed
        if not manager:
            linked = installed and (unit_dir() / "default.target.wants" / unit).exists()
            found.append(no_manager_finding(agent, unit, linked))
            continue
        if not installed:
            found.append(
                finding(
                    "unit_not_installed",
                    f"no systemd user unit for {agent}: its listener does not start at login",
                    agent,
                )
            )
            continue
        enabled, why = _systemctl("is-enabled", unit)
        active, why_active = _systemctl("is-active", unit) if enabled == "enabled" else (None, "")
        if enabled is None or (enabled == "enabled" and active is None):
            found.append(
                finding(
                    "unit_unknown",
                    f"`systemctl --user` could not say whether {unit} is "
                    f"{'enabled' if enabled is None else 'active'}: {why or why_active}",
                    agent,
                )
            )
        elif enabled != "enabled":
            found.append(finding("unit_not_enabled", f"{unit} is {enabled}", agent, unit=unit))
        elif active != "active":
            found.append(finding("unit_not_active", f"{unit} is enabled but {active}", agent, unit=unit))
        else:
            found.append(finding("unit_ok", f"{unit} is enabled and active", agent))
    return found


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


def check_listener_clis(ctx: Context) -> list[Finding]:
    """A running listener finds its agent's CLI on its own PATH: one started before the CLI was
    installed keeps the old PATH, and its workers fail cli_not_found while this shell finds the CLI."""
    import os
    import shutil

    from dispatcher.core.locations import PROJECT_DIR
    from dispatcher.dispatch.control import listener_status

    config, found = ctx.valid_config(), []
    for agent in sorted(config.agents):
        cli = cli_of(config.launcher_path(agent, PROJECT_DIR))
        if cli is None or not config.agents[agent].auto:
            continue
        status = listener_status(ctx.locations, agent, check_config=False, late_results=False, totals=False)
        if isinstance(status["clis"], list) and cli not in status["clis"]:
            here = shutil.which(os.environ.get(CLIS[cli].binary_env) or CLIS[cli].default_binary)
            found.append(
                finding(
                    "listener_cli_missing",
                    f"the listener of {agent} (pid {status['pid']}) does not find {cli} on its PATH"
                    + (f" (this shell finds {here}): it started before {cli} was there" if here else "")
                    + "; every task fails cli_not_found",
                    agent,
                    cli=cli,
                )
            )
    return found
