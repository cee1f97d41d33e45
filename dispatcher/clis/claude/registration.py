"""Claude Code's registration: the MCP server in ~/.claude.json (through `claude mcp add-json`
when a claude binary is there: it owns that file), hooks and the status line in settings.json."""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

from dispatcher.clis import claude
from dispatcher.clis.base import StatuslineSetting
from dispatcher.clis.config_files import (
    HOOK_TIMEOUT_SECONDS,
    SERVER_NAME,
    STATUSLINE_REFRESH_SECONDS,
    Outcome,
    Registration,
    Transform,
    apply_edit,
    backup_copy,
    diff_text,
    home,
    hook_command,
    is_our_statusline,
    json_dump,
    json_entry_transform,
    json_hooks_removal,
    json_hooks_transform,
    json_server_removal,
    load_json_object,
    make_dirs,
    read_text,
    removal_line,
    same,
    statusline_command,
)
from dispatcher.core.errors import BridgeError

HOOK_EVENTS = claude.CLI.hook_events


def state_file() -> Path:
    base = os.environ.get("CLAUDE_CONFIG_DIR")
    return Path(base) / ".claude.json" if base else home() / ".claude.json"


def settings_file() -> Path:
    base = os.environ.get("CLAUDE_CONFIG_DIR")
    return Path(base) / "settings.json" if base else home() / ".claude" / "settings.json"


def files() -> list[Path]:
    return [state_file(), settings_file()]


def binary() -> str | None:
    explicit = os.environ.get(claude.CLI.discovery.binary_env)
    return explicit or shutil.which(claude.CLI.discovery.default_binary)


def run_claude(binary: str, args: list[str], backup: Path | None) -> None:
    env = dict(os.environ, CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1")
    try:
        done = subprocess.run(  # noqa: S603 - the claude CLI the user runs, with argv built here (no shell)
            [binary, *args],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BridgeError(
            "registration_failed",
            f"could not run `{binary} {' '.join(args[:3])} ...` ({exc}); set CLAUDE_BIN to a working "
            "claude, or unset it and remove claude from PATH to write the file directly.",
        ) from None
    if done.returncode != 0:
        said = " ".join((done.stderr or done.stdout).split())[:500]
        kept = f" The file as it was is in {backup}." if backup else ""
        raise BridgeError(
            "registration_failed", f"`claude {' '.join(args[:3])} ...` exited {done.returncode}: {said}.{kept}"
        )


def register(reg: Registration, dry_run: bool, force: bool) -> list[str]:
    path = state_file()
    wanted = {"type": "stdio", **reg.stdio()}
    transform = json_entry_transform(
        "claude", path, ["mcpServers", SERVER_NAME], wanted, ("command", "args", "env"), force
    )
    found = binary()
    what = f"MCP server {SERVER_NAME} (agent {reg.agent})"
    if found is None:
        return [apply_edit(path, transform, dry_run).line("claude", what, dry_run)]
    # The claude binary owns its state file: it does the edit, after the same checks and backup.
    real = Path(os.path.realpath(path))
    old = read_text(real)
    new = transform(old)  # raises registration_conflict, or None when already there
    if new is None:
        return [Outcome(real, changed=False).line("claude", what, dry_run)]
    outcome = Outcome(real, changed=True, diff=diff_text(real, old, new), created=old is None)
    if dry_run:
        return [outcome.line("claude", what, dry_run)]
    if old is None:
        make_dirs(real.parent)  # 0700, before claude creates them
    else:
        outcome.backup = backup_copy(real, old)
        existing = load_json_object(real, old).get("mcpServers", {})
        if isinstance(existing, dict) and SERVER_NAME in existing:
            run_claude(found, ["mcp", "remove", SERVER_NAME, "-s", "user"], outcome.backup)
    run_claude(found, ["mcp", "add-json", SERVER_NAME, "-s", "user", json.dumps(wanted)], outcome.backup)
    if old is None:
        os.chmod(real, 0o600)  # a file this command had created
    after = load_json_object(real, read_text(real)).get("mcpServers", {})
    if not same(after.get(SERVER_NAME) if isinstance(after, dict) else None, wanted, ("command", "args", "env")):
        raise BridgeError(
            "registration_failed",
            f"`claude mcp add-json` ran but {real} has no matching {SERVER_NAME} entry; "
            "check CLAUDE_CONFIG_DIR and CLAUDE_BIN.",
        )
    return [outcome.line("claude", what + f" via {found}", dry_run)]


def register_statusline(dry_run: bool, force: bool) -> list[str]:
    path = settings_file()
    wanted = {"type": "command", "command": statusline_command(), "refreshInterval": STATUSLINE_REFRESH_SECONDS}
    transform = json_entry_transform(
        "claude", path, ["statusLine"], wanted, ("type", "command", "refreshInterval"), force
    )
    return [apply_edit(path, transform, dry_run).line("claude", "statusLine", dry_run)]


def statusline_setting() -> StatuslineSetting:
    """settings.json's ``statusLine.command``, whether the file exists, and why it cannot be read."""
    path = settings_file()
    try:
        settings = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return StatuslineSetting(path, exists=False)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return StatuslineSetting(path, exists=True, unreadable=type(exc).__name__)
    line = settings.get("statusLine") if isinstance(settings, dict) else None
    return StatuslineSetting(path, exists=True, command=line.get("command") if isinstance(line, dict) else None)


def wait_seconds() -> int:
    """How long the waiting Stop hook waits (AGENT_BRIDGE_HOOK_WAIT_SECONDS)."""
    from dispatcher.core.settings import BridgeSettings

    return BridgeSettings().hook_wait_seconds


def hook_entry(event: str, agent: str) -> dict:
    entry = {"type": "command", "command": hook_command("claude", event, agent), "timeout": HOOK_TIMEOUT_SECONDS}
    if event in claude.WAIT_EVENTS:
        # asyncRewake: in an interactive or streaming session Claude runs it in the background and
        # exit 2 wakes the idle model (SessionStart: one that has had no turn yet); --wait keeps it
        # watching for new mail. Claude kills a hook at its timeout, so the timeout is the wait plus
        # a margin: the hook always ends first.
        wait = wait_seconds()
        entry.update(
            command=f"{entry['command']} --wait {wait}",
            timeout=wait + claude.WAIT_TIMEOUT_MARGIN_SECONDS,
            asyncRewake=True,
        )
    return entry


def older_waiter(entry: dict, agent: str, event: str) -> bool:
    """An earlier form of this installation's own waiting hook for ``event`` (same agent and
    store): the plain one (no ``--wait``) or one with another wait; ``register`` upgrades it
    without ``--force``."""
    if event not in claude.WAIT_EVENTS:
        return False
    if set(entry) - {"type", "command", "timeout", "asyncRewake"} or entry.get("type") != "command":
        return False
    if entry.get("asyncRewake", True) is not True:
        return False
    base = hook_command("claude", event, agent)
    command = entry.get("command")
    return isinstance(command, str) and (
        command == base or re.fullmatch(re.escape(base) + r" --wait \d{1,6}", command) is not None
    )


def register_hooks(agent: str, dry_run: bool, force: bool) -> list[str]:
    path = settings_file()
    upgraded: list[str] = []
    wanted = {event: hook_entry(event, agent) for event in HOOK_EVENTS}
    transform = json_hooks_transform(
        "claude", path, force, wanted, lambda entry, event: older_waiter(entry, agent, event), upgraded
    )
    what = f"hooks {', '.join(HOOK_EVENTS)} (agent {agent})"
    lines = [apply_edit(path, transform, dry_run).line("claude", what, dry_run)]
    if upgraded:
        lines.append(
            f"claude: {'would upgrade' if dry_run else 'upgraded'} this installation's earlier "
            f"{' and '.join(upgraded)} hook to the waiting one (--wait {wait_seconds()}: it wakes an idle session when mail "
            "arrives)."
        )
    return lines


def statusline_removal(path: Path) -> Transform:
    """Take the ``statusLine`` out when it runs this package's ``agent-bridge-statusline``."""

    def transform(text: str | None) -> str | None:
        data = load_json_object(path, text)
        line = data.get("statusLine")
        command = line.get("command") if isinstance(line, dict) else None
        if not is_our_statusline(command):
            return None
        del data["statusLine"]
        return json_dump(data)

    return transform


def _remove_server(agent: str | None) -> str:
    path = state_file()
    transform = json_server_removal("claude", path, agent)
    found = binary()
    real = Path(os.path.realpath(path))
    old = read_text(real)
    if found is None or transform(old) is None:
        return removal_line("claude", path, transform, f"MCP server {SERVER_NAME}")
    # The claude binary owns its state file: it does the edit, after the same checks and backup.
    backup = backup_copy(real, old or "")
    run_claude(found, ["mcp", "remove", SERVER_NAME, "-s", "user"], backup)
    return f"claude: removed MCP server {SERVER_NAME} from {real} via {found} (backup {backup})."


def unregister(agent: str | None) -> list[str]:
    settings = settings_file()
    return [
        _remove_server(agent),
        removal_line("claude", settings, json_hooks_removal("claude", settings, agent), "hooks"),
        removal_line("claude", settings, statusline_removal(settings), "statusLine"),
    ]
