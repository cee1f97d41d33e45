"""``agent-bridge init``: write the user's config.json from the agent CLIs found on PATH.

It declares each of claude, kimi, codex and gemini whose binary it finds (``CLAUDE_BIN``
etc. override the name, as in the launchers), with the package's launcher for it and the
directory it runs in as the agent's ``workspace``. It prints each CLI's version and whether
the launchers were tested with that version (config.json has no place for notes). ``auto``
is off where the launcher's least privilege is only approximate (Kimi: its tools cannot be
limited to the bridge's), on for the others. With no CLI found it still writes a config,
declaring ``claude`` with ``auto`` off, so that the server can start.

Every agent it declares gets an explicit permission profile (dispatcher/core/permissions.py):
``edit`` where the CLI's own sandbox confines writes to the workspace (Claude, Codex), ``read``
where nothing can (Gemini has no sandbox without a container runtime; Kimi approves every
call and takes any path). It prints what each agent's workers can do.
"""

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from dispatcher.core.errors import BridgeError
from dispatcher.core.permissions import DESCRIPTIONS, Level

VERSION_TIMEOUT_SECONDS = 5.0


@dataclass(frozen=True)
class Cli:
    agent: str
    binary_env: str
    default_binary: str
    tested_version: str
    auto: bool  # False: least privilege is only approximate, so no unattended dispatch by default
    level: Level  # the permission level init gives it: the most its own sandbox can enforce


CLIS = (
    Cli("claude", "CLAUDE_BIN", "claude", "2.1.332", True, "edit"),
    Cli("kimi", "KIMI_BIN", "kimi", "2.1.0", False, "read"),
    Cli("codex", "CODEX_BIN", "codex", "0.171.0", True, "edit"),
    Cli("gemini", "GEMINI_BIN", "gemini", "0.61.0", True, "read"),
)
CLAUDE = CLIS[0]
_VERSION = re.compile(r"\d+\.\d+\.\d+")


@dataclass(frozen=True)
class Found:
    cli: Cli
    path: str
    version: str | None  # None: ``--version`` failed or printed no version

    @property
    def tested(self) -> bool:
        return self.version == self.cli.tested_version


def config_path() -> Path:
    value = os.environ.get("XDG_CONFIG_HOME")
    base = Path(value) if value and Path(value).is_absolute() else Path.home() / ".config"
    return base / "agent-bridge" / "config.json"


def cli_version(path: str) -> str | None:
    try:
        done = subprocess.run(  # noqa: S603 - a CLI found on PATH (or *_BIN), --version only
            [path, "--version"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=VERSION_TIMEOUT_SECONDS,
            errors="replace",
        )
    except (OSError, subprocess.SubprocessError):
        return None
    match = _VERSION.search(done.stdout + " " + done.stderr)
    return match.group(0) if match else None


def find_clis() -> list[Found]:
    found = []
    for cli in CLIS:
        path = shutil.which(os.environ.get(cli.binary_env) or cli.default_binary)
        if path is not None:
            found.append(Found(cli, path, cli_version(path)))
    return found


def build_config(found: list[Found], workspace: Path) -> dict:
    declared = [(f.cli.agent, f.cli.auto, f.cli.level) for f in found] or [("claude", False, CLAUDE.level)]
    agents = {
        agent: {
            "auto": auto,
            "launcher": f"launchers/{agent}_headless.sh",
            "workspace": str(workspace),
            "worker_timeout_seconds": 1800,
            "permissions": {"level": level},
        }
        for agent, auto, level in declared
    }
    return {"agents": agents, "dispatch_max_age_seconds": 86400}


def run_init(*, force: bool, workspace: Path, echo) -> Path:
    from dispatcher.core.config import BridgeConfig

    path = config_path()
    if path.exists() and not force:
        raise BridgeError(
            "config_exists",
            f"{path} already exists; nothing was written. Edit it, or rerun `agent-bridge init --force` to replace it.",
        )
    workspace = workspace.expanduser().resolve()
    if not workspace.is_dir():
        raise BridgeError("usage_error", f"workspace {workspace} is not a directory; pass an existing one.")
    found = find_clis()
    config = build_config(found, workspace)
    BridgeConfig.model_validate(config)  # what we write, the server and listener accept
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)

    for f in found:
        version = f.version or "unknown version"
        tested = (
            "tested"
            if f.tested
            else f"not the tested version {f.cli.tested_version}; it may work, check `agent-bridge dispatch`"
        )
        auto = "auto on" if f.cli.auto else "auto off (least privilege is only approximate)"
        echo(f"{f.cli.agent}: {f.path} {version} ({tested}); {auto}")
        echo(f"  workers may: {DESCRIPTIONS[f.cli.level]} (permissions level {f.cli.level})")
    if not found:
        echo(
            "No agent CLI found on PATH (claude, kimi, codex, gemini; CLAUDE_BIN etc. name another binary). "
            "Declared claude with auto off so the server can start; install a CLI and rerun with --force."
        )
    echo(f'Workers run in {workspace} (each agent\'s "workspace"; edit it in the config to change it).')
    echo(
        'Change what a worker may do with each agent\'s "permissions" in the config (levels: bridge, read, '
        "edit, shell with allow_commands, project; see docs/permissions.md)."
    )
    echo(f"Wrote {path}")
    return path
