"""Doctor's checks of the status line: it answers, within its CPU budget, and Claude Code runs it."""

import json
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from dispatcher.core import clock
from dispatcher.core.findings import Finding, finding
from dispatcher.ops.doctor.context import Context, one_line

STATUSLINE_BUDGET_SECONDS = 0.2
STATUSLINE_RUNS = 5  # statusline_slow judges the median: one sample on a busy machine says little
STATUSLINE_TIMEOUT_SECONDS = 5.0


@dataclass(frozen=True)
class StatuslineRun:
    done: subprocess.CompletedProcess | None  # None: no answer within the timeout
    seconds: float  # wall-clock, what Claude Code waits
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


def statusline_speed(seconds: float, cpu_seconds: float) -> Finding:
    """From the medians of the runs: slow only when the status line's own CPU is over budget. A
    wall-clock time over budget with little CPU is the machine's other work (said, not warned of)."""
    took = f"{seconds * 1000:.0f} ms ({cpu_seconds * 1000:.0f} ms CPU), the median of {STATUSLINE_RUNS} runs"
    if cpu_seconds > STATUSLINE_BUDGET_SECONDS:
        return finding(
            "statusline_slow",
            f"the status line took {took}: over its budget of {STATUSLINE_BUDGET_SECONDS * 1000:.0f} ms CPU",
        )
    busy = " (the machine is busy: most of it was waiting for a CPU)" if seconds > STATUSLINE_BUDGET_SECONDS else ""
    return finding("statusline_ok", f"the status line answers in {took}{busy}")


def check_statusline(ctx: Context) -> list[Finding]:
    runs = [_time_statusline() for _ in range(STATUSLINE_RUNS)]
    answered = [run.done for run in runs if run.done is not None]
    if len(answered) < STATUSLINE_RUNS / 2:
        return [
            finding(
                "statusline_failed",
                f"the status line did not answer within {STATUSLINE_TIMEOUT_SECONDS:g} s "
                f"in {STATUSLINE_RUNS - len(answered)} of {STATUSLINE_RUNS} runs",
                variant="timeout",
            )
        ]
    done = next((run for run in answered if run.returncode != 0 or not run.stdout.strip()), answered[-1])
    line = done.stdout.strip()
    found = []
    if done.returncode != 0 or not line or "unavailable" in line:
        found.append(
            finding(
                "statusline_failed",
                f"the status line answered {one_line(line)[:120]!r} (exit {done.returncode})",
                variant="answer",
            )
        )
    else:
        found.append(
            statusline_speed(
                statistics.median(run.seconds for run in runs), statistics.median(run.cpu_seconds for run in runs)
            )
        )
    found.append(_claude_settings(ctx))
    return found


def _claude_settings(ctx: Context) -> Finding:
    base = os.environ.get("CLAUDE_CONFIG_DIR")
    path = (Path(base) if base else Path.home() / ".claude") / "settings.json"
    agents = sorted(ctx.config.agents) if ctx.config is not None else []
    agent = "claude" if "claude" in agents or not agents else agents[0]
    try:
        settings = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return finding(
            "statusline_not_configured",
            f"{path} does not exist: Claude Code shows no bridge status line",
            claude_agent=agent,
        )
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return finding("claude_settings_unreadable", f"cannot read {path} ({type(exc).__name__})", path=path)
    line = settings.get("statusLine") if isinstance(settings, dict) else None
    command = line.get("command") if isinstance(line, dict) else None
    from dispatcher.clis.config_files import is_our_statusline

    if not is_our_statusline(command):
        return finding("statusline_not_configured", f"{path} does not run the bridge's status line", claude_agent=agent)
    from dispatcher.core.locations import redacted

    return finding("statusline_configured", f"{path} runs {one_line(redacted(str(command)))[-100:]!r}")
