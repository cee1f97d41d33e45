"""The ``agent-bridge`` command. Keeps the MCP SDK out of every path except ``serve`` and ``demo``.

One top-level handler (``BridgeGroup.main``) ends every failure with one line
``agent-bridge: <code>: <what to do>`` on stderr and the exit status from ``exits``.
Commands raise ``BridgeError``s; they never print errors themselves.
"""

import contextlib
import json
import math
import os
import re
import sys
import time

import click

from dispatcher.clis import registry
from dispatcher.core.errors import BridgeError
from dispatcher.core.exits import EXIT_USAGE, finish
from dispatcher.core.locations import shown
from dispatcher.core.validation import AGENT_ID_PATTERN

MAX_MESSAGE_ID = 2**63 - 1  # SQLite's largest integer
WATCH_INTERVAL_RANGE = (0.05, 3600.0)

EXIT_STATUS_HELP = """\b
Exit status (on failure, one line on stderr: `agent-bridge: <code>: <what to do>`):
  0  done
  1  the store, a file or agent-bridge itself failed (store_unavailable, store_corrupt,
     store_missing, file_unavailable, unsafe_path, internal_error, ...); doctor found an error
  2  wrong command line, setting, config.json or agent id; nothing was done
     (usage_error, invalid_setting, config_invalid, unknown_agent, config_exists, invalid_duration,
     message_not_found); send or conversation refused by a rule (unknown_recipient, ...)
  3  dispatch refused before anything was launched (already_attempted, ...)
  4  dispatch: the attempt ran and ended failed, timeout, crashed or budget_exceeded (also send --wait)
  130 interrupted
"""


class BridgeGroup(click.Group):
    """The one top-level handler (``exits.finish``): no traceback ever reaches the user."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        finish(lambda: self._run(args, prog_name or "agent-bridge", complete_var, **extra), _backend_errors)

    def _run(self, args, prog_name, complete_var, **extra) -> int:
        """The command's exit status; a wrong command line is the usage line (exit status 2)."""
        try:
            done = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.Abort:  # Ctrl-C (click turns KeyboardInterrupt into Abort)
            raise KeyboardInterrupt from None
        except click.ClickException as exc:
            return _usage_error(exc)
        return done if isinstance(done, int) else 0


def _backend_errors():
    from dispatcher.store import BACKEND_ERRORS  # (only for a failure: the store loads with it)

    return BACKEND_ERRORS


def _usage_error(exc: click.ClickException) -> int:
    ctx = getattr(exc, "ctx", None)
    helper = f" See `{ctx.command_path} --help`." if ctx is not None else ""
    text = " ".join(exc.format_message().split())
    if (
        isinstance(exc, click.exceptions.NoArgsIsHelpError) and ctx is not None
    ):  # a bare group: its help, then the one line
        click.echo(ctx.get_help())
        text, helper = "a command is missing; pick one of those listed above.", ""
    click.echo(f"agent-bridge: usage_error: {text}{helper}", err=True)
    return EXIT_USAGE


def _agent_id(ctx, param, value: str) -> str:
    if not re.fullmatch(AGENT_ID_PATTERN, value):
        raise click.BadParameter(f"{value!r} is not an agent id ({AGENT_ID_PATTERN}).")
    return value


def _optional_agent_id(ctx, param, value: str | None) -> str | None:
    """An ``--agent`` that may be left out (all agents)."""
    return None if value is None else _agent_id(ctx, param, value)


def _seconds(ctx, param, value: float) -> float:
    low, high = WATCH_INTERVAL_RANGE
    if not (math.isfinite(value) and low <= value <= high):
        raise click.BadParameter(f"{value} is not a number of seconds from {low} to {high}.")
    return value


agent_option = click.option("--agent", required=True, callback=_agent_id, help="Agent id, as declared in config.json.")


def _settings():
    from dispatcher.core.settings import BridgeSettings

    return BridgeSettings()


def _declared(settings, agent: str, *, config_required: bool = True):
    """config.json, refusing an agent it does not declare (``config_view.declared``)."""
    from dispatcher.core.config import load_config
    from dispatcher.core.config_view import declared

    return declared(settings.config_path(), agent, load_config, config_required=config_required)


def _print_json(data: object) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True))


@click.group(cls=BridgeGroup, epilog=EXIT_STATUS_HELP)
@click.version_option(package_name="agent-bridge", prog_name="agent-bridge")
def main() -> None:
    """Agent Bridge: local message bridge and headless dispatcher for AI coding agents."""


@main.command()
def serve() -> None:
    """Run the MCP stdio server for the agent named by AGENT_ID (what server.py does).

    AGENT_ID is required and must be declared in config.json; a bad setting, config or
    store ends it with one line on stderr and exit status 2, before the MCP handshake.
    """
    from dispatcher.mcp.serve import run_server

    sys.exit(run_server())


@main.group()
def listener() -> None:
    """Run, inspect and steer an agent's background listener."""


@listener.command("run")
@agent_option
def listener_run(agent: str) -> None:
    """Run the listener in the foreground (what the systemd unit runs).

    An undeclared agent is refused. With an invalid config.json it starts anyway, in
    stage `error`, and dispatches nothing until the file is fixed.
    """
    # The listener runs for as long as the machine is up, so once its arguments are checked this
    # process becomes it without click and this module (README, "The listener's footprint"); exec
    # keeps the pid, which its lock, lease and progress document record and systemd watches.
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", "dispatcher.dispatch.listener_main", agent])  # noqa: S606 - our interpreter and module; a checked agent id


@listener.command("status")
@agent_option
def listener_status(agent: str) -> None:
    """JSON: enabled, running, pid, stage, progress_state, progress, last (with late_result_ids), config_error."""
    from dispatcher.dispatch.control import listener_status as status

    settings = _settings()
    _declared(settings, agent, config_required=False)
    _print_json(status(settings, agent))


@listener.command("progress")
@agent_option
@click.option("--once", is_flag=True, hidden=True, help="Accepted for older scripts: progress always prints one line.")
def listener_progress(agent: str, once: bool) -> None:
    """One payload-free line, then exit, e.g. `[claude] idle | last msg#43 sender=kimi result=succeeded
    in 21.5s rc=0`. `listener watch` prints a line at each change."""
    from dispatcher.dispatch.control import progress_line

    settings = _settings()
    _declared(settings, agent, config_required=False)
    click.echo(progress_line(settings, agent))


@listener.command("watch")
@agent_option
@click.option("--interval", default=0.5, show_default=True, callback=_seconds, help="Seconds between checks.")
def listener_watch(agent: str, interval: float) -> None:
    """Print a new progress line at each change, until interrupted."""
    settings = _settings()
    _declared(settings, agent, config_required=False)
    _watch(settings, agent, interval)


def _watch(settings, agent: str, interval: float = 0.5) -> None:
    from dispatcher.dispatch.control import progress_line

    last = None
    try:
        while True:
            line = progress_line(settings, agent)
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
    from dispatcher.dispatch.control import pending

    settings = _settings()
    _declared(settings, agent)
    _print_json(pending(settings, agent))


@listener.command("enable")
@agent_option
def listener_enable(agent: str) -> None:
    """Remove the disabled marker and start the listener (through systemd when its unit is installed)."""
    from dispatcher.dispatch.control import enable

    settings = _settings()
    _declared(settings, agent)
    started = enable(settings, agent)
    _print_json(started)
    for warning in started["warnings"]:
        click.echo(f"agent-bridge: warning: {warning}", err=True)


@listener.command("restart")
@agent_option
@click.option(
    "--wait",
    "wait_seconds",
    default=60.0,
    show_default=True,
    type=click.FloatRange(0, 86400),
    help="Seconds to wait for the running listener (and a worker it runs) to exit.",
)
def listener_restart(agent: str, wait_seconds: float) -> None:
    """Stop the running listener and start a new one with this shell's environment (PATH, CLIs, variables)."""
    from dispatcher.dispatch.control import restart

    settings = _settings()
    _declared(settings, agent)
    started = restart(settings, agent, wait_seconds)
    _print_json(started)
    for warning in started["warnings"]:
        click.echo(f"agent-bridge: warning: {warning}", err=True)


@listener.command("disable")
@agent_option
def listener_disable(agent: str) -> None:
    """Stop taking new tasks: the listener lets its running workers finish and exits; survives reboots."""
    from dispatcher.dispatch.control import disable

    settings = _settings()
    _declared(settings, agent, config_required=False)
    _print_json(disable(settings, agent))


@listener.command("recover")
@agent_option
@click.option("--dispatch", "run_now", is_flag=True, help="Also dispatch the dispatchable backlog now, one by one.")
def listener_recover(agent: str, run_now: bool) -> None:
    """Settle stale attempts, then report (or dispatch) never-attempted messages in the dispatch set."""
    from dispatcher.dispatch.recover import recover

    settings = _settings()
    _declared(settings, agent)
    _print_json(recover(settings, agent, dispatch=run_now))


@main.command()
@click.argument("message_id", type=click.IntRange(1, MAX_MESSAGE_ID))
def dispatch(message_id: int) -> None:
    """Run one attempt at MESSAGE_ID now, in the foreground, and print its outcome as JSON.

    An explicit human action: it runs even when the agent's `auto` is off and outside
    the age window; never a second attempt (a message already attempted is refused,
    exit status 3). Exit status 4 when the attempt ran and ended failed, timeout or crashed.
    """
    from dispatcher.core.config import load_config
    from dispatcher.dispatch.recover import dispatch_one

    settings = _settings()
    load_config(settings.config_path())
    result = dispatch_one(settings, message_id)
    _print_json(result)
    outcome = result.get("outcome")
    if outcome not in ("succeeded", "blocked"):
        why = f" ({result['error_kind']})" if result.get("error_kind") else ""
        raise BridgeError(
            "attempt_failed",
            f"the attempt at message #{message_id} ended {outcome or 'without an outcome'}{why}; the sender was "
            "notified and it is never repeated. The JSON on stdout has its exit code and duration.",
        )


@main.command()
@click.argument("message_id", type=click.IntRange(1, MAX_MESSAGE_ID))
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def show(message_id: int, as_json: bool) -> None:
    """Show MESSAGE_ID: its dispatch (outcome, the CLI's status, cost, permission level, denied
    tools, attempt files), its text and its replies. Reads the store read-only."""
    from dispatcher.core.locations import Locations
    from dispatcher.ops.show import message_report, render_report

    report = message_report(Locations.from_env(), message_id)
    if as_json:
        _print_json(report)
    else:
        click.echo(render_report(report))


@main.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print the list as JSON.")
@click.pass_context
def approvals(ctx, as_json: bool) -> None:
    """The workers' requests for a tool beyond their level that wait for a person: id, agent,
    task id, tool, age (docs/approvals.md). `approvals show ID` shows one with its input."""
    if ctx.invoked_subcommand is not None:
        return
    from dispatcher.core.locations import Locations
    from dispatcher.ops.approvals import render, waiting

    listed = waiting(Locations.from_env())
    click.echo(json.dumps(listed, indent=2, sort_keys=True) if as_json else render(listed))


@approvals.command("show")
@click.argument("approval_id", type=click.IntRange(1, MAX_MESSAGE_ID))
def approvals_show(approval_id: int) -> None:
    """One request, with the tool's input as the worker's CLI gave it (kept in the store only)."""
    from dispatcher.core.locations import Locations
    from dispatcher.ops.approvals import one

    _print_json(one(Locations.from_env(), approval_id))


@main.command()
@click.argument("approval_id", type=click.IntRange(1, MAX_MESSAGE_ID))
@click.option("--for-attempt", is_flag=True, help="Allow this tool for the rest of the worker's attempt, not once.")
def approve(approval_id: int, for_attempt: bool) -> None:
    """Allow the waiting request APPROVAL_ID: once, or with --for-attempt for the rest of its
    attempt. Recorded on the attempt with who and when (`agent-bridge show TASK_ID`)."""
    from dispatcher.core.locations import Locations
    from dispatcher.ops.approvals import decide

    _print_json(decide(Locations.from_env(), approval_id, "allow_attempt" if for_attempt else "allow_once"))


@main.command()
@click.argument("message_id", type=click.IntRange(1, MAX_MESSAGE_ID))
@click.option(
    "--allow",
    "grants",
    multiple=True,
    required=True,
    help="A grant for this task alone: 'Bash(<command prefix>)' or 'Edit'. Repeat for several.",
)
def retry(message_id: int, grants: tuple[str, ...]) -> None:
    """Send the finished task MESSAGE_ID again as a new message, linked to it, with a grant for
    that new task alone (the agent's profile is unchanged; the old task keeps its verdict)."""
    from dispatcher.core.locations import Locations
    from dispatcher.ops.retry import retry as send_again

    _print_json(send_again(Locations.from_env(), message_id, list(grants)))


@main.command()
@click.argument("approval_id", type=click.IntRange(1, MAX_MESSAGE_ID))
def deny(approval_id: int) -> None:
    """Deny the waiting request APPROVAL_ID: its worker is told, and answers blocked."""
    from dispatcher.core.locations import Locations
    from dispatcher.ops.approvals import decide

    _print_json(decide(Locations.from_env(), approval_id, "deny"))


@main.command()
@click.argument("message_id", type=click.IntRange(1, MAX_MESSAGE_ID))
def diff(message_id: int) -> None:
    """Print the changes the attempt at MESSAGE_ID made in its worktree (git diff of its branch)."""
    from dispatcher.core.locations import Locations
    from dispatcher.ops.branches import diff as attempt_diff

    click.echo(attempt_diff(Locations.from_env(), message_id), nl=False)


@main.command()
@click.argument("message_id", type=click.IntRange(1, MAX_MESSAGE_ID))
def apply(message_id: int) -> None:
    """Cherry-pick the branch of the attempt at MESSAGE_ID onto your current branch, only when clean.

    Refuses a tree with uncommitted changes or an operation under way; on a conflict it aborts and
    leaves your branch, index and tree as they were (docs/worktrees.md)."""
    from dispatcher.core.locations import Locations
    from dispatcher.ops.branches import apply as attempt_apply

    for line in attempt_apply(Locations.from_env(), message_id):
        click.echo(line)


@main.command()
@click.argument("message_id", type=click.IntRange(1, MAX_MESSAGE_ID))
def discard(message_id: int) -> None:
    """Remove the worktree and the branch of the attempt at MESSAGE_ID."""
    from dispatcher.core.locations import Locations
    from dispatcher.ops.branches import discard as attempt_discard

    for line in attempt_discard(Locations.from_env(), message_id):
        click.echo(line)


@main.command()
@click.option("--agent", "agents", multiple=True, help="Only these agents (default: every declared one).")
def statusline(agents: tuple[str, ...]) -> None:
    """One line for Claude Code's statusLine setting. Always exits 0, reads the store read-only (unread counts), never writes it."""
    from dispatcher.dispatch.statusline import statusline_text

    click.echo(statusline_text(agents))


@main.group()
def systemd() -> None:
    """systemd user units for the listener."""


@systemd.command("install")
@agent_option
def systemd_install(agent: str) -> None:
    """Write agent-bridge-listener@.service and the daily prune timer into ~/.config/systemd/user.

    Prints how to enable them; nothing is started.
    """
    from pathlib import Path

    from dispatcher.core.locations import PROJECT_DIR
    from dispatcher.dispatch.systemd_unit import install_prune_timer, install_unit

    _declared(_settings(), agent)
    try:
        result = install_unit(agent, Path(sys.executable), PROJECT_DIR)
        timer = install_prune_timer(Path(sys.executable), PROJECT_DIR)
    except ValueError as exc:
        raise BridgeError("unit_refused", f"{exc}; nothing was installed.") from None
    click.echo(result.instructions())
    click.echo("\n" + timer.instructions())


@main.command()
@click.option("--keep", is_flag=True, help="Keep the demo's temporary directory.")
def demo(keep: bool) -> None:
    """A self-contained demo on a temporary store: a task, a listener dispatching a worker, a conversation."""
    from dispatcher.ops.demo import run_demo

    run_demo(keep=keep)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON.")
def doctor(as_json: bool) -> None:
    """Check the store, config.json, the CLIs, the listeners, the status line and stale items (read-only).

    One line per finding: level, code, what is wrong and the fix. Exit status 0 when
    nothing is an error (warnings allowed), 1 when something is.
    """
    from dispatcher.ops.doctor import render, report, run_checks

    findings = run_checks()
    result = report(findings)
    click.echo(json.dumps(result, indent=2) if as_json else render(findings))
    if not result["ok"]:
        sys.exit(1)


@main.command("db-role")
@click.argument("agent", callback=_agent_id)
@click.option("--role", default=None, help="The role's name (default: bridge_AGENT, dashes as underscores).")
@click.option("--revoke", is_flag=True, help="Take the role's privileges and mapping away (the role stays).")
@click.option("--json", "as_json", is_flag=True, help="Print what was done as JSON.")
def db_role(agent: str, role: str | None, revoke: bool, as_json: bool) -> None:
    """PostgreSQL only, run as the store's owner: a login role that can act only as AGENT.

    Creates the role when missing (no password: set its authentication in pg_hba.conf or
    ~/.pgpass), grants what AGENT's processes need and records the mapping; the store's row
    policies then refuse that role anything done as another agent. Prints the URL for AGENT's
    registrations and listener. Running it again changes nothing.
    """
    from dispatcher.ops.db_role import db_role as set_up
    from dispatcher.ops.db_role import render

    report = set_up(_settings().db, agent, role, revoke=revoke)
    click.echo(json.dumps(report, indent=2, sort_keys=True) if as_json else render(report))


@main.command()
@click.argument("cli_name", metavar="CLI", type=click.Choice(list(registry.NAMES)))
@agent_option
@click.option("--dry-run", is_flag=True, help="Print the unified diff of what would change; write nothing.")
@click.option("--force", is_flag=True, help="Replace an existing agent_bridge entry that points elsewhere.")
@click.option("--statusline", is_flag=True, help="Claude only: also set statusLine in Claude's settings.json.")
@click.option(
    "--hooks", is_flag=True, help="Also add the inbox-notice hooks (agent-bridge hook) to the CLI's settings."
)
def register(cli_name: str, agent: str, dry_run: bool, force: bool, statusline: bool, hooks: bool) -> None:
    """Register this installation's MCP server (as AGENT) in CLI's own config; safe to rerun.

    Edited files are backed up to <file>.bak-<timestamp> first; an entry of the same name
    that points elsewhere is refused (registration_conflict) unless --force.
    """
    from dispatcher.ops.register import register as do_register

    _declared(_settings(), agent)
    for line in do_register(cli_name, agent, dry_run=dry_run, force=force, statusline=statusline, hooks=hooks):
        click.echo(line)


@main.command()
@click.argument("cli_name", metavar="CLI", type=click.Choice(list(registry.NAMES)))
@agent_option
def unregister(cli_name: str, agent: str) -> None:
    """Take AGENT's agent_bridge MCP server, hooks (and Claude's status line) out of CLI's config.

    Edited files are backed up to <file>.bak-<timestamp> first; everything else in them is kept.
    An entry registered for another agent is refused (registration_conflict).
    """
    from dispatcher.ops.unregister import unregister as do_unregister

    for line in do_unregister(cli_name, agent):
        click.echo(line)


@main.command()
@click.option(
    "--purge",
    is_flag=True,
    help="Also delete the store and the runtime directory (attempts, logs), our worktrees and our branches "
    "(each unmerged one is listed first).",
)
def uninstall(purge: bool) -> None:
    """Stop the listeners, remove the systemd units and every CLI's registration, hooks and status line.

    Edited files are backed up first. config.json is kept. Then `uv tool uninstall agent-bridge`
    removes the program.
    """
    from dispatcher.ops.unregister import uninstall as do_uninstall

    for line in do_uninstall(_settings(), purge_store=purge):
        click.echo(line)


@main.command()
@click.option("--force", is_flag=True, help="Replace an existing config.json.")
@click.option(
    "--workspace",
    type=click.Path(file_okay=False),
    default=".",
    show_default=True,
    help="The directory workers run in, for every agent declared.",
)
@click.option(
    "--scripted",
    is_flag=True,
    help="No model: declare claude, answered by the scripted demo worker, and me (you, sending).",
)
def init(force: bool, workspace: str, scripted: bool) -> None:
    """Write $XDG_CONFIG_HOME/agent-bridge/config.json declaring the agent CLIs found on PATH
    (with --scripted: a scripted claude and you, for the quick start)."""
    from pathlib import Path

    from dispatcher.ops.init import run_init

    run_init(force=force, workspace=Path(workspace), echo=click.echo, scripted=scripted)


@main.command()
@click.option(
    "--older-than",
    "older_than",
    required=True,
    metavar="AGE",
    help="Age cutoff: a whole number and d, h, m or s (30d, 12h, 90m, 3600s).",
)
@click.option("--dry-run", is_flag=True, help="Only count what would go; change nothing.")
@click.option("--compact", is_flag=True, help="VACUUM afterwards (holds the write lock while it runs).")
def prune(older_than: str, dry_run: bool, compact: bool) -> None:
    """Remove acknowledged messages, finished attempts (and their directories) and terminal
    conversations older than AGE; print the counts as JSON.

    Never touches unacknowledged, claimed or in-flight messages, unfinished attempts,
    conversations that are not terminal, or a message a kept message replies to.
    """
    from dispatcher.ops.prune import run_prune

    _print_json(run_prune(_settings(), older_than, dry_run=dry_run, compact=compact))


@main.command()
@click.option(
    "--agent",
    default=None,
    callback=_optional_agent_id,
    help="Only this agent.",
)
@click.option("--since", default="7d", show_default=True, metavar="AGE", help="How far back: 7d, 24h, 90m, 3600s.")
@click.option("--by", "by", type=click.Choice(["agent", "day", "sender", "conversation"]), default="agent")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def costs(agent: str | None, since: str, by: str, as_json: bool) -> None:
    """What the dispatched attempts cost: attempts, failure rate, tokens and cost per group.

    A cost is the CLI's own (reported) or the agent's prices applied to its tokens (estimated,
    marked as such); attempts with neither are counted as unknown, never priced.
    """
    from dispatcher.ops.costs import costs_report, render
    from dispatcher.store.readonly import open_read_only

    settings = _settings()
    conn = open_read_only(settings.db)
    if conn is None:
        raise BridgeError(
            "store_missing", f"there is no store at {shown(settings.db)}; nothing has been dispatched there yet."
        )
    try:
        report = costs_report(conn, since, by, agent)
    finally:
        conn.close()
    if as_json:
        _print_json(report)
    else:
        click.echo(render(report))


@main.command()
@click.option(
    "--agent",
    default=None,
    callback=_optional_agent_id,
    help="Show only this agent's rows (keys: a cycles, 0 shows all).",
)
@click.option("--once", is_flag=True, help="Print one frame and exit (for scripts and tests).")
def top(agent: str | None, once: bool) -> None:
    """A live, payload-free view: listeners, attempts in flight, recent outcomes, active
    conversations and inboxes. Needs the optional `rich` extra (`agent-bridge[top]`).

    Keys: a or a number picks the agent filter (0 all), d the latest attempt's diagnostics, q quits.
    """
    from dispatcher.ops.top import run_top

    settings = _settings()
    if agent is not None:
        _declared(settings, agent, config_required=False)
    run_top(settings, agent, once=once)


_HOOK_SETTINGS = {"ignore_unknown_options": True, "allow_extra_args": True}


def _exit_now(code: int) -> None:
    """A hook's end is on its CLI's critical path (an idle wake ends when the waiting hook exits):
    once its answer is flushed and its files closed, skip the interpreter's teardown, which frees
    every module one by one (measured ~180 ms of a 200 ms wake on the loaded 2-core machine)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError):  # a reader gone: nothing more to tell it
            stream.flush()
    os._exit(code)


@main.group()
def hook() -> None:
    """Hooks for agent CLIs: tell a session, payload-free, that messages wait. Always exit 0
    (Claude's Stop: 2 to keep the turn going); any failure means no output."""


def _hook_command(cli_name: str, events: tuple[str, ...]):
    @hook.command(
        cli_name,
        context_settings=_HOOK_SETTINGS,
        help=f"The {'/'.join(events)} hook (JSON on stdin); written by `register {cli_name} --hooks`.",
    )
    @click.argument("event", required=False, default="")
    @click.option("--agent", default=None, help="Agent id (default: $AGENT_ID).")
    @click.option(
        "--wait",
        default=None,
        metavar="SECONDS",
        help="the waiting events only (claude: Stop, SessionStart): in the background, wait up to SECONDS for new mail.",
    )
    @click.pass_context
    def run(ctx, event: str, agent: str | None, wait: str | None) -> None:
        # Imported here, not at the top: a hook's start-up must stay fast (no click-time imports).
        waits = wait is not None and event == "Stop"
        if event in registry.BY_NAME[cli_name].wait_events and (waits or event != "Stop"):
            # the waiting hook (a Stop answers the Stop first; SessionStart has only the wait)
            from dispatcher.wake.hook_wait import main_wait

            _exit_now(main_wait(cli_name, agent, wait, event))
        from dispatcher.wake.hooks import main as hook_main

        _exit_now(hook_main(cli_name, event, agent))

    return run


for _cli in (c for c in registry.CLIS if c.hook_events):  # a CLI with no hook the bridge writes gets none
    _hook_command(_cli.name, _cli.hook_events)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option(
    "--agent",
    default=None,
    callback=_optional_agent_id,
    help="Only this agent (default: every declared one).",
)
def who(as_json: bool, agent: str | None) -> None:
    """Who is there: each agent's live interactive sessions (client, since, idle for), its
    listener, unread count and oldest unread age. Read-only; liveness is from the process."""
    from dispatcher.dispatch.who import render_who, who_cli

    settings = _settings()
    report = who_cli(settings, agent)
    click.echo(json.dumps(report, indent=2, sort_keys=True) if as_json else render_who(report))


@main.group(invoke_without_command=True)
@click.option(
    "--agent",
    default=None,
    callback=_optional_agent_id,
    help="List this agent's latest messages (read-only; nothing is marked read).",
)
@click.option("--unread", is_flag=True, help="Only messages not yet acknowledged.")
@click.option("--json", "as_json", is_flag=True, help="Print the list as JSON.")
@click.pass_context
def inbox(ctx, agent: str | None, unread: bool, as_json: bool) -> None:
    """An agent's inbox for a person: `inbox --agent ID [--unread]` lists its latest messages
    (id, sender, kind, read or not, the text's first line); `inbox watch` is the payload-free
    watch for Claude Code's Monitor tool (ids, senders, kinds; never text)."""
    if ctx.invoked_subcommand is not None:
        return
    if agent is None:
        raise click.UsageError("--agent is required to list an inbox (or use `inbox watch --agent ID`).", ctx)
    from dispatcher.ops.human import inbox as list_inbox
    from dispatcher.ops.human import render_inbox

    rows = list_inbox(_settings(), agent, unread=unread)
    click.echo(json.dumps(rows, indent=2, sort_keys=True) if as_json else render_inbox(agent, rows, unread=unread))


def _max_seconds(ctx, param, value: float | None) -> float | None:
    from dispatcher.wake.inbox_watch import MAX_SECONDS_RANGE

    low, high = MAX_SECONDS_RANGE
    if value is not None and not (math.isfinite(value) and low <= value <= high):
        raise click.BadParameter(f"{value} is not a number of seconds from {low:g} to {high:g}.")
    return value


@inbox.command("watch")
@agent_option
@click.option(
    "--max-seconds",
    type=float,
    default=None,
    callback=_max_seconds,
    metavar="SECONDS",
    help="End by itself after this long with a line saying how to re-arm it "
    "(Claude Code's Monitor stops a watch after 30 minutes: use 1740).",
)
def inbox_watch(agent: str, max_seconds: float | None) -> None:
    """Print one line per batch of new messages for AGENT, flushed at once, e.g.
    `2 new for claude: #41 from kimi (task), #42 from codex (notice) — call receive_messages`.

    On start it first prints what is already unread (nothing when the inbox is empty). For
    Claude Code's Monitor tool; the store stays the truth, so a watch that is killed or expires
    loses nothing. Ends with status 0 on SIGTERM or Ctrl-C. Reads the store read-only.
    """
    from dispatcher.wake.inbox_watch import run_watch

    run_watch(agent, max_seconds)


@main.command()
@click.option("--from", "sender", required=True, callback=_agent_id, help="The sending agent, declared in config.json.")
@click.option("--to", "recipient", required=True, help="The recipient agent (or * with --notice: every other agent).")
@click.option(
    "--task", "task", metavar="TEXT", default=None, help="Send a task (wakes the recipient's listener); - reads stdin."
)
@click.option("--note", "note", metavar="TEXT", default=None, help="Send a plain note (wakes nobody); - reads stdin.")
@click.option(
    "--notice", "notice", metavar="TEXT", default=None, help="Send a notice (informs, never wakes); - reads stdin."
)
@click.option("--dedup-key", default=None, help="Makes a retry safe: a repeat returns the first id (duplicate).")
@click.option("--wait", is_flag=True, help="With --task: wait until it settles, print the outcome and the reply.")
@click.option(
    "--timeout",
    type=click.FloatRange(1, 86400),
    default=900,
    show_default=True,
    metavar="SECONDS",
    help="With --wait: give up waiting after this long (the task stays queued).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the sent message's JSON (and with --wait the report).")
def send(sender, recipient, task, note, notice, dedup_key, wait, timeout, as_json) -> None:
    """Send a message as agent --from, through the same rules as the send_message tool.

    Exactly one of --task, --note or --notice, each with TEXT or - for standard input.
    Anyone who can run this command as this user can send as any agent of this config.json:
    that is the local trust model. With --wait (tasks only) it exits 4 when the attempt ended
    failed, timeout, crashed or budget_exceeded.
    """
    from dispatcher.ops.human import failed_outcome, read_text, render_settled, wait_settled
    from dispatcher.ops.human import send as do_send

    given = {"task": task, "note": note, "notice": notice}
    chosen = [(kind, text) for kind, text in given.items() if text is not None]
    if len(chosen) != 1:
        raise click.UsageError("give exactly one of --task TEXT, --note TEXT or --notice TEXT (TEXT may be -).")
    kind, text = chosen[0]
    if wait and kind != "task":
        raise click.UsageError("--wait needs --task: only a task settles with an outcome.")
    settings = _settings()
    sent = do_send(
        settings,
        sender=sender,
        recipient=recipient,
        text=read_text(text, settings.max_body_bytes),
        kind=None if kind == "note" else kind,
        dedup_key=dedup_key,
    )
    if as_json:
        _print_json(sent)
    else:
        again = " (a repeat of this dedup key: nothing new was sent)" if sent.get("duplicate") else ""
        ident = f"#{sent['id']}" if "id" in sent else f"broadcast #{sent['broadcast_id']}"
        click.echo(f"sent {kind} {ident} from {sender} to {recipient}{again}")
    if not wait:
        return
    report = wait_settled(settings, sent["id"], timeout)
    click.echo(json.dumps(report, indent=2, sort_keys=True) if as_json else render_settled(report))
    outcome = failed_outcome(report)
    if outcome is not None:
        attempt = report["dispatch"]
        why = f" ({attempt['error_kind']})" if attempt["error_kind"] else ""
        raise BridgeError(
            "attempt_failed",
            f"task #{sent['id']} ended {outcome}{why}; it is never repeated. "
            f"`agent-bridge show {sent['id']}` has the CLI's status and the attempt's files.",
        )


def _loopback(ctx, param, value: str) -> str:
    from dispatcher.core.metric_rules import non_loopback

    why = non_loopback(value)
    if why is not None:
        raise click.BadParameter(f"{why}.")
    return value


@main.group()
def metrics() -> None:
    """Prometheus metrics of the store (docs/metrics.md); needs the `metrics` extra."""


@metrics.command("serve")
@click.option("--port", type=click.IntRange(0, 65535), required=True, help="The TCP port (0: any free one).")
@click.option(
    "--bind",
    default="127.0.0.1",
    show_default=True,
    callback=_loopback,
    help="A loopback address (127.0.0.1 or ::1): other addresses are refused.",
)
def metrics_serve(port: int, bind: str) -> None:
    """Serve the whole store's figures on http://BIND:PORT/metrics until stopped.

    Every agent and every host's attempts, computed from the store at each scrape (read-only).
    Scrape this or the listeners' textfiles for one store, not both.
    """
    try:
        from dispatcher.ops.metrics_serve import metrics_server, serve
    except ImportError:
        from dispatcher.core.errors import missing_extra

        raise missing_extra("`agent-bridge metrics serve`", "prometheus-client") from None
    try:
        server = metrics_server(_settings(), bind, port)
    except OSError as exc:
        raise BridgeError(
            "metrics_bind_failed", f"cannot listen on {bind}:{port}: {exc.strerror}; pick another --port."
        ) from None
    serve(server, bind, lambda line: click.echo(line, err=True))


@main.group()
def conversation() -> None:
    """Bounded conversations from the command line: start, status, cancel."""


@conversation.command("start")
@click.option("--from", "initiator", required=True, callback=_agent_id, help="The initiating agent (declared).")
@click.option("--to", "recipient", required=True, help="The agent that takes the turns.")
@click.option("--goal", required=True, metavar="TEXT", help="The goal, posted as the root task; - reads stdin.")
@click.option("--max-turns", type=int, default=6, show_default=True, help="Turn budget (2..20).")
@click.option("--expires-in", type=int, default=14400, show_default=True, metavar="SECONDS", help="60..86400.")
@click.option("--max-cost-usd", type=float, default=None, help="Stop dispatching once its attempts cost this much.")
@click.option("--dedup-key", default=None, help="Makes a retry safe: a repeat returns the first conversation.")
def conversation_start(initiator, recipient, goal, max_turns, expires_in, max_cost_usd, dedup_key) -> None:
    """Start a conversation as --from (the start_conversation tool's rules); prints its JSON."""
    from dispatcher.ops.human import read_text, start_conversation

    settings = _settings()
    _print_json(
        start_conversation(
            settings,
            initiator=initiator,
            recipient=recipient,
            goal=read_text(goal, settings.max_body_bytes),
            max_turns=max_turns,
            expires_in_seconds=expires_in,
            max_cost_usd=max_cost_usd,
            dedup_key=dedup_key,
        )
    )


def _conversation_command(action: str, summary: str) -> None:
    @conversation.command(action, help=summary)
    @click.argument("conversation_id", type=click.IntRange(1, MAX_MESSAGE_ID))
    @agent_option
    def run(conversation_id: int, agent: str) -> None:
        from dispatcher.ops.human import conversation_action

        _print_json(conversation_action(_settings(), agent=agent, action=action, conversation_id=conversation_id))


_conversation_command(
    "status", "A conversation's state, turns, expiry and recent transitions (JSON), as --agent sees it."
)
_conversation_command("cancel", "Cancel a conversation (from active, blocked or needs_human), as participant --agent.")
