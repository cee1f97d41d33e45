"""Editing an agent CLI's own config files safely: what every CLI's registration shares.

One shared helper (``apply_edit``) does the edit the same way for every file: nothing is
written when the text would not change (a rerun says so), ``--dry-run`` prints a unified diff
and writes nothing, an existing file is copied first to ``<file>.bak-<timestamp>`` (0600), and
the new text replaces the file atomically (a temporary file in the same directory, then
``os.replace``). A file it creates is 0600, a directory it creates 0700. Each CLI's
``registration.py`` supplies ``transform`` functions from the file's text to the new text.

An entry named ``agent_bridge`` that is already there but differs from ours (another command,
agent id or store) is refused with ``registration_conflict`` unless ``--force``.

TOML files (Codex's and Kimi Code's config.toml) are edited with ``tomlkit``, which keeps every
comment and byte it is not told to change, and can take our own tables out again (``--force``
replaces them, ``unregister`` removes them). The result is parsed back with ``tomllib`` and must
equal the old document with just our entries changed, or nothing is written. A definition of
ours in a form this does not edit (an inline table, dotted keys) is refused, saying what to do.
"""

import difflib
import json
import os
import re
import shlex
import shutil
import sys
import time
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dispatcher.core import clock
from dispatcher.core.errors import BridgeError
from dispatcher.core.locations import absolute_setting
from dispatcher.core.private_files import write_atomically

SERVER_NAME = "agent_bridge"
HOOK_TIMEOUT_SECONDS = 10
STATUSLINE_REFRESH_SECONDS = 2
Transform = Callable[[str | None], str | None]


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

    def stdio(self) -> dict:
        return {"command": self.command, "args": self.args, "env": self.env}


def home() -> Path:
    return Path(os.path.expanduser("~"))


def read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise BridgeError("file_unavailable", f"cannot read {path} ({exc}); nothing was changed.") from None


def make_dirs(directory: Path) -> None:
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


def apply_edit(path: Path, transform: Transform, dry_run: bool) -> Outcome:
    """Edit one config file safely: ``transform`` maps its text (None: no file) to the new text (None: as is)."""
    path = Path(os.path.realpath(path))  # a linked dotfile is edited where it lives, the link is kept
    old = read_text(path)
    new = transform(old)
    if new is None or new == old:
        return Outcome(path, changed=False)
    outcome = Outcome(path, changed=True, diff=diff_text(path, old, new), created=old is None)
    if dry_run:
        return outcome
    try:
        if old is None:
            make_dirs(path.parent)
            mode = 0o600
        else:
            mode = os.stat(path).st_mode & 0o7777
            outcome.backup = backup_copy(path, old)
        write_atomically(path, new, mode)
    except OSError as exc:
        raise BridgeError("file_unavailable", f"cannot write {path} ({exc}); the file was left as it was.") from None
    return outcome


def removal_line(cli: str, path: Path, transform: Transform, what: str) -> str:
    """Apply a removal (``unregister``) and say what it did."""
    outcome = apply_edit(path, transform, dry_run=False)
    if not outcome.changed:
        return f"{cli}: no {what} of agent-bridge in {outcome.path}; nothing changed."
    return f"{cli}: removed {what} from {outcome.path} (backup {outcome.backup})."


# --- conflicts -------------------------------------------------------------------------------


def conflict(cli: str, path: Path, key: str, existing: object, wanted: object) -> BridgeError:
    return BridgeError(
        "registration_conflict",
        f"{path} already has {key} = {json.dumps(existing, sort_keys=True)}, which differs from this "
        f"installation's {json.dumps(wanted, sort_keys=True)}; nothing was changed. Rerun "
        f"`agent-bridge register {cli} ... --force` to replace it (the file is backed up first), "
        "or remove that entry yourself.",
    )


def same(existing: object, wanted: dict, keys: tuple[str, ...]) -> bool:
    return isinstance(existing, dict) and all(existing.get(k) == wanted.get(k) for k in keys)


def server_agent(entry: object) -> str | None:
    env = entry.get("env") if isinstance(entry, dict) else None
    value = env.get("AGENT_ID") if isinstance(env, dict) else None
    return value if isinstance(value, str) else None


def check_agent(cli: str, path: Path, entry: object, agent: str | None) -> None:
    """``unregister --agent`` refuses an entry registered for another agent."""
    registered = server_agent(entry)
    if agent is not None and registered is not None and registered != agent:
        raise BridgeError(
            "registration_conflict",
            f"{path} registers {SERVER_NAME} as agent {registered}, not {agent}; nothing was changed. "
            f"Run `agent-bridge unregister {cli} --agent {registered}`, or `agent-bridge uninstall` to remove every one.",
        )


# --- JSON files ------------------------------------------------------------------------------


def load_json_object(path: Path, text: str | None) -> dict:
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


def json_dump(data: dict) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def json_entry_transform(
    cli: str, path: Path, keys: list[str], wanted: dict, compare: tuple[str, ...], force: bool
) -> Transform:
    """Set ``data[keys[0]]...[keys[-1]] = wanted`` unless an equal one (on ``compare``) is there."""

    def transform(text: str | None) -> str | None:
        data = load_json_object(path, text)
        parent = data
        for k in keys[:-1]:
            parent = parent.setdefault(k, {})
            if not isinstance(parent, dict):
                raise BridgeError(
                    "registration_file_invalid",
                    f"{path}: {k!r} is not a JSON object; fix it, then rerun. Nothing was changed.",
                )
        existing = parent.get(keys[-1])
        if same(existing, wanted, compare):
            return None
        if existing is not None and not force:
            raise conflict(cli, path, ".".join(keys), existing, wanted)
        parent[keys[-1]] = wanted
        return json_dump(data)

    return transform


def json_hooks_transform(
    cli: str,
    path: Path,
    force: bool,
    wanted_for: Mapping[str, dict],
    older: Callable[[dict, str], bool] | None = None,
    upgraded: list[str] | None = None,
) -> Transform:
    """Add one command hook per event (``wanted_for``: event -> entry) to ``hooks.<Event>``
    (Claude's settings.json, Codex's hooks.json, Gemini's settings.json: the same shape); every
    other hook is kept as it is.

    Ours is a command hook running ``agent-bridge hook <cli>``; an equal one is left alone, a
    different one (another agent, store or path) is refused unless ``force`` replaces it, or
    ``older`` says it is an earlier form of ours to upgrade (its event goes to ``upgraded``)."""

    def transform(text: str | None) -> str | None:
        data = load_json_object(path, text)
        hooks = data.setdefault("hooks", {})
        if not isinstance(hooks, dict):
            raise BridgeError(
                "registration_file_invalid",
                f"{path}: 'hooks' is not a JSON object; fix it, then rerun. Nothing was changed.",
            )
        changed = False
        for event, wanted in wanted_for.items():
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
            is_older = older is not None and len(ours) == 1 and older(ours[0][1], event)
            if ours and not force and not is_older:
                raise conflict(cli, path, f"hooks.{event}", [h for _, h in ours], wanted)
            if is_older and upgraded is not None:
                upgraded.append(event)
            for group, entry in ours:
                group["hooks"].remove(entry)
            groups[:] = [g for g in groups if not (isinstance(g, dict) and g.get("hooks") == [])]
            groups.append({"hooks": [wanted]})
            changed = True
        return json_dump(data) if changed else None

    return transform


def json_server_removal(cli: str, path: Path, agent: str | None) -> Transform:
    """Take ``mcpServers.agent_bridge`` out of a JSON config (Claude, Kimi Code, Gemini)."""

    def transform(text: str | None) -> str | None:
        data = load_json_object(path, text)
        servers = data.get("mcpServers")
        if not isinstance(servers, dict) or SERVER_NAME not in servers:
            return None
        check_agent(cli, path, servers[SERVER_NAME], agent)
        del servers[SERVER_NAME]
        return json_dump(data)

    return transform


def json_hooks_removal(cli: str, path: Path, agent: str | None) -> Transform:
    """Take this installation's command hooks out of ``hooks.<Event>``; a group or event left
    empty by that goes too."""

    def transform(text: str | None) -> str | None:
        data = load_json_object(path, text)
        hooks = data.get("hooks")
        if not isinstance(hooks, dict):
            return None
        changed = False
        for event, groups in list(hooks.items()):
            if not isinstance(groups, list):
                continue
            kept_groups = []
            for group in groups:
                entries = group.get("hooks") if isinstance(group, dict) else None
                kept = [
                    h for h in entries or [] if not (isinstance(h, dict) and is_ours_for(h.get("command"), cli, agent))
                ]
                if not isinstance(entries, list) or len(kept) == len(entries):
                    kept_groups.append(group)
                    continue
                changed = True
                if kept:
                    kept_groups.append({**group, "hooks": kept})
            groups[:] = kept_groups
            if not groups:
                del hooks[event]
        if not changed:
            return None
        if not hooks:
            del data["hooks"]
        return json_dump(data)

    return transform


# --- TOML files (tomlkit: comments and every other byte kept) --------------------------------


def parse_toml(path: Path, text: str) -> Any:
    """A CLI's TOML config as a ``tomlkit`` document, or one clear refusal that changes nothing."""
    import tomlkit
    from tomlkit.exceptions import TOMLKitError

    try:
        tomllib.loads(text)  # the CLIs' own reading of the file decides whether it is valid
        return tomlkit.parse(text)
    except (tomllib.TOMLDecodeError, TOMLKitError) as exc:
        raise BridgeError(
            "registration_file_invalid", f"{path} is not valid TOML ({exc}); fix it, then rerun. Nothing was changed."
        ) from None


def plain(doc: Any) -> Any:
    """A tomlkit document (or item) as plain Python values."""
    return doc.unwrap() if hasattr(doc, "unwrap") else doc


def edited_by_hand(container: Any, key: str) -> bool:
    """Whether ``key`` in a tomlkit table is in a form this does not edit: an inline table (or one
    inside an inline table) or dotted keys (``agent_bridge.command = ...``)."""
    from tomlkit.items import InlineTable

    if isinstance(container, InlineTable) or isinstance(container.get(key), InlineTable):
        return True
    body = getattr(getattr(container, "value", container), "body", [])
    return any(k is not None and k.key == key and k.is_dotted() for k, _ in body)


def checked_toml(path: Path, new: str, expected: dict, what: str, instead: str) -> str:
    """``new`` (an edit of a TOML file) when it parses to exactly ``expected``: an edit this did not
    get right is refused, saying what to do ``instead``."""
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


def toml_table(values: Mapping[str, Any]) -> Any:
    """A tomlkit table of ``values`` (a dict value becomes an inline table: one table of ours to cut out)."""
    import tomlkit

    table = tomlkit.table()
    for key, value in values.items():
        if isinstance(value, dict):
            inline = tomlkit.inline_table()
            inline.update(value)
            table.add(key, inline)
        else:
            table.add(key, value)
    return table


def toml_text(table: Any, *keys: str) -> str:
    """How ``table`` reads as ``[keys[0].keys[1]...]``, to append to a file or to add by hand."""
    import tomlkit

    doc = tomlkit.document()
    parent: Any = doc
    for key in keys[:-1]:
        outer = tomlkit.table(is_super_table=True)
        parent.append(key, outer)
        parent = outer
    parent.append(keys[-1], table)
    return tomlkit.dumps(doc)


def appended(text: str, table_text: str) -> str:
    """``table_text`` after the whole of ``text``, a blank line between: every byte before it kept."""
    if text and not text.endswith("\n"):
        text += "\n"
    return text + ("\n" if text.strip() else "") + table_text


# --- commands the CLIs run: hooks and the status line ----------------------------------------


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


def setting_words(names: tuple[str, ...], environ: Mapping[str, str] | None = None) -> list[str]:
    """``NAME=/absolute/path`` shell words for each of ``names`` set in ``environ`` (default: ours):
    how a command the CLI runs through its shell reaches the store and files ``register`` was given."""
    environ = os.environ if environ is None else environ
    return [f"{name}={shlex.quote(absolute_setting(environ[name]))}" for name in names if environ.get(name)]


def hook_command(cli: str, event: str, agent: str, environ: Mapping[str, str] | None = None) -> str:
    """The shell command a CLI runs for ``event``: the store and runtime directory in use, then
    ``agent-bridge hook <cli> <event> --agent <agent>`` (the CLI's own environment has no AGENT_ID)."""
    words = setting_words(("AGENT_BRIDGE_DB", "AGENT_BRIDGE_RUNTIME_DIR"), environ)
    words += [shlex.quote(installed_script("agent-bridge")), "hook", cli, event, "--agent", agent]
    return " ".join(words)


_OUR_HOOK = re.compile(r"agent-bridge\S*\s+hook\s+([a-z][a-z0-9_-]*)(?![a-z0-9_-])")
_HOOK_AGENT = re.compile(r"\s--agent\s+(\S+)")


def is_our_hook(command: object, cli: str) -> bool:
    found = _OUR_HOOK.search(command) if isinstance(command, str) else None
    return found is not None and found.group(1) == cli


def hook_agent(command: str) -> str | None:
    """The ``--agent`` a hook command of ours runs for."""
    found = _HOOK_AGENT.search(command)
    return found.group(1) if found else None


def is_ours_for(command: object, cli: str, agent: str | None) -> bool:
    """A hook of this installation for ``cli`` (and ``agent``, unless None: every agent)."""
    return is_our_hook(command, cli) and (agent is None or hook_agent(str(command)) == agent)


# What the status line reads: the agents from the config, their progress from the runtime
# directory, their unread counts from the store.
STATUSLINE_SETTINGS = ("AGENT_BRIDGE_DB", "AGENT_BRIDGE_CONFIG", "AGENT_BRIDGE_RUNTIME_DIR")


def statusline_command(environ: Mapping[str, str] | None = None) -> str:
    """``agent-bridge-statusline`` with the store, config and runtime directory given to ``register``
    (the CLI runs it with its own environment, which has none of them)."""
    return " ".join(
        [*setting_words(STATUSLINE_SETTINGS, environ), shlex.quote(installed_script("agent-bridge-statusline"))]
    )


def is_our_statusline(command: object) -> bool:
    """A status line command that runs this package's status line, after any ``NAME=value``
    settings ``statusline_command`` puts before it."""
    if not isinstance(command, str):
        return False
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    program = next((word for word in words if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", word)), "")
    return Path(program).name == "agent-bridge-statusline"
