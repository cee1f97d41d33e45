"""Doctor's checks of each agent's CLI: found and of the tested version, able to authenticate
(never a model request), and able to enforce the agent's permission level."""

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from dispatcher.clis import registry
from dispatcher.core.findings import Finding, finding
from dispatcher.dispatch.environment import AUTH_VARIABLES
from dispatcher.ops import init
from dispatcher.ops.doctor.context import CLIS, Context, agent_clis

if TYPE_CHECKING:
    from dispatcher.core.permissions import PermissionProfile


def check_clis(ctx: Context) -> list[Finding]:
    return [_cli_finding(agent, cli) for agent, cli in agent_clis(ctx) if cli is not None]


def _cli_finding(agent: str, cli: str) -> Finding:
    spec = CLIS[cli]
    wanted = os.environ.get(spec.binary_env) or spec.default_binary
    binary = shutil.which(wanted)
    if binary is None:
        return finding(
            "cli_not_found",
            f"the {cli} CLI ({wanted!r}) is not found: every task for {agent} would fail with rc=127",
            agent,
            cli=cli,
            binary_env=spec.binary_env,
        )
    found = init.probe(spec, binary)
    if found.problem is not None:
        return finding(
            "cli_version_unknown",
            f"{binary} found but does not run ({found.problem})",
            agent,
            variant="runs_on" if spec.runs_on else "does_not_run",
            runs_on=spec.runs_on,
            binary=binary,
        )
    if found.version is None:
        return finding(
            "cli_version_unknown",
            f"{binary} --version printed no version line of {cli}",
            agent,
            variant="no_version",
            binary=binary,
            cli=cli,
        )
    if not found.tested:
        return finding(
            "cli_version_untested",
            f"{cli} {found.version} ({binary}); the launcher was tested with {spec.tested_version}",
            agent,
            cli=cli,
            tested_version=spec.tested_version,
        )
    return finding("cli_ok", f"{cli} {found.version} ({binary}), the tested version", agent)


# --- can each agent's CLI authenticate? (never a model request) ------------------------------


def auth_files(cli: str, environ: dict[str, str]) -> list[Path]:
    """The credentials files ``cli`` reads (any one of them present will do)."""
    return registry.BY_NAME[cli].login.files(environ)


def auth_finding(agent: str, cli: str, variable: str | None, status_ok: bool | None, file: Path | None) -> Finding:
    """The one decision: credentials by variable, by the CLI's own status command, or by file."""
    if variable is not None:
        return finding("cli_auth_ok", f"{cli} has credentials ({variable} is set)", agent)
    if status_ok:
        command = " ".join((cli, *registry.BY_NAME[cli].login.status_command))
        return finding("cli_auth_ok", f"{cli} is logged in (`{command}`)", agent)
    if file is not None:
        return finding("cli_auth_ok", f"{cli} has credentials ({file})", agent)
    return finding(
        "cli_not_authenticated",
        f"{cli} has no credentials doctor can see: every task for {agent} would end auth_error",
        agent,
        fix=registry.BY_NAME[cli].login.fix,
    )


def _auth_status_ok(cli: str) -> bool | None:
    """The CLI's own status command: True (exit 0), False, or None (none, or it did not answer)."""
    login = registry.BY_NAME[cli].login
    binary = shutil.which(registry.BY_NAME[cli].discovery.binary())
    if not login.status_command or binary is None:
        return None
    try:
        done = subprocess.run(  # noqa: S603 - the agent's CLI (PATH or its *_BIN), its local status command only
            [binary, *login.status_command],
            capture_output=True,
            timeout=init.VERSION_TIMEOUT_SECONDS * 2,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.returncode == 0


def check_auth(ctx: Context) -> list[Finding]:
    """Per declared CLI found on PATH: can it authenticate? Never sends a model request."""
    found, environ = [], dict(os.environ)
    for agent, cli in agent_clis(ctx):
        if cli is None or shutil.which(registry.BY_NAME[cli].discovery.binary(environ)) is None:
            continue  # no CLI to ask: check_clis reports it
        variable = next((v for v in AUTH_VARIABLES[cli] if environ.get(v)), None)
        status_ok = _auth_status_ok(cli) if variable is None else None
        file = next((f for f in auth_files(cli, environ) if f.exists()), None)
        found.append(auth_finding(agent, cli, variable, status_ok, file))
    return found


# --- what each agent's workers may do, and whether its CLI can enforce it --------------------


def check_permissions(ctx: Context) -> list[Finding]:
    config = ctx.valid_config()
    return [
        permission_finding(agent, cli, config.permissions(agent), shutil.which)
        for agent, cli in agent_clis(ctx)
        if cli is not None
    ]


def permission_finding(
    agent: str, cli: str, profile: "PermissionProfile", which: Callable[[str], str | None]
) -> Finding:
    """What an agent's workers may do, and whether its CLI can enforce that here (pure but for ``which``).

    Error: the launcher would refuse every task (exit 78, ``permissions_unenforceable``).
    Warning: it runs, but what the level promises is not fully confined (see docs/permissions.md)."""
    from dispatcher.core.permissions import DESCRIPTIONS

    level = profile.level
    found = registry.BY_NAME[cli].enforcement(profile, which)
    if found is not None and found.kind == "needs":
        needs = found.needs
        return finding(
            "permissions_unenforceable",
            f"{agent}'s level {level} needs {cli}'s sandbox, but "
            f"{' and '.join(needs)} {'is' if len(needs) == 1 else 'are'} not on PATH: every task would end "
            "failed (permissions_unenforceable)",
            agent,
            variant="sandbox",
        )
    if found is not None and found.kind == "refused":
        return finding(
            "permissions_unenforceable",
            f"{agent}'s level {level} cannot be enforced by {registry.BY_NAME[cli].discovery.display} "
            f"({found.why}): every task would end failed (permissions_unenforceable)",
            agent,
            variant="level",
            fix=found.fix,
        )
    if found is not None and found.kind == "unconfined":
        return finding(
            "permissions_unconfined",
            f"{agent}'s workers may run commands that nothing confines to "
            f"the workspace ({cli} at level {level} has no OS sandbox)",
            agent,
        )
    return finding("permissions_ok", f"{agent}'s workers may {DESCRIPTIONS[level]} (level {level})", agent)
