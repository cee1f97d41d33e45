"""Doctor's checks of the status line: it answers, within its CPU budget, and each CLI that has one runs it."""

import statistics
import subprocess
import sys
from dataclasses import dataclass

from dispatcher.clis.base import AgentCli, StatuslineSetting
from dispatcher.core import clock
from dispatcher.core.findings import Finding, finding
from dispatcher.ops.doctor.check import check
from dispatcher.ops.doctor.context import Context, one_line

STATUSLINE_BUDGET_SECONDS = 0.2
STATUSLINE_RUNS = 5  # statusline_slow judges the median: one sample on a busy machine says little
STATUSLINE_TIMEOUT_SECONDS = 5.0


@dataclass(frozen=True)
class StatuslineRun:
    done: subprocess.CompletedProcess | None  # None: no answer within the timeout
    seconds: float  # wall-clock, what the CLI waits
    cpu_seconds: float  # user + system: what the status line itself costs, whatever else runs


def _time_statusline() -> StatuslineRun:
    """One run of the status line: its answer, how long it took and the CPU it used."""
    from dispatcher.core.locations import PROJECT_DIR
    from dispatcher.core.processes import children_cpu_seconds

    command = [sys.executable, "-c", "from dispatcher.dispatch.statusline import main; main()"]
    began, cpu_before = clock.monotonic(), children_cpu_seconds()
    try:
        done = subprocess.run(  # noqa: S603 - our own interpreter and status line, fixed arguments
            command,
            capture_output=True,
            text=True,
            timeout=STATUSLINE_TIMEOUT_SECONDS,
            cwd=PROJECT_DIR,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return StatuslineRun(None, STATUSLINE_TIMEOUT_SECONDS, children_cpu_seconds() - cpu_before)
    return StatuslineRun(done, clock.monotonic() - began, children_cpu_seconds() - cpu_before)


def _runs(ctx: Context) -> list[StatuslineRun]:
    """The status line's timed runs, once per doctor run."""
    return ctx.fact("statusline", lambda: [_time_statusline() for _ in range(STATUSLINE_RUNS)])


def _timed_out(runs: list[StatuslineRun]) -> bool:
    return sum(run.done is not None for run in runs) < STATUSLINE_RUNS / 2


def _bad_answer(runs: list[StatuslineRun]) -> subprocess.CompletedProcess | None:
    """The first run that answered badly (an error, nothing, or "unavailable"), None when they all answered well."""
    for done in (run.done for run in runs if run.done is not None):
        line = done.stdout.strip()
        if done.returncode != 0 or not line or "unavailable" in line:
            return done
    return None


def _medians(ctx: Context) -> tuple[float, float] | None:
    """The median wall-clock and CPU seconds of the runs, when enough answered, and well."""
    runs = _runs(ctx)
    if _timed_out(runs) or _bad_answer(runs) is not None:
        return None
    return statistics.median(run.seconds for run in runs), statistics.median(run.cpu_seconds for run in runs)


@check()
def statusline_failed(ctx: Context) -> list[Finding]:
    """Does the status line not answer within its timeout, or answer an error?"""
    runs = _runs(ctx)
    if _timed_out(runs):
        answered = sum(run.done is not None for run in runs)
        said = (
            f"the status line did not answer within {STATUSLINE_TIMEOUT_SECONDS:g} s "
            f"in {STATUSLINE_RUNS - answered} of {STATUSLINE_RUNS} runs"
        )
        return [finding("statusline_failed", said, variant="timeout")]
    if (done := _bad_answer(runs)) is None:
        return []
    said = f"the status line answered {one_line(done.stdout.strip())[:120]!r} (exit {done.returncode})"
    return [finding("statusline_failed", said, variant="answer")]


def _took(seconds: float, cpu_seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms ({cpu_seconds * 1000:.0f} ms CPU), the median of {STATUSLINE_RUNS} runs"


@check()
def statusline_slow(ctx: Context) -> list[Finding]:
    """Is the status line's own CPU time over its budget? (A wall-clock time over budget with little
    CPU is the machine's other work: said by statusline_ok, not warned of.)"""
    if (medians := _medians(ctx)) is None or medians[1] <= STATUSLINE_BUDGET_SECONDS:
        return []
    said = f"the status line took {_took(*medians)}: over its budget of {STATUSLINE_BUDGET_SECONDS * 1000:.0f} ms CPU"
    return [finding("statusline_slow", said)]


@check()
def statusline_ok(ctx: Context) -> list[Finding]:
    """Does the status line answer within its CPU budget?"""
    if (medians := _medians(ctx)) is None or medians[1] > STATUSLINE_BUDGET_SECONDS:
        return []
    busy = " (the machine is busy: most of it was waiting for a CPU)" if medians[0] > STATUSLINE_BUDGET_SECONDS else ""
    return [finding("statusline_ok", f"the status line answers in {_took(*medians)}{busy}")]


# --- does each CLI with a status line run the bridge's? ---------------------------------------


def _setting(ctx: Context, cli: AgentCli) -> StatuslineSetting:
    """What ``cli``'s settings say about its status line, read once per doctor run."""
    return ctx.fact(("statusline_setting", cli.name), cli.statusline_setting)


def _statusline_clis() -> list[AgentCli]:
    """The CLIs that have a status line (``AgentCli.statusline``), in the registry's order."""
    from dispatcher.clis.registry import CLIS

    return [cli for cli in CLIS if cli.statusline]


def _shown(cli: AgentCli) -> str:
    return cli.discovery.display or cli.name


@check()
def statusline_configured(ctx: Context) -> list[Finding]:
    """Does each CLI's settings file run the bridge's status line?"""
    from dispatcher.clis.config_files import is_our_statusline
    from dispatcher.core.locations import redacted

    found = []
    for cli in _statusline_clis():
        setting = _setting(ctx, cli)
        if is_our_statusline(setting.command):
            said = f"{setting.path} runs {one_line(redacted(str(setting.command)))[-100:]!r}"
            found.append(finding("statusline_configured", said))
    return found


@check()
def statusline_not_configured(ctx: Context) -> list[Finding]:
    """Does a CLI's settings file not exist, or run another status line (or none)?"""
    from dispatcher.clis.config_files import is_our_statusline

    agents = sorted(ctx.config.agents) if ctx.config is not None else []
    found = []
    for cli in _statusline_clis():
        setting = _setting(ctx, cli)
        if setting.unreadable is not None or is_our_statusline(setting.command):
            continue
        agent = cli.name if cli.name in agents or not agents else agents[0]
        if not setting.exists:
            said = f"{setting.path} does not exist: {_shown(cli)} shows no bridge status line"
        else:
            said = f"{setting.path} does not run the bridge's status line"
        found.append(finding("statusline_not_configured", said, cli=cli.name, cli_agent=agent))
    return found


@check()
def statusline_settings_unreadable(ctx: Context) -> list[Finding]:
    """Can a CLI's settings file that holds its status line not be read (nor by that CLI)?"""
    found = []
    for cli in _statusline_clis():
        setting = _setting(ctx, cli)
        if setting.unreadable is not None:
            said = f"cannot read {setting.path} ({setting.unreadable})"
            found.append(finding("statusline_settings_unreadable", said, path=setting.path, cli=_shown(cli)))
    return found
