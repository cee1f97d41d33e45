"""Which launcher-relevant environment variables a listener took: names only, never values.

A detached listener keeps the environment of the shell that started it, and a systemd one
that of its unit; workers inherit it. So the listener records the names it took (and a salted
fingerprint of their values, to see a changed value without storing it), which agent CLIs its
PATH finds (and a fingerprint of PATH and of where each resolves), says them in its log and
`listener status`, and `listener enable` warns when the caller's differ.
"""

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from dispatcher.clis import registry
from dispatcher.core.findings import CODES

# What the CLIs accept as credentials (doctor's authentication check reads the same table).
AUTH_VARIABLES = {cli.name: cli.login.variables for cli in registry.CLIS}

# What the launchers (launchers/*.sh) and the CLIs they start read from the listener's environment
# and a user sets: the worker command, each CLI's binary, home and options, and the credentials.
LAUNCHER_VARIABLES = (
    "AGENT_BRIDGE_WORKER_COMMAND",
    "AGENT_BRIDGE_MAX_TURNS",
    *(name for cli in registry.CLIS for name in cli.launch_variables),
    *(name for names in AUTH_VARIABLES.values() for name in names),
)


# What a launcher cannot run without beyond the supervisor's own settings (launchers/*.sh): the
# command launcher runs the user's command, which only the listener's environment can give.
LAUNCHER_NEEDS = {"command_headless.sh": ("AGENT_BRIDGE_WORKER_COMMAND",)}


def unset_for(launcher: Path, names: Iterable[str]) -> list[str]:
    """The variables ``launcher`` needs that are not among ``names`` (those set)."""
    present = set(names)
    return [name for name in LAUNCHER_NEEDS.get(launcher.name, ()) if name not in present]


def unset_problem(agent: str, launcher: Path, missing: list[str], whose: str) -> tuple[str, str]:
    """What fails when ``launcher`` lacks ``missing`` in ``whose`` environment, and the fix
    (``listener enable``'s and doctor's ``launcher_variable_unset``)."""
    return (
        f"{agent}'s launcher {launcher.name} needs {', '.join(missing)}, which {whose} has not: every task of "
        f"{agent} would fail (launcher_usage)",
        CODES["launcher_variable_unset"].fix_text(agent=agent, variable=missing[0]),
    )


def taken(environ: Mapping[str, str]) -> list[str]:
    """The launcher-relevant variables set (non-empty) in ``environ``, sorted."""
    return sorted(name for name in LAUNCHER_VARIABLES if environ.get(name))


def fingerprint(environ: Mapping[str, str], salt: str) -> str:
    """A salted digest of the taken variables' names and values: equal for equal values, and no value
    can be read back from it (the salt keeps equal values from looking equal across listeners)."""
    import hashlib  # here: OpenSSL, which the listener never loads (it records in a forked child)

    digest = hashlib.sha256(salt.encode())
    for name in taken(environ):
        digest.update(f"\0{name}={environ[name]}".encode())
    return digest.hexdigest()[:32]


# Each agent CLI and the variable that names its binary (the launchers' own rule): how a worker finds it.
CLI_BINARIES = {cli.name: cli.discovery.binary_env for cli in registry.CLIS}


def resolved(environ: Mapping[str, str]) -> dict[str, str | None]:
    """Where each CLI's binary resolves on ``environ``'s PATH (None: not found), as a launcher finds it."""
    path = environ.get("PATH", os.defpath)
    return {cli: _on_path(environ.get(var) or cli, path) for cli, var in CLI_BINARIES.items()}


def resolution(environ: Mapping[str, str], salt: str) -> str:
    """A salted digest of PATH and of where each CLI resolves on it."""
    import hashlib

    digest = hashlib.sha256(salt.encode())
    digest.update(environ.get("PATH", os.defpath).encode())
    for cli, where in resolved(environ).items():
        digest.update(f"\0{cli}={where}".encode())
    return digest.hexdigest()[:32]


def record(environ: Mapping[str, str]) -> dict:
    """What a listener writes into its progress document at start (``checked.environment_record``):
    the variables' names, the CLIs its PATH finds, and salted fingerprints of the values, of PATH
    and of where each CLI resolves."""
    import secrets

    salt = secrets.token_hex(8)
    found = sorted(cli for cli, where in resolved(environ).items() if where)
    return {
        "names": taken(environ),
        "salt": salt,
        "fingerprint": fingerprint(environ, salt),
        "clis": found,
        "resolution": resolution(environ, salt),
    }


def difference(recorded: object, environ: Mapping[str, str]) -> str | None:
    """How ``environ`` differs from a listener's ``record``, in one phrase of names; None when it
    does not (or the record is missing or malformed: nothing to compare with)."""
    if not isinstance(recorded, dict) or not isinstance(recorded.get("salt"), str):
        return None
    parts = [*_variables_differ(recorded, environ), *_resolution_differs(recorded, environ)]
    return "; ".join(parts) or None


def _variables_differ(recorded: dict, environ: Mapping[str, str]) -> list[str]:
    names = recorded.get("names")
    if not isinstance(names, list) or recorded.get("fingerprint") == fingerprint(environ, recorded["salt"]):
        return []
    here = taken(environ)
    parts = []
    if missing := [name for name in names if name not in here]:
        parts.append(f"it has {', '.join(missing)}, which this shell has not")
    if extra := [name for name in here if name not in names]:
        parts.append(f"this shell has {', '.join(extra)}, which it has not")
    return parts or [f"a value differs (of {', '.join(here)})"]


def _resolution_differs(recorded: dict, environ: Mapping[str, str]) -> list[str]:
    """Which CLIs one PATH finds and the other does not, else that PATH or a CLI's binary differs."""
    clis = recorded.get("clis")
    if not isinstance(clis, list) or recorded.get("resolution") == resolution(environ, recorded["salt"]):
        return []
    here = sorted(cli for cli, where in resolved(environ).items() if where)
    parts = []
    if extra := [cli for cli in here if cli not in clis]:
        parts.append(f"this shell's PATH finds {', '.join(extra)}, which its PATH does not")
    if missing := [cli for cli in clis if cli not in here]:
        parts.append(f"its PATH finds {', '.join(missing)}, which this shell's does not")
    return parts or ["its PATH differs (or a CLI resolves to another binary)"]


def _on_path(name: str, path: str | None) -> str | None:
    """Where ``name`` resolves on ``path`` (an executable file), as ``shutil.which`` says; not
    shutil itself, which brings bz2 and lzma into the listener that records this at start."""
    if os.sep in name:
        return name if os.path.isfile(name) and os.access(name, os.X_OK) else None
    for directory in (path if path is not None else os.environ.get("PATH", os.defpath)).split(os.pathsep):
        candidate = str(Path(directory or ".") / name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None
