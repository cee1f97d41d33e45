"""Where an agent's launcher is and what keeps it from running: the one rule doctor, the status
line and ``top`` judge it by (the status line reads config.json unvalidated, so both take the
launcher as written). An agent that names its CLI (``cli``) needs no launcher of its own: the
generic one runs the CLI the supervisor names in ``AGENT_BRIDGE_CLI`` (``cli_word``)."""

import os
from pathlib import Path

from dispatcher.core.locations import PACKAGE_DATA
from dispatcher.core.private_files import writable_by_others

AGENT_LAUNCHER = "launchers/agent_headless.sh"  # runs the CLI named in CLI_VARIABLE
CLI_VARIABLE = "AGENT_BRIDGE_CLI"  # the supervisor's word for the CLI the agent's config names
DECLARED_CLI = "declared"  # that word for a CLI the agent declares itself (its ``cli`` object)


def agent_launcher(launcher: object, cli: object) -> object:
    """The launcher an agent's entry runs: ``launcher`` as written, else the generic one when it
    names its CLI (``cli``); None when it gives neither (config validation refuses that)."""
    if launcher is None and cli is not None:
        return AGENT_LAUNCHER
    return launcher


def cli_word(cli: object) -> str | None:
    """``CLI_VARIABLE``'s value for an agent's ``cli``: a registered CLI's name as written, ``DECLARED_CLI``
    for a declaration (an object), None when the entry names none (its launcher says which CLI)."""
    if cli is None or isinstance(cli, str):
        return cli
    return DECLARED_CLI


def launcher_path(launcher: str, project_dir: Path) -> Path:
    """Absolute as written; relative: ``project_dir`` first (the checkout), then the
    installed package's launchers; when neither exists, the project-relative path."""
    path = Path(launcher).expanduser()
    if path.is_absolute():
        return path
    for base in (project_dir, PACKAGE_DATA):
        if (base / path).is_file():
            return base / path
    return project_dir / path


def launcher_problem(path: Path) -> tuple[str, str] | None:
    """The finding code of what keeps ``path`` from running, with why when the code needs it; None: it can run."""
    if not path.is_file():
        return "launcher_missing", ""
    if not os.access(path, os.X_OK):
        return "launcher_not_executable", ""
    if (why := writable_by_others(path)) is not None:  # the rule the supervisor refuses it by
        return "launcher_writable_by_others", why
    return None
