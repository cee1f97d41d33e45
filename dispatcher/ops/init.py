"""``agent-bridge init``: write the user's config.json from the agent CLIs found on PATH.

It declares each CLI of the registry (``dispatcher/clis/``) whose binary it finds (``CLAUDE_BIN``
etc. override the name, as in the launch plans), naming it as the agent's ``cli`` (the generic
launcher runs it) and the directory it runs in as the agent's ``workspace``. It prints each CLI's version, read from
the CLI's own version line (never any number in its output: a Kimi on too old a Node crashes
with Node's version in the trace) and only when ``--version`` succeeded, or "found but does not
run" with the reason, and whether the launchers were tested with that version (config.json has
no place for notes). Kimi runs under ``KIMI_NODE`` when that is set, as its launcher does.
``--force`` keeps the replaced file as ``config.json.bak-<timestamp>``, as ``register`` does;
every directory it creates is 0700. ``auto``
is off where the launcher's least privilege is only approximate (Kimi: its tools cannot be
limited to the bridge's), on for the others. With no CLI found it still writes a config,
declaring the first CLI (``DEFAULT``) with ``auto`` off, so that the server can start.

``--scripted`` is the quick start without a model: the first CLI's agent with ``auto`` on runs the scripted
demo worker (``dispatcher/ops/demo_worker.py``) through ``launchers/scripted_headless.sh``, named
in config.json (so a listener started from any shell finds it), and ``me`` is the person at the
shell, whose tasks wait for a human (``auto`` off).

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
from typing import TYPE_CHECKING

from dispatcher.clis import registry
from dispatcher.clis.base import Discovery
from dispatcher.core.errors import BridgeError
from dispatcher.core.locations import Locations
from dispatcher.core.permissions import DESCRIPTIONS
from dispatcher.core.private_files import ensure_private_dir, write_atomically
from dispatcher.core.protected import CODE, workspace_problem

if TYPE_CHECKING:
    from dispatcher.core.config import BridgeConfig

# A CLI's first start can be slow (opencode is a 185 MB binary read cold from disk; a busy machine):
# --version is given this long before the CLI is called one that does not run.
VERSION_TIMEOUT_SECONDS = 15.0


Cli = Discovery
CLIS = tuple(cli.discovery for cli in registry.CLIS)
DEFAULT = CLIS[0]  # declared with auto off when no CLI is found, and the scripted quick start's agent
MAX_REASON_CHARS = 160


@dataclass(frozen=True)
class Found:
    cli: Cli
    path: str
    version: str | None  # None: ``--version`` failed or printed no version line of this CLI
    problem: str | None = None  # why it does not run ("exit 1: SyntaxError: ..."), None when it does

    @property
    def tested(self) -> bool:
        return self.version == self.cli.tested_version


def config_path() -> Path:
    """Where init writes: AGENT_BRIDGE_CONFIG when set (as every other command reads it), else the
    user's config.json under XDG_CONFIG_HOME."""
    from dispatcher.core.locations import Locations

    explicit = Locations.from_env().config
    if explicit is not None:
        return explicit
    value = os.environ.get("XDG_CONFIG_HOME")
    base = Path(value) if value and Path(value).is_absolute() else Path.home() / ".config"
    return base / "agent-bridge" / "config.json"


def carried_over(old_text: str, new: dict) -> tuple[dict, list[str]]:
    """What ``init --force`` keeps of the file it replaces: each agent the new file does not declare
    whose ``auto`` is off (a person, such as ``me``: nothing finds it on PATH), as written, when it
    is still a valid entry; and the ids of the others it drops (a CLI no longer found, an entry no
    longer valid), to be named."""
    from pydantic import ValidationError

    from dispatcher.core.config import AgentConfig

    try:
        old = json.loads(old_text).get("agents")
    except (ValueError, AttributeError):
        return {}, []
    if not isinstance(old, dict):
        return {}, []
    kept, dropped = {}, []
    for agent, entry in old.items():
        if agent in new["agents"]:
            continue
        try:
            valid = AgentConfig.model_validate(entry)
        except ValidationError:
            dropped.append(agent)
            continue
        if valid.auto or registry.config_problem({agent: valid}) is not None:
            dropped.append(agent)
        else:
            kept[agent] = entry
    return kept, sorted(dropped)


def read_version(cli: Cli, returncode: int | None, stdout: str, stderr: str) -> tuple[str | None, str | None]:
    """(version, problem) from ``--version``: the version only from the CLI's own version line,
    and only when it exited 0 or was still running after printing it (``returncode`` None:
    Kimi and Gemini may linger); otherwise the problem, with the last line it printed."""
    pattern = re.compile(cli.version_line)
    version = next((m.group(1) for line in stdout.splitlines() if (m := pattern.fullmatch(line.strip()))), None)
    if returncode in (0, None) and version is not None:
        return version, None
    if returncode is None:
        return None, f"it did not answer --version within {VERSION_TIMEOUT_SECONDS:g} s"
    if returncode == 0:
        return None, None  # it runs; its version line is one we do not know
    last = next((line.strip() for line in reversed((stderr + "\n" + stdout).splitlines()) if line.strip()), "")
    said = f": {last[:MAX_REASON_CHARS]}" if last else ""
    return None, f"exit {returncode}{said}"


def version_command(cli: Cli, path: str) -> list[str]:
    """How to ask ``cli`` its version: Kimi under ``KIMI_NODE`` when set, as its launcher runs it."""
    node = os.environ.get(cli.runner_env) if cli.runner_env else None
    return [node, path, "--version"] if node else [path, "--version"]


def probe(cli: Cli, path: str) -> Found:
    try:
        done = subprocess.run(  # noqa: S603 - a CLI found on PATH (or *_BIN), --version only
            version_command(cli, path),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=VERSION_TIMEOUT_SECONDS,
            errors="replace",
        )
        returncode, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:
        returncode, out, err = None, _text(exc.stdout), _text(exc.stderr)
    except OSError as exc:
        return Found(cli, path, None, f"it cannot be started ({exc.strerror or type(exc).__name__})")
    return Found(cli, path, *read_version(cli, returncode, out, err))


def _text(data: bytes | str | None) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else data or ""


def find_clis() -> list[Found]:
    found = []
    for cli in CLIS:
        path = shutil.which(os.environ.get(cli.binary_env) or cli.default_binary)
        if path is not None:
            found.append(probe(cli, path))
    return found


def build_config(found: list[Found], workspace: Path) -> dict:
    declared = [(f.cli.agent, f.cli.auto, f.cli.level) for f in found] or [(DEFAULT.agent, False, DEFAULT.level)]
    agents = {
        agent: {
            "cli": agent,
            "auto": auto,
            "workspace": str(workspace),
            "worker_timeout_seconds": 1800,
            "permissions": {"level": level},
        }
        for agent, auto, level in declared
    }
    return {"agents": agents, "dispatch_max_age_seconds": 86400}


# The quick start's stand-in for a model: the launcher `init --scripted` declares for it.
SCRIPTED_LAUNCHER = "launchers/scripted_headless.sh"
HUMAN_AGENT = "me"


def scripted_config(workspace: Path) -> dict:
    """``claude`` answered by the scripted worker, and ``me`` (the person sending): both through the
    scripted launcher, at level ``bridge`` (the scripted worker only calls the bridge's tools)."""

    def agent(auto: bool) -> dict:
        return {
            "auto": auto,
            "launcher": SCRIPTED_LAUNCHER,
            "workspace": str(workspace),
            "worker_timeout_seconds": 120,
            "permissions": {"level": "bridge"},
        }

    return {"agents": {DEFAULT.agent: agent(True), HUMAN_AGENT: agent(False)}, "dispatch_max_age_seconds": 86400}


def _say_scripted(echo) -> None:
    echo(
        f"Declared {DEFAULT.agent}, answered by a scripted worker (no model), and {HUMAN_AGENT}, you at the shell "
        f"(auto off: tasks to {HUMAN_AGENT} wait for you)."
    )
    echo(
        f"For the real {DEFAULT.display or DEFAULT.agent} later: `agent-bridge init --force` declares the CLIs found on PATH."
    )


def refuse_unsafe_workspace(config: "BridgeConfig", workspace: Path, path: Path) -> None:
    """``workspace_unsafe`` when the workspace holds or lies in the bridge's own files (the config
    about to be written, the store, the launchers, the code) or is the home directory: init runs
    in the directory it is started in, and the home directory holds all of them."""
    here = Locations.from_env()
    places = config.bridge_places(Locations(here.db, path, here.runtime_dir))
    if (why := workspace_problem(workspace, places)) is not None:
        raise BridgeError(
            CODE,
            f"workspace {why}: its workers could rewrite the bridge's own files and raise their own permissions; "
            "nothing was written. Run init in a project directory (mkdir -p ~/my-project && cd ~/my-project), "
            "or pass --workspace DIR",
        )


def run_init(*, force: bool, workspace: Path, echo, scripted: bool = False) -> Path:
    from dispatcher.clis.config_files import backup_copy
    from dispatcher.core.config import BridgeConfig

    path = config_path()
    workspace = workspace.expanduser().resolve()
    if not workspace.is_dir():
        raise BridgeError("usage_error", f"workspace {workspace} is not a directory; pass an existing one.")
    found = [] if scripted else find_clis()
    config = scripted_config(workspace) if scripted else build_config(found, workspace)
    text = json.dumps(config, indent=2) + "\n"
    old = path.read_text(encoding="utf-8") if path.exists() else None
    if old == text:  # the quick start run again: nothing to replace
        echo(f"{path} already declares this; nothing changed.")
        return path
    if old is not None and not force:
        again = "agent-bridge init --scripted --force" if scripted else "agent-bridge init --force"
        raise BridgeError(
            "config_exists",
            f"{path} already exists; nothing was written. Edit it, or rerun `{again}` to replace it.",
        )
    kept, dropped = carried_over(old, config) if old is not None else ({}, [])
    config["agents"].update(kept)
    valid = BridgeConfig.model_validate(config)  # what we write, the server and listener accept
    refuse_unsafe_workspace(valid, workspace, path)
    ensure_private_dir(path.parent, "config directory")
    backup = backup_copy(path, old) if old is not None else None
    write_atomically(path, json.dumps(config, indent=2) + "\n")

    for f in found:
        if f.problem is not None:
            hint = f"; {f.cli.runs_on}" if f.cli.runs_on else ""
            echo(f"{f.cli.agent}: {f.path} found but does not run ({f.problem}){hint}")
            echo("  declared anyway: its tasks fail until it runs (`agent-bridge doctor` checks it)")
            continue
        version = f.version or "unknown version"
        tested = (
            "tested"
            if f.tested
            else f"not the tested version {f.cli.tested_version}; it may work, check `agent-bridge dispatch`"
        )
        auto = "auto on" if f.cli.auto else "auto off (least privilege is only approximate)"
        echo(f"{f.cli.agent}: {f.path} {version} ({tested}); {auto}")
        echo(f"  workers may: {DESCRIPTIONS[f.cli.level]} (permissions level {f.cli.level})")
    if scripted:
        _say_scripted(echo)
    elif not found:
        echo(
            f"No agent CLI found on PATH ({', '.join(cli.agent for cli in CLIS)}; {DEFAULT.binary_env} etc. name "
            f"another binary). Declared {DEFAULT.agent} with auto off so the server can start; install a CLI and "
            "rerun with --force."
        )
    echo(f'Workers run in {workspace} (each agent\'s "workspace"; edit it in the config to change it).')
    echo(
        'Change what a worker may do with each agent\'s "permissions" in the config (levels: bridge, read, '
        "edit, shell with allow_commands, project; see docs/permissions.md)."
    )
    if kept:
        echo(f"Kept {', '.join(sorted(kept))} from the previous file, as written (auto off: a person answers).")
    if dropped:
        echo(
            f"Dropped {', '.join(dropped)} of the previous file (not found here, or no longer valid); to add one back, "
            f"copy its entry from {backup} into {path}."
        )
    if backup is not None:
        echo(f"Kept the previous file as {backup}")
    echo(f"Wrote {path}")
    return path
