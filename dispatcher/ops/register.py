"""`agent-bridge register CLI --agent ID`: write this installation's MCP server into an agent CLI's own config.

One small writer per CLI, each turning the user's current file text into the new text, and
one shared helper (``apply_edit``) that does the rest the same way for every file: nothing
is written when the text would not change (a rerun says so), ``--dry-run`` prints a unified
diff and writes nothing, an existing file is copied first to ``<file>.bak-<timestamp>``
(0600), and the new text replaces the file atomically (a temporary file in the same
directory, then ``os.replace``). A file it creates is 0600, a directory it creates 0700.

An entry named ``agent_bridge`` that is already there but differs from ours (another
command, agent id or store) is refused with ``registration_conflict`` unless ``--force``.

Codex's config.toml is edited as text, not re-serialised: the ``[mcp_servers.agent_bridge]``
table (and its sub-tables) is cut out and a fresh one appended, so every other byte of the
user's file, comments included, is kept; the result is parsed back with ``tomllib`` and
must equal the old document with just that entry replaced, or nothing is written.
"""

import difflib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from dispatcher.core import clock
from dispatcher.core.errors import BridgeError
from dispatcher.core.locations import absolute_setting
from dispatcher.core.private_files import write_atomically
from dispatcher.wake.hook_wait import TIMEOUT_MARGIN_SECONDS, WAIT_EVENTS

SERVER_NAME = "agent_bridge"
CLIS = ("claude", "kimi", "codex", "gemini", "opencode")
KIMI_STARTUP_TIMEOUT_MS = 30000
STATUSLINE_REFRESH_SECONDS = 2
HOOK_TIMEOUT_SECONDS = 10
CLAUDE_HOOK_EVENTS = ("UserPromptSubmit", "PostToolUse", "Stop", "SessionStart")
KIMI_HOOK_EVENTS = ("UserPromptSubmit",)
CODEX_HOOK_EVENTS = ("UserPromptSubmit", "Stop")
GEMINI_HOOK_EVENTS = ("BeforeAgent", "AfterAgent")


@dataclass
class Outcome:
    """What one file edit did (or, with --dry-run, would do)."""

    path: Path
    changed: bool
    diff: str = ""
    backup: Path | None = None
    created: bool = False

    def line(self, cli: str, what: str, dry_run: bool) -> str:
        if not self.changed:
            return f"{cli}: {what} already in {self.path}; nothing changed."
        if dry_run:
            return f"{cli}: would write {what} to {self.path} (dry run, nothing written):\n{self.diff}"
        where = "created" if self.created else f"updated (backup {self.backup})"
        return f"{cli}: wrote {what} to {self.path}, {where}."


@dataclass
class Registration:
    """The MCP server entry this installation wants, in neutral form."""

    agent: str
    command: str
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)


def server_registration(agent: str, environ: Mapping[str, str] | None = None) -> Registration:
    """`python -m dispatcher serve` with the current interpreter, AGENT_ID and the store/config in use."""
    environ = os.environ if environ is None else environ
    env = {"AGENT_ID": agent}
    for name in ("AGENT_BRIDGE_DB", "AGENT_BRIDGE_CONFIG"):
        if environ.get(name):
            env[name] = absolute_setting(environ[name])
    return Registration(agent, os.path.abspath(sys.executable), server_args(), env)


def server_args() -> list[str]:
    """``-m dispatcher serve`` when this Python imports the package from anywhere (an install, editable or not).

    A checkout run with a Python that only finds the package from the current directory gets the
    checkout's ``server.py`` instead, which puts its own directory on ``sys.path``.
    """
    from dispatcher.core.locations import PROJECT_DIR

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # Codex would not pass it on
    try:
        probe = subprocess.run(
            [sys.executable, "-c", "import dispatcher.mcp.serve"],
            cwd="/",
            env=env,
            capture_output=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        importable = probe.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        importable = True  # cannot tell: the documented form
    script = PROJECT_DIR / "server.py"
    if not importable and script.is_file():
        return [str(script)]
    return ["-m", "dispatcher", "serve"]


# --- the shared "edit a config file safely" helper -------------------------------------------


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise BridgeError("file_unavailable", f"cannot read {path} ({exc}); nothing was changed.") from None


def _make_dirs(directory: Path) -> None:
    missing = []
    while not directory.exists():
        missing.append(directory)
        directory = directory.parent
    for d in reversed(missing):
        os.mkdir(d, 0o700)
        os.chmod(d, 0o700)  # whatever the umask


def backup_copy(path: Path, text: str) -> Path:
    """Copy ``text`` (the file's old content) to a new ``<path>.bak-<timestamp>``, 0600."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.localtime(clock.now()))
    for n in range(1000):
        candidate = path.with_name(f"{path.name}.bak-{stamp}" + (f"-{n}" if n else ""))
        try:
            fd = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError:
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(candidate, 0o600)
        return candidate
    raise BridgeError("file_unavailable", f"cannot find a free backup name next to {path}; nothing was changed.")


def diff_text(path: Path, old: str | None, new: str) -> str:
    lines = difflib.unified_diff(
        (old or "").splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile=str(path) if old is not None else "/dev/null",
        tofile=str(path),
    )
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


def apply_edit(path: Path, transform: Callable[[str | None], str | None], dry_run: bool) -> Outcome:
    """Edit one config file safely: ``transform`` maps its text (None: no file) to the new text (None: as is)."""
    path = Path(os.path.realpath(path))  # a linked dotfile is edited where it lives, the link is kept
    old = _read(path)
    new = transform(old)
    if new is None or new == old:
        return Outcome(path, changed=False)
    outcome = Outcome(path, changed=True, diff=diff_text(path, old, new), created=old is None)
    if dry_run:
        return outcome
    try:
        if old is None:
            _make_dirs(path.parent)
            mode = 0o600
        else:
            mode = os.stat(path).st_mode & 0o7777
            outcome.backup = backup_copy(path, old)
        write_atomically(path, new, mode)
    except OSError as exc:
        raise BridgeError("file_unavailable", f"cannot write {path} ({exc}); the file was left as it was.") from None
    return outcome


# --- conflicts -------------------------------------------------------------------------------


def _conflict(cli: str, path: Path, key: str, existing: object, wanted: object) -> BridgeError:
    return BridgeError(
        "registration_conflict",
        f"{path} already has {key} = {json.dumps(existing, sort_keys=True)}, which differs from this "
        f"installation's {json.dumps(wanted, sort_keys=True)}; nothing was changed. Rerun "
        f"`agent-bridge register {cli} ... --force` to replace it (the file is backed up first), "
        "or remove that entry yourself.",
    )


def _same(existing: object, wanted: dict, keys: tuple[str, ...]) -> bool:
    return isinstance(existing, dict) and all(existing.get(k) == wanted.get(k) for k in keys)


# --- JSON files (Claude's fallback and statusLine, Kimi Code, Gemini) ------------------------


def _load_json_object(path: Path, text: str | None) -> dict:
    if text is None or not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BridgeError(
            "registration_file_invalid",
            f"{path} is not valid JSON ({exc}); fix or move it, then rerun. Nothing was changed.",
        ) from None
    if not isinstance(data, dict):
        raise BridgeError(
            "registration_file_invalid",
            f"{path} does not hold a JSON object; fix or move it, then rerun. Nothing was changed.",
        )
    return data


def _json_dump(data: dict) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def json_entry_transform(
    cli: str,
    path: Path,
    keys: list[str],
    wanted: dict,
    compare: tuple[str, ...],
    force: bool,
) -> Callable[[str | None], str | None]:
    """Set ``data[keys[0]]...[keys[-1]] = wanted`` unless an equal one (on ``compare``) is there."""

    def transform(text: str | None) -> str | None:
        data = _load_json_object(path, text)
        parent = data
        for k in keys[:-1]:
            parent = parent.setdefault(k, {})
            if not isinstance(parent, dict):
                raise BridgeError(
                    "registration_file_invalid",
                    f"{path}: {k!r} is not a JSON object; fix it, then rerun. Nothing was changed.",
                )
        existing = parent.get(keys[-1])
        if _same(existing, wanted, compare):
            return None
        if existing is not None and not force:
            raise _conflict(cli, path, ".".join(keys), existing, wanted)
        parent[keys[-1]] = wanted
        return _json_dump(data)

    return transform


# --- per-CLI writers -------------------------------------------------------------------------


def _home() -> Path:
    return Path(os.path.expanduser("~"))


def claude_state_file() -> Path:
    base = os.environ.get("CLAUDE_CONFIG_DIR")
    return Path(base) / ".claude.json" if base else _home() / ".claude.json"


def claude_settings_file() -> Path:
    base = os.environ.get("CLAUDE_CONFIG_DIR")
    return Path(base) / "settings.json" if base else _home() / ".claude" / "settings.json"


def claude_binary() -> str | None:
    explicit = os.environ.get("CLAUDE_BIN")
    if explicit:
        return explicit
    return shutil.which("claude")


def _stdio(reg: Registration) -> dict:
    return {"command": reg.command, "args": reg.args, "env": reg.env}


def _run_claude(binary: str, args: list[str], backup: Path | None) -> None:
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


def register_claude(reg: Registration, dry_run: bool, force: bool) -> list[str]:
    path = claude_state_file()
    wanted = {"type": "stdio", **_stdio(reg)}
    transform = json_entry_transform(
        "claude", path, ["mcpServers", SERVER_NAME], wanted, ("command", "args", "env"), force
    )
    binary = claude_binary()
    what = f"MCP server {SERVER_NAME} (agent {reg.agent})"
    if binary is None:
        return [apply_edit(path, transform, dry_run).line("claude", what, dry_run)]
    # The claude binary owns its state file: it does the edit, after the same checks and backup.
    real = Path(os.path.realpath(path))
    old = _read(real)
    new = transform(old)  # raises registration_conflict, or None when already there
    if new is None:
        return [Outcome(real, changed=False).line("claude", what, dry_run)]
    outcome = Outcome(real, changed=True, diff=diff_text(real, old, new), created=old is None)
    if dry_run:
        return [outcome.line("claude", what, dry_run)]
    if old is None:
        _make_dirs(real.parent)  # 0700, before claude creates them
    else:
        outcome.backup = backup_copy(real, old)
        existing = _load_json_object(real, old).get("mcpServers", {})
        if isinstance(existing, dict) and SERVER_NAME in existing:
            _run_claude(binary, ["mcp", "remove", SERVER_NAME, "-s", "user"], outcome.backup)
    _run_claude(binary, ["mcp", "add-json", SERVER_NAME, "-s", "user", json.dumps(wanted)], outcome.backup)
    if old is None:
        os.chmod(real, 0o600)  # a file this command had created
    after = _load_json_object(real, _read(real)).get("mcpServers", {})
    if not _same(after.get(SERVER_NAME) if isinstance(after, dict) else None, wanted, ("command", "args", "env")):
        raise BridgeError(
            "registration_failed",
            f"`claude mcp add-json` ran but {real} has no matching {SERVER_NAME} entry; "
            "check CLAUDE_CONFIG_DIR and CLAUDE_BIN.",
        )
    return [outcome.line("claude", what + f" via {binary}", dry_run)]


def installed_script(name: str) -> str:
    """The absolute path of one of this package's console scripts: next to this Python, else on PATH."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if found:
        return os.path.abspath(found)
    raise BridgeError(
        "registration_failed",
        f"{name} is not installed next to this Python nor on PATH; run `uv sync` "
        "(or reinstall the package), then rerun.",
    )


# What the status line reads: the agents from the config, their progress from the runtime
# directory, their unread counts from the store.
STATUSLINE_SETTINGS = ("AGENT_BRIDGE_DB", "AGENT_BRIDGE_CONFIG", "AGENT_BRIDGE_RUNTIME_DIR")


def statusline_command(environ: Mapping[str, str] | None = None) -> str:
    """``agent-bridge-statusline`` with the store, config and runtime directory given to ``register``
    (Claude runs it with its own environment, which has none of them)."""
    return " ".join(
        [*setting_words(STATUSLINE_SETTINGS, environ), shlex.quote(installed_script("agent-bridge-statusline"))]
    )


def is_our_statusline(command: object) -> bool:
    """A ``statusLine`` command that runs this package's status line, after any ``NAME=value``
    settings ``statusline_command`` puts before it."""
    if not isinstance(command, str):
        return False
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    program = next((word for word in words if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", word)), "")
    return Path(program).name == "agent-bridge-statusline"


def register_claude_statusline(dry_run: bool, force: bool) -> list[str]:
    path = claude_settings_file()
    wanted = {"type": "command", "command": statusline_command(), "refreshInterval": STATUSLINE_REFRESH_SECONDS}
    transform = json_entry_transform(
        "claude", path, ["statusLine"], wanted, ("type", "command", "refreshInterval"), force
    )
    return [apply_edit(path, transform, dry_run).line("claude", "statusLine", dry_run)]


# --- hooks (`--hooks`): `agent-bridge hook <cli> <event>` in the CLI's hook settings --------


def agent_bridge_command() -> str:
    return installed_script("agent-bridge")


def hook_command(cli: str, event: str, agent: str, environ: Mapping[str, str] | None = None) -> str:
    """The shell command a CLI runs for ``event``: the store and runtime directory in use, then
    ``agent-bridge hook <cli> <event> --agent <agent>`` (the CLI's own environment has no AGENT_ID)."""
    words = setting_words(("AGENT_BRIDGE_DB", "AGENT_BRIDGE_RUNTIME_DIR"), environ)
    words += [shlex.quote(agent_bridge_command()), "hook", cli, event, "--agent", agent]
    return " ".join(words)


def setting_words(names: tuple[str, ...], environ: Mapping[str, str] | None = None) -> list[str]:
    """``NAME=/absolute/path`` shell words for each of ``names`` set in ``environ`` (default: ours):
    how a command the CLI runs through its shell reaches the store and files ``register`` was given."""
    environ = os.environ if environ is None else environ
    return [f"{name}={shlex.quote(absolute_setting(environ[name]))}" for name in names if environ.get(name)]


_OUR_HOOK = re.compile(r"agent-bridge\S*\s+hook\s+(claude|kimi|codex|gemini)\b")


def is_our_hook(command: object, cli: str) -> bool:
    found = _OUR_HOOK.search(command) if isinstance(command, str) else None
    return found is not None and found.group(1) == cli


def claude_wait_seconds() -> int:
    """How long the waiting Stop hook waits (AGENT_BRIDGE_HOOK_WAIT_SECONDS)."""
    from dispatcher.core.settings import BridgeSettings

    return BridgeSettings().hook_wait_seconds


def json_hook_entry(cli: str, event: str, agent: str) -> dict:
    timeout = HOOK_TIMEOUT_SECONDS * 1000 if cli == "gemini" else HOOK_TIMEOUT_SECONDS  # Gemini: milliseconds
    entry = {"type": "command", "command": hook_command(cli, event, agent), "timeout": timeout}
    if cli == "claude" and event in WAIT_EVENTS:
        # asyncRewake: in an interactive or streaming session Claude runs it in the background and
        # exit 2 wakes the idle model (SessionStart: one that has had no turn yet); --wait keeps it
        # watching for new mail. Claude kills a hook at its timeout, so the timeout is the wait plus
        # a margin: the hook always ends first.
        wait = claude_wait_seconds()
        entry.update(
            command=f"{entry['command']} --wait {wait}", timeout=wait + TIMEOUT_MARGIN_SECONDS, asyncRewake=True
        )
    return entry


def _older_claude_waiter(entry: dict, agent: str, event: str) -> bool:
    """An earlier form of this installation's own waiting Claude hook for ``event`` (same agent and
    store): the plain one (no ``--wait``) or one with another wait; ``register`` upgrades it
    without ``--force``."""
    if set(entry) - {"type", "command", "timeout", "asyncRewake"} or entry.get("type") != "command":
        return False
    if entry.get("asyncRewake", True) is not True:
        return False
    base = hook_command("claude", event, agent)
    command = entry.get("command")
    return isinstance(command, str) and (
        command == base or re.fullmatch(re.escape(base) + r" --wait \d{1,6}", command) is not None
    )


def json_hooks_transform(
    cli: str, path: Path, agent: str, force: bool, events: tuple[str, ...], upgraded: list[str] | None = None
) -> Callable[[str | None], str | None]:
    """Add one command hook per event to ``hooks.<Event>`` (Claude's settings.json, Codex's
    hooks.json: the same shape); every other hook is kept as it is.

    Ours is a command hook running ``agent-bridge hook <cli>``; an equal one is left alone, a
    different one (another agent, store or path) is refused unless ``force`` replaces it."""

    def transform(text: str | None) -> str | None:
        data = _load_json_object(path, text)
        hooks = data.setdefault("hooks", {})
        if not isinstance(hooks, dict):
            raise BridgeError(
                "registration_file_invalid",
                f"{path}: 'hooks' is not a JSON object; fix it, then rerun. Nothing was changed.",
            )
        changed = False
        for event in events:
            wanted = json_hook_entry(cli, event, agent)
            groups = hooks.setdefault(event, [])
            if not isinstance(groups, list):
                raise BridgeError(
                    "registration_file_invalid",
                    f"{path}: 'hooks.{event}' is not a JSON array; fix it, then rerun. Nothing was changed.",
                )
            ours = [
                (g, h)
                for g in groups
                if isinstance(g, dict) and isinstance(g.get("hooks"), list)
                for h in g["hooks"]
                if isinstance(h, dict) and is_our_hook(h.get("command"), cli)
            ]
            if len(ours) == 1 and ours[0][1] == wanted:
                continue
            older = (
                cli == "claude"
                and len(ours) == 1
                and event in WAIT_EVENTS
                and _older_claude_waiter(ours[0][1], agent, event)
            )
            if ours and not force and not older:
                raise _conflict(cli, path, f"hooks.{event}", [h for _, h in ours], wanted)
            if older and upgraded is not None:
                upgraded.append(event)
            for group, entry in ours:
                group["hooks"].remove(entry)
            groups[:] = [g for g in groups if not (isinstance(g, dict) and g.get("hooks") == [])]
            groups.append({"hooks": [wanted]})
            changed = True
        return _json_dump(data) if changed else None

    return transform


def register_claude_hooks(agent: str, dry_run: bool, force: bool) -> list[str]:
    path = claude_settings_file()
    upgraded: list[str] = []
    transform = json_hooks_transform("claude", path, agent, force, CLAUDE_HOOK_EVENTS, upgraded)
    what = f"hooks {', '.join(CLAUDE_HOOK_EVENTS)} (agent {agent})"
    lines = [apply_edit(path, transform, dry_run).line("claude", what, dry_run)]
    if upgraded:
        lines.append(
            f"claude: {'would upgrade' if dry_run else 'upgraded'} this installation's earlier "
            f"{' and '.join(upgraded)} hook to the waiting one (--wait {claude_wait_seconds()}: it wakes an idle session when mail "
            "arrives)."
        )
    return lines


def codex_hooks_file() -> Path:
    return codex_file().with_name("hooks.json")


def parse_toml(path: Path, text: str) -> dict:
    """A CLI's TOML config, or one clear refusal that changes nothing."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BridgeError(
            "registration_file_invalid", f"{path} is not valid TOML ({exc}); fix it, then rerun. Nothing was changed."
        ) from None


def checked_toml(path: Path, new: str, expected: dict, what: str, instead: str) -> str:
    """``new`` (a text edit of a TOML file) when it parses to exactly ``expected``: a text edit of a
    form it does not understand (inline tables, dotted keys) is refused, saying what to do ``instead``."""
    try:
        edited = tomllib.loads(new)
    except tomllib.TOMLDecodeError:
        edited = None
    if edited != expected:
        raise BridgeError(
            "registration_file_invalid",
            f"{path} defines {what} in a form this command does not edit; nothing was changed. {instead}",
        )
    return new


def codex_features_transform(path: Path) -> Callable[[str | None], str | None]:
    """``[features] hooks = true`` in Codex's config.toml (hooks are off without it), as a text edit
    checked by re-parsing; an explicit ``hooks = false`` is the user's choice and is refused."""

    def transform(text: str | None) -> str | None:
        text = text or ""
        doc = parse_toml(path, text)
        features = doc.get("features", {})
        if isinstance(features, dict) and features.get("hooks") is True:
            return None
        if not isinstance(features, dict) or "hooks" in features:
            raise BridgeError(
                "registration_conflict",
                f"{path} sets features.hooks to {json.dumps(features.get('hooks') if isinstance(features, dict) else features)}; "
                "Codex runs no hooks without `hooks = true` under [features]. Change it yourself, then rerun.",
            )
        lines = text.splitlines(keepends=True)
        at = next((i for i, line in enumerate(lines) if re.fullmatch(r"\s*\[\s*features\s*\]\s*(#.*)?\n?", line)), None)
        if at is None:
            new = text + ("\n" if text and not text.endswith("\n") else "") + ("\n" if text.strip() else "")
            new += "[features]\nhooks = true\n"
        else:
            new = "".join(lines[: at + 1]) + "hooks = true\n" + "".join(lines[at + 1 :])
        expected = {**doc, "features": {**features, "hooks": True}}
        return checked_toml(
            path, new, expected, "[features]", "Add `hooks = true` under [features] yourself, then rerun."
        )

    return transform


def register_codex_hooks(agent: str, dry_run: bool, force: bool) -> list[str]:
    config, hooks_path = codex_file(), codex_hooks_file()
    features = codex_features_transform(config)
    hooks = json_hooks_transform("codex", hooks_path, agent, force, CODEX_HOOK_EVENTS)
    features(_read(Path(os.path.realpath(config))))  # refuse before writing either file
    lines = [
        apply_edit(hooks_path, hooks, dry_run).line(
            "codex", f"hooks {', '.join(CODEX_HOOK_EVENTS)} (agent {agent})", dry_run
        ),
        apply_edit(config, features, dry_run).line("codex", "[features] hooks = true", dry_run),
    ]
    lines.append(
        "codex: Codex runs a new or changed hook only after you trust it: review it once in the Codex TUI "
        "(/hooks); `codex exec` runs untrusted hooks only with --dangerously-bypass-hook-trust."
    )
    return lines


def kimi_config_file() -> Path:
    base = os.environ.get("KIMI_CODE_HOME")
    return Path(base) / "config.toml" if base else _home() / ".kimi-code" / "config.toml"


def kimi_hook_table(event: str, agent: str) -> str:
    return (
        "[[hooks]]\n"
        f"event = {_toml_str(event)}\n"
        f"command = {_toml_str(hook_command('kimi', event, agent))}\n"
        f"timeout = {HOOK_TIMEOUT_SECONDS}\n"
    )


def kimi_hooks_transform(path: Path, agent: str, force: bool) -> Callable[[str | None], str | None]:
    """Append a ``[[hooks]]`` table per event to Kimi's config.toml, as text (every other byte kept).

    An equal entry is left alone. A different one of ours is refused: an array-of-tables entry
    is not cut out of the user's file automatically, even with ``force``."""

    def transform(text: str | None) -> str | None:
        text = text or ""
        doc = parse_toml(path, text)
        hooks = doc.get("hooks", [])
        if not isinstance(hooks, list):
            raise BridgeError(
                "registration_file_invalid",
                f"{path}: 'hooks' is not an array of tables; fix it, then rerun. Nothing was changed.",
            )
        added, expected = "", list(hooks)
        for event in KIMI_HOOK_EVENTS:
            wanted = {"event": event, "command": hook_command("kimi", event, agent), "timeout": HOOK_TIMEOUT_SECONDS}
            ours = [
                h
                for h in hooks
                if isinstance(h, dict) and h.get("event") == event and is_our_hook(h.get("command"), "kimi")
            ]
            if ours == [wanted]:
                continue
            if ours:
                raise BridgeError(
                    "registration_conflict",
                    f"{path} already has an agent-bridge {event} hook that differs from this installation's "
                    f"({json.dumps(ours[0], sort_keys=True)}); nothing was changed{' (--force does not cut tables out of config.toml)' if force else ''}. "
                    "Remove that [[hooks]] table by hand, then rerun.",
                )
            added += ("\n" if text.strip() or added else "") + kimi_hook_table(event, agent)
            expected.append(wanted)
        if not added:
            return None
        new = text + ("\n" if text and not text.endswith("\n") else "") + added
        return checked_toml(
            path,
            new,
            {**doc, "hooks": expected},
            "hooks (an inline array, or a table after which appended tables would land)",
            "Add this yourself:\n" + added,
        )

    return transform


def register_kimi_hooks(agent: str, dry_run: bool, force: bool) -> list[str]:
    path = kimi_config_file()
    outcome = apply_edit(path, kimi_hooks_transform(path, agent, force), dry_run)
    return [outcome.line("kimi", f"hook {', '.join(KIMI_HOOK_EVENTS)} (agent {agent})", dry_run)]


def register_gemini_hooks(agent: str, dry_run: bool, force: bool) -> list[str]:
    path = gemini_file()
    transform = json_hooks_transform("gemini", path, agent, force, GEMINI_HOOK_EVENTS)
    what = f"hooks {', '.join(GEMINI_HOOK_EVENTS)} (agent {agent})"
    return [apply_edit(path, transform, dry_run).line("gemini", what, dry_run)]


HOOK_WRITERS = {
    "claude": register_claude_hooks,
    "kimi": register_kimi_hooks,
    "codex": register_codex_hooks,
    "gemini": register_gemini_hooks,
}


def kimi_file() -> Path:
    base = os.environ.get("KIMI_CODE_HOME")
    return Path(base) / "mcp.json" if base else _home() / ".kimi-code" / "mcp.json"


def register_kimi(reg: Registration, dry_run: bool, force: bool) -> list[str]:
    path = kimi_file()
    wanted = {**_stdio(reg), "startupTimeoutMs": KIMI_STARTUP_TIMEOUT_MS}
    transform = json_entry_transform(
        "kimi", path, ["mcpServers", SERVER_NAME], wanted, ("command", "args", "env"), force
    )
    return [apply_edit(path, transform, dry_run).line("kimi", f"MCP server {SERVER_NAME} (agent {reg.agent})", dry_run)]


def gemini_file() -> Path:
    base = os.environ.get("GEMINI_CLI_HOME")
    return (Path(base) if base else _home()) / ".gemini" / "settings.json"


def register_gemini(reg: Registration, dry_run: bool, force: bool) -> list[str]:
    path = gemini_file()
    wanted = {**_stdio(reg), "trust": True}
    transform = json_entry_transform(
        "gemini", path, ["mcpServers", SERVER_NAME], wanted, ("command", "args", "env", "trust"), force
    )
    return [
        apply_edit(path, transform, dry_run).line("gemini", f"MCP server {SERVER_NAME} (agent {reg.agent})", dry_run)
    ]


def opencode_file() -> Path:
    """opencode's global config: ``$XDG_CONFIG_HOME/opencode/opencode.json`` (default ``~/.config``)."""
    base = os.environ.get("XDG_CONFIG_HOME")
    return (Path(base) if base else _home() / ".config") / "opencode" / "opencode.json"


def opencode_entry(reg: Registration) -> dict:
    """The bridge as opencode's local MCP server (``mcp.agent_bridge``): one argv list, ``environment``."""
    return {"type": "local", "command": [reg.command, *reg.args], "environment": dict(reg.env), "enabled": True}


def register_opencode(reg: Registration, dry_run: bool, force: bool) -> list[str]:
    path = opencode_file()
    transform = json_entry_transform(
        "opencode", path, ["mcp", SERVER_NAME], opencode_entry(reg), ("type", "command", "environment"), force
    )
    return [
        apply_edit(path, transform, dry_run).line("opencode", f"MCP server {SERVER_NAME} (agent {reg.agent})", dry_run)
    ]


# --- Codex: config.toml, edited as text ------------------------------------------------------


def codex_file() -> Path:
    base = os.environ.get("CODEX_HOME")
    return (Path(base) if base else _home() / ".codex") / "config.toml"


def _toml_str(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)  # a JSON string is a TOML basic string (checked by re-parsing)


def codex_table(reg: Registration) -> str:
    env = ", ".join(f"{_toml_str(k)} = {_toml_str(v)}" for k, v in reg.env.items())
    return (
        f"[mcp_servers.{SERVER_NAME}]\n"
        f"command = {_toml_str(reg.command)}\n"
        f"args = [{', '.join(_toml_str(a) for a in reg.args)}]\n"
        f"env = {{ {env} }}\n"
        "required = true\n"
    )


_HEADER = re.compile(r"^\s*\[\[?\s*([^\[\]]+?)\s*\]\]?\s*(#.*)?$")
_OURS = re.compile(rf"^mcp_servers\s*\.\s*(?:{SERVER_NAME}|\"{SERVER_NAME}\"|'{SERVER_NAME}')\s*(?:\..*)?$")


def _cut_our_tables(text: str) -> str:
    """The text without the [mcp_servers.agent_bridge] table and its sub-tables (header to next header)."""
    kept, skipping = [], False
    for line in text.splitlines(keepends=True):
        header = _HEADER.match(line)
        if header:
            skipping = bool(_OURS.match(header.group(1)))
        if not skipping:
            kept.append(line)
    return "".join(kept)


def codex_transform(reg: Registration, path: Path, force: bool) -> Callable[[str | None], str | None]:
    wanted = {**_stdio(reg), "required": True}

    def transform(text: str | None) -> str | None:
        text = text or ""
        doc = parse_toml(path, text)
        servers = doc.get("mcp_servers", {})
        existing = servers.get(SERVER_NAME) if isinstance(servers, dict) else None
        if _same(existing, wanted, ("command", "args", "env", "required")):
            return None
        if existing is not None and not force:
            raise _conflict("codex", path, f"[mcp_servers.{SERVER_NAME}]", existing, wanted)
        rest = _cut_our_tables(text) if existing is not None else text
        if rest and not rest.endswith("\n"):
            rest += "\n"
        new = rest + ("\n" if rest.strip() else "") + codex_table(reg)
        expected = dict(doc)
        expected["mcp_servers"] = {**(servers if isinstance(servers, dict) else {}), SERVER_NAME: wanted}
        return checked_toml(
            path,
            new,
            expected,
            f"mcp_servers or {SERVER_NAME} (inline or dotted keys)",
            "Remove that definition by hand, or add this table yourself:\n" + codex_table(reg),
        )

    return transform


def register_codex(reg: Registration, dry_run: bool, force: bool) -> list[str]:
    path = codex_file()
    outcome = apply_edit(path, codex_transform(reg, path, force), dry_run)
    return [outcome.line("codex", f"MCP server {SERVER_NAME} (agent {reg.agent})", dry_run)]


WRITERS = {
    "claude": register_claude,
    "kimi": register_kimi,
    "codex": register_codex,
    "gemini": register_gemini,
    "opencode": register_opencode,
}


def register(
    cli: str, agent: str, *, dry_run: bool = False, force: bool = False, statusline: bool = False, hooks: bool = False
) -> list[str]:
    """Register this installation for ``cli`` as ``agent`` (declared: checked by the caller). Lines to print."""
    if statusline and cli != "claude":
        raise BridgeError("usage_error", "--statusline is for Claude Code only; drop it or use `register claude`.")
    if hooks and cli not in HOOK_WRITERS:
        raise BridgeError(
            "usage_error", f"--hooks: {cli} has no hook that can put text in front of the model; drop it."
        )
    if hooks:
        HOOK_WRITERS[cli](agent, True, force)  # a hook conflict refuses the whole command before any write
    reg = server_registration(agent)
    lines = WRITERS[cli](reg, dry_run, force)
    if statusline:
        lines += register_claude_statusline(dry_run, force)
    if hooks:
        lines += HOOK_WRITERS[cli](agent, dry_run, force)
    return lines
