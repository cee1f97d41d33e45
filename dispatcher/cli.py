"""The ``agent-bridge`` command. Keeps the MCP SDK out of every path except ``serve`` and ``demo``."""

import json
import sys
import time

import click

from .validation import AGENT_ID_PATTERN

agent_option = click.option("--agent", required=True, help="Agent id, as declared in config.json.")


def _settings():
    from .settings import BridgeSettings

    return BridgeSettings()


def _print_json(data: object) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True))


def _check_agent(agent: str) -> str:
    import re

    if not re.fullmatch(AGENT_ID_PATTERN, agent):
        raise click.BadParameter(f"{agent!r} is not an agent id ({AGENT_ID_PATTERN}).", param_hint="--agent")
    return agent


@click.group()
def main() -> None:
    """Agent Bridge: local message bridge and headless dispatcher for AI coding agents."""


@main.command()
def serve() -> None:
    """Run the MCP stdio server for AGENT_ID (what server.py does)."""
    from .serve import run_server

    sys.exit(run_server())


@main.group()
def listener() -> None:
    """Run, inspect and steer an agent's background listener."""


@listener.command("run")
@agent_option
def listener_run(agent: str) -> None:
    """Run the listener in the foreground (what the systemd unit runs)."""
    from .dispatch.listener import run_listener

    sys.exit(run_listener(_settings(), _check_agent(agent)))


@listener.command("status")
@agent_option
def listener_status(agent: str) -> None:
    """JSON: enabled, running, pid, stage, progress_state, progress, last, config_error."""
    from .dispatch.control import listener_status as status

    _print_json(status(_settings(), _check_agent(agent)))


@listener.command("progress")
@agent_option
@click.option("--once", is_flag=True, help="Print the current line and exit (otherwise: watch).")
def listener_progress(agent: str, once: bool) -> None:
    """One payload-free line, e.g. `[claude] idle | last msg#43 sender=kimi result=succeeded in 21.5s rc=0`."""
    from .dispatch.control import progress_line

    if once:
        click.echo(progress_line(_settings(), _check_agent(agent)))
    else:
        _watch(agent)


@listener.command("watch")
@agent_option
@click.option("--interval", default=0.5, show_default=True, help="Seconds between checks.")
def listener_watch(agent: str, interval: float) -> None:
    """Print a new progress line at each change, until interrupted."""
    _watch(agent, interval)


def _watch(agent: str, interval: float = 0.5) -> None:
    from .dispatch.control import progress_line

    settings, last = _settings(), None
    try:
        while True:
            line = progress_line(settings, _check_agent(agent))
            if line != last:
                click.echo(line)
                last = line
            time.sleep(interval)
    except KeyboardInterrupt:
        pass


@listener.command("pending")
@agent_option
def listener_pending(agent: str) -> None:
    """Read-only backlog: never-attempted messages that could wake a worker (dispatchable vs stale)."""
    from .dispatch.control import pending

    _print_json(pending(_settings(), _check_agent(agent)))


@listener.command("enable")
@agent_option
def listener_enable(agent: str) -> None:
    """Remove the disabled marker and start the listener (through systemd when its unit is installed)."""
    from .dispatch.control import enable

    _print_json(enable(_settings(), _check_agent(agent)))


@listener.command("disable")
@agent_option
def listener_disable(agent: str) -> None:
    """Stop taking new tasks: the listener lets the current worker finish and exits; survives reboots."""
    from .dispatch.control import disable

    _print_json(disable(_settings(), _check_agent(agent)))


@listener.command("recover")
@agent_option
@click.option("--dispatch", "run_now", is_flag=True, help="Also dispatch the dispatchable backlog now, one by one.")
def listener_recover(agent: str, run_now: bool) -> None:
    """Settle stale attempts, then report (or dispatch) never-attempted messages in the dispatch set."""
    from .dispatch.recover import recover

    _print_json(recover(_settings(), _check_agent(agent), dispatch=run_now))


@main.command()
@click.argument("message_id", type=int)
def dispatch(message_id: int) -> None:
    """Run one attempt at MESSAGE_ID now, in the foreground (also outside the age window)."""
    from .dispatch.recover import dispatch_one

    result = dispatch_one(_settings(), message_id)
    _print_json(result)
    sys.exit(0 if result.get("outcome") in ("succeeded", "blocked") else 1)


@main.command()
@click.option("--agent", "agents", multiple=True, help="Only these agents (default: every declared one).")
def statusline(agents: tuple[str, ...]) -> None:
    """One line for Claude Code's statusLine setting. Always exits 0, never touches the store."""
    from .dispatch.statusline import statusline_text

    click.echo(statusline_text(agents))


@main.group()
def systemd() -> None:
    """systemd user units for the listener."""


@systemd.command("install")
@agent_option
def systemd_install(agent: str) -> None:
    """Write agent-bridge-listener@.service into ~/.config/systemd/user and print how to enable it."""
    from pathlib import Path

    from .dispatch.systemd_unit import install_unit
    from .locations import PROJECT_DIR

    try:
        result = install_unit(_check_agent(agent), Path(sys.executable), PROJECT_DIR)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(result.instructions())


@main.command()
@click.option("--keep", is_flag=True, help="Keep the demo's temporary directory.")
def demo(keep: bool) -> None:
    """A self-contained demo on a temporary store: a task, a listener dispatching a worker, a conversation."""
    from .demo import run_demo

    sys.exit(run_demo(keep=keep))
