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
from dispatcher.ops import init
from dispatcher.ops.doctor.check import CONFIG, check
from dispatcher.ops.doctor.context import CLIS, Context, agent_clis

if TYPE_CHECKING:
    from dispatcher.core.permissions import PermissionProfile


def _probe(ctx: Context, cli: str) -> tuple[str, str | None, "init.Found | None"]:
    """The CLI as this shell finds it, once per run: the name wanted, its path (None: not found), and its version."""

    def read() -> tuple[str, str | None, init.Found | None]:
        spec = CLIS[cli]
        wanted = os.environ.get(spec.binary_env) or spec.default_binary
        binary = shutil.which(wanted)
        return wanted, binary, None if binary is None else init.probe(spec, binary)

    return ctx.fact(("cli", cli), read)


def _found_clis(ctx: Context) -> list[tuple[str, str, str, "init.Found"]]:
    """Each agent whose CLI doctor knows and finds: agent, cli, its path, what its --version said."""
    found = []
    for agent, cli in agent_clis(ctx):
        if cli is not None:
            _, binary, probed = _probe(ctx, cli)
            if binary is not None and probed is not None:
                found.append((agent, cli, binary, probed))
    return found


@check(CONFIG, "cli")
def cli_not_found(ctx: Context) -> list[Finding]:
    """Is an agent's CLI not on PATH (nor where its *_BIN variable says)?"""
    found = []
    for agent, cli in agent_clis(ctx):
        if cli is not None and (wanted := _probe(ctx, cli))[1] is None:
            said = f"the {cli} CLI ({wanted[0]!r}) is not found: every task for {agent} would fail with rc=127"
            found.append(finding("cli_not_found", said, agent, cli=cli, binary_env=CLIS[cli].binary_env))
    return found


@check(CONFIG, "cli")
def cli_version_unknown(ctx: Context) -> list[Finding]:
    """Does a found CLI fail to run, or print no version line of its CLI?"""
    found = []
    for agent, cli, binary, probed in _found_clis(ctx):
        spec = CLIS[cli]
        if probed.problem is not None:
            variant = "runs_on" if spec.runs_on else "does_not_run"
            said = f"{binary} found but does not run ({probed.problem})"
            found.append(
                finding("cli_version_unknown", said, agent, variant=variant, runs_on=spec.runs_on, binary=binary)
            )
        elif probed.version is None:
            said = f"{binary} --version printed no version line of {cli}"
            found.append(finding("cli_version_unknown", said, agent, variant="no_version", binary=binary, cli=cli))
    return found


@check(CONFIG, "cli")
def cli_version_untested(ctx: Context) -> list[Finding]:
    """Is a found CLI of another version than the launchers were tested with?"""
    return [
        finding(
            "cli_version_untested",
            f"{cli} {probed.version} ({binary}); the launcher was tested with {CLIS[cli].tested_version}",
            agent,
            cli=cli,
            tested_version=CLIS[cli].tested_version,
        )
        for agent, cli, binary, probed in _found_clis(ctx)
        if probed.problem is None and probed.version is not None and not probed.tested
    ]


@check(CONFIG, "cli")
def cli_ok(ctx: Context) -> list[Finding]:
    """Which agents' CLIs are found and of the tested version?"""
    return [
        finding("cli_ok", f"{cli} {probed.version} ({binary}), the tested version", agent)
        for agent, cli, binary, probed in _found_clis(ctx)
        if probed.problem is None and probed.version is not None and probed.tested
    ]


# --- can each agent's CLI authenticate? (never a model request) ------------------------------


def auth_files(cli: str, environ: dict[str, str]) -> list[Path]:
    """The credentials files ``cli`` reads (any one of them present will do): its module's ``login``."""
    return registry.BY_NAME[cli].login.files(environ)


def credentials(cli: str, variable: str | None, status_ok: bool | None, file: Path | None) -> str | None:
    """The one decision, in words (None: none doctor can see): by variable, by the CLI's own status command, or by file."""
    if variable is not None:
        return f"{cli} has credentials ({variable} is set)"
    if status_ok:
        return f"{cli} is logged in (`{' '.join((cli, *registry.BY_NAME[cli].login.status_command))}`)"
    if file is not None:
        return f"{cli} has credentials ({file})"
    return None


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


def _auth(ctx: Context) -> list[tuple[str, str, str | None]]:
    """Per agent whose CLI is on PATH (else cli_not_found says it): its credentials in words, or None."""

    def read() -> list[tuple[str, str, str | None]]:
        answers, environ = [], dict(os.environ)
        for agent, cli in agent_clis(ctx):
            if cli is None or shutil.which(registry.BY_NAME[cli].discovery.binary(environ)) is None:
                continue
            variable = next((v for v in registry.BY_NAME[cli].credential_variables(environ) if environ.get(v)), None)
            status_ok = _auth_status_ok(cli) if variable is None else None
            file = next((f for f in auth_files(cli, environ) if f.exists()), None)
            answers.append((agent, cli, credentials(cli, variable, status_ok, file)))
        return answers

    return ctx.fact("auth", read)


@check(CONFIG, "auth")
def cli_auth_ok(ctx: Context) -> list[Finding]:
    """Which found CLIs have credentials (a variable, their own status command, or a file)?"""
    return [finding("cli_auth_ok", said, agent) for agent, _, said in _auth(ctx) if said is not None]


@check(CONFIG, "auth")
def cli_not_authenticated(ctx: Context) -> list[Finding]:
    """Does a found CLI have no credentials doctor can see?"""
    said = "{cli} has no credentials doctor can see: every task for {agent} would end auth_error"
    return [
        finding("cli_not_authenticated", said.format(cli=cli, agent=agent), agent, fix=registry.BY_NAME[cli].login.fix)
        for agent, cli, words in _auth(ctx)
        if words is None
    ]


# --- what each agent's workers may do, and whether its CLI can enforce it --------------------


def unenforceable(
    agent: str, cli: str, profile: "PermissionProfile", which: Callable[[str], str | None]
) -> tuple[str, str, dict[str, str]] | None:
    """Why the launcher would refuse every task of the agent's level (exit 78), with the fix's variant
    and its values; None: it would not. The CLI's module says what stops it (``enforcement``)."""
    found = registry.BY_NAME[cli].enforcement(profile, which)
    if found is not None and found.kind == "needs":
        verb = "is" if len(found.needs) == 1 else "are"
        return (
            f"{agent}'s level {profile.level} needs {cli}'s sandbox, but {' and '.join(found.needs)} {verb} not on "
            "PATH: every task would end failed (permissions_unenforceable)",
            "sandbox",
            {},
        )
    if found is not None and found.kind == "refused":
        return (
            f"{agent}'s level {profile.level} cannot be enforced by {registry.BY_NAME[cli].discovery.display} "
            f"({found.why}): every task would end failed (permissions_unenforceable)",
            "level",
            {"fix": found.fix},
        )
    return None


def unconfined(cli: str, profile: "PermissionProfile") -> bool:
    """Whether the CLI at this level runs commands no OS sandbox confines to the workspace (docs/permissions.md)."""
    found = registry.BY_NAME[cli].enforcement(profile, lambda name: name)
    return found is not None and found.kind == "unconfined"


def _profiles(ctx: Context) -> list[tuple[str, str, "PermissionProfile", Callable[[str], str | None]]]:
    """Each agent whose CLI doctor knows, its permission profile, and how to find a program (PATH), once per run."""

    def read() -> list[tuple[str, str, "PermissionProfile", Callable[[str], str | None]]]:
        config = ctx.valid_config()
        return [
            (agent, cli, config.permissions(agent), shutil.which) for agent, cli in agent_clis(ctx) if cli is not None
        ]

    return ctx.fact("permissions", read)


@check(CONFIG, "permissions")
def permissions_unenforceable(ctx: Context) -> list[Finding]:
    """Would the launcher refuse every task because the CLI cannot enforce the agent's level here?"""
    found = []
    for agent, cli, profile, which in _profiles(ctx):
        if (why := unenforceable(agent, cli, profile, which)) is not None:
            found.append(finding("permissions_unenforceable", why[0], agent, variant=why[1], **why[2]))
    return found


@check(CONFIG, "permissions")
def permissions_unconfined(ctx: Context) -> list[Finding]:
    """Do an agent's workers run commands that nothing confines to the workspace?"""
    return [
        finding(
            "permissions_unconfined",
            f"{agent}'s workers may run commands that nothing confines to the workspace "
            f"({cli} at level {profile.level} has no OS sandbox)",
            agent,
        )
        for agent, cli, profile, which in _profiles(ctx)
        if unconfined(cli, profile) and unenforceable(agent, cli, profile, which) is None
    ]


@check(CONFIG, "permissions")
def permissions_ok(ctx: Context) -> list[Finding]:
    """What may each agent's workers do, where the CLI enforces it fully?"""
    from dispatcher.core.permissions import DESCRIPTIONS

    return [
        finding("permissions_ok", f"{agent}'s workers may {DESCRIPTIONS[profile.level]} (level {profile.level})", agent)
        for agent, cli, profile, which in _profiles(ctx)
        if not unconfined(cli, profile) and unenforceable(agent, cli, profile, which) is None
    ]
