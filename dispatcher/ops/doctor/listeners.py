"""Doctor's checks of each agent's listener: its state as ``listener status`` reads it (once per
agent per run), each check asking one question of it."""

from pathlib import Path

from dispatcher.core.findings import Finding, finding
from dispatcher.ops.doctor.check import CONFIG, check
from dispatcher.ops.doctor.context import CLIS, Context, cli_of, listener_state, one_line

ERROR_STAGES = ("error", "unknown", "legacy")


def _auto(ctx: Context) -> list[tuple[str, dict]]:
    """Each agent whose tasks are dispatched (``auto``), with its listener's state."""
    config = ctx.valid_config()
    return [(agent, listener_state(ctx, agent)) for agent in sorted(config.agents) if config.agents[agent].auto]


def _here(ctx: Context) -> list[tuple[str, dict]]:
    """The auto agents whose listener is enabled and is not running on another host."""
    return [(agent, status) for agent, status in _auto(ctx) if status["enabled"] and not status["elsewhere"]]


def auto_off_finding(agent: str, running: bool, config: Path | None) -> Finding:
    """An agent whose ``auto`` is false: its tasks wait for a person, whether a listener runs or not."""
    return finding(
        "auto_off",
        f"tasks for {agent} wait for a human: auto is off (its listener {'runs' if running else 'is not running'})",
        agent,
        where=f" in {config}" if config else " in config.json",
    )


@check(CONFIG, "listener")
def auto_off(ctx: Context) -> list[Finding]:
    """Whose tasks wait for a person because auto is off?"""
    config = ctx.valid_config()
    return [
        auto_off_finding(agent, listener_state(ctx, agent)["running"], ctx.locations.config)
        for agent in sorted(config.agents)
        if not config.agents[agent].auto
    ]


@check(CONFIG, "listener")
def listener_disabled(ctx: Context) -> list[Finding]:
    """Is an auto agent's listener disabled?"""
    return [
        finding("listener_disabled", f"the listener of {agent} is disabled", agent)
        for agent, status in _auto(ctx)
        if not status["enabled"]
    ]


@check(CONFIG, "listener")
def listener_ok(ctx: Context) -> list[Finding]:
    """Which auto agents' listeners run, here in a good stage or on another host?"""
    found = []
    for agent, status in _auto(ctx):
        if status["enabled"] and (away := status["elsewhere"]):
            said = (
                f"the listener of {agent} runs on host {away['host']} (pid {away['pid']}, renewed "
                f"{away['renewed_seconds_ago']:.0f}s ago)"
            )
            found.append(finding("listener_ok", said, agent))
    for agent, status in _here(ctx):
        if status["running"] and status["stage"] not in ERROR_STAGES:
            said = f"the listener of {agent} runs (pid {status['pid']}, stage {status['stage']})"
            found.append(finding("listener_ok", said, agent))
    return found


@check(CONFIG, "listener")
def listener_not_running(ctx: Context) -> list[Finding]:
    """Is an enabled listener of an auto agent not running anywhere?"""
    return [
        finding("listener_not_running", f"the listener of {agent} is not running: its tasks wait", agent)
        for agent, status in _here(ctx)
        if not status["running"]
    ]


@check(CONFIG, "listener")
def listener_error(ctx: Context) -> list[Finding]:
    """Is a running listener in a stage that dispatches nothing (error, unknown, legacy)?"""
    found = []
    for agent, status in _here(ctx):
        if status["running"] and status["stage"] in ERROR_STAGES:
            why = status["config_error"] or (status["progress"] or {}).get("error") or status["progress_state"]
            said = f"the listener of {agent} (pid {status['pid']}) is in stage {status['stage']}: {one_line(why)[:160]}"
            found.append(finding("listener_error", said, agent))
    return found


@check(CONFIG, "listener")
def last_attempt_failed(ctx: Context) -> list[Finding]:
    """Did an agent's last attempt end other than succeeded or blocked?"""
    found = []
    for agent in sorted(ctx.valid_config().agents):
        last = listener_state(ctx, agent)["last"]
        if isinstance(last, dict) and last.get("result") not in (None, "succeeded", "blocked"):
            kind = f" ({last['error_kind']})" if last.get("error_kind") else ""
            said = f"the last attempt of {agent} (message #{last.get('message_id')}) ended {last.get('result')}{kind}"
            found.append(finding("last_attempt_failed", said, agent))
    return found


@check(CONFIG)
def listener_cli_missing(ctx: Context) -> list[Finding]:
    """Does a running listener not find its agent's CLI on its own PATH? One started before the CLI
    was installed keeps the old PATH, and its workers fail cli_not_found while this shell finds the CLI."""
    import os
    import shutil

    config, found = ctx.valid_config(), []
    for agent in sorted(config.agents):
        cli = cli_of(config, agent)
        if cli is None or not config.agents[agent].auto:
            continue
        status = listener_state(ctx, agent, check_config=False)
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
