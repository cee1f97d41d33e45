"""Kimi Code's registration: the MCP server in ~/.kimi-code/mcp.json, and a ``[[hooks]]`` table
per event in its config.toml (edited with tomlkit: the user's comments and hooks stay; ``--force``
replaces a different hook of ours, ``unregister`` takes ours out)."""

import os
from pathlib import Path

from dispatcher.clis import kimi
from dispatcher.clis.config_files import (
    HOOK_TIMEOUT_SECONDS,
    SERVER_NAME,
    Registration,
    Transform,
    appended,
    apply_edit,
    checked_toml,
    conflict,
    edited_by_hand,
    home,
    hook_command,
    is_ours_for,
    json_entry_transform,
    json_server_removal,
    parse_toml,
    plain,
    removal_line,
    toml_table,
    toml_text,
)
from dispatcher.core.errors import BridgeError

HOOK_EVENTS = kimi.CLI.hook_events
STARTUP_TIMEOUT_MS = 30000


def _home_dir() -> Path:
    base = os.environ.get("KIMI_CODE_HOME")
    return Path(base) if base else home() / ".kimi-code"


def mcp_file() -> Path:
    return _home_dir() / "mcp.json"


def config_file() -> Path:
    return _home_dir() / "config.toml"


def files() -> list[Path]:
    return [mcp_file(), config_file()]


def register(reg: Registration, dry_run: bool, force: bool) -> list[str]:
    path = mcp_file()
    wanted = {**reg.stdio(), "startupTimeoutMs": STARTUP_TIMEOUT_MS}
    transform = json_entry_transform(
        "kimi", path, ["mcpServers", SERVER_NAME], wanted, ("command", "args", "env"), force
    )
    return [apply_edit(path, transform, dry_run).line("kimi", f"MCP server {SERVER_NAME} (agent {reg.agent})", dry_run)]


def _hooks_array(path: Path, doc: dict) -> list:
    hooks = doc.get("hooks", [])
    if not isinstance(hooks, list):
        raise BridgeError(
            "registration_file_invalid",
            f"{path}: 'hooks' is not an array of tables; fix it, then rerun. Nothing was changed.",
        )
    return hooks


def _hook_tables(entries: list[dict]) -> str:
    """``[[hooks]]`` tables of ``entries``, as text to append."""
    return "\n".join("[[hooks]]\n" + toml_text(toml_table(entry), "hooks").split("\n", 1)[1] for entry in entries)


def hooks_transform(path: Path, agent: str, force: bool) -> Transform:
    """A ``[[hooks]]`` table per event in config.toml. An equal entry is left alone; a different
    one of ours is refused unless ``force``, which takes it out and adds ours."""

    def transform(text: str | None) -> str | None:
        import tomlkit

        doc = parse_toml(path, text or "")
        before = plain(doc)
        hooks = _hooks_array(path, before)
        wanted_all = {
            event: {"event": event, "command": hook_command("kimi", event, agent), "timeout": HOOK_TIMEOUT_SECONDS}
            for event in HOOK_EVENTS
        }
        instead = "Add this yourself:\n" + _hook_tables(list(wanted_all.values()))
        what = "hooks (an inline array, or a table after which appended tables would land)"
        expected, changed = list(hooks), False
        for event, wanted in wanted_all.items():
            ours = [
                h
                for h in hooks
                if isinstance(h, dict) and h.get("event") == event and is_ours_for(h.get("command"), "kimi", None)
            ]
            if ours == [wanted]:
                continue
            if ours and not force:
                raise conflict("kimi", path, f"[[hooks]] {event}", ours, wanted)
            expected = [h for h in expected if not any(h is o for o in ours)] + [wanted]
            changed = True
        if not changed:
            return None
        if "hooks" in doc and (edited_by_hand(doc, "hooks") or not isinstance(doc["hooks"], tomlkit.items.AoT)):
            raise BridgeError(
                "registration_file_invalid",
                f"{path} defines {what} in a form this command does not edit; nothing was changed. {instead}",
            )
        if "hooks" in doc:  # --force: our different hook out, every other byte as it was
            array = doc["hooks"]
            for index in reversed(range(len(array))):
                entry = array[index]
                if entry.get("event") in wanted_all and is_ours_for(entry.get("command"), "kimi", None):
                    del array[index]
            if not array:
                del doc["hooks"]
        kept = plain(doc).get("hooks", [])
        new_tables = _hook_tables([w for w in wanted_all.values() if w not in kept])
        return checked_toml(path, appended(doc.as_string(), new_tables), {**before, "hooks": expected}, what, instead)

    return transform


def register_hooks(agent: str, dry_run: bool, force: bool) -> list[str]:
    path = config_file()
    outcome = apply_edit(path, hooks_transform(path, agent, force), dry_run)
    return [outcome.line("kimi", f"hook {', '.join(HOOK_EVENTS)} (agent {agent})", dry_run)]


def hooks_removal(path: Path, agent: str | None) -> Transform:
    """Take this installation's ``[[hooks]]`` tables out of config.toml."""

    def transform(text: str | None) -> str | None:
        import tomlkit

        doc = parse_toml(path, text or "")
        before = plain(doc)
        hooks = before.get("hooks")
        if not isinstance(hooks, list):
            return None
        kept = [h for h in hooks if not (isinstance(h, dict) and is_ours_for(h.get("command"), "kimi", agent))]
        if len(kept) == len(hooks):
            return None
        what, instead = "its [[hooks]] (inline or dotted keys)", "Remove it by hand."
        if edited_by_hand(doc, "hooks") or not isinstance(doc["hooks"], tomlkit.items.AoT):
            raise BridgeError(
                "registration_file_invalid",
                f"{path} defines {what} in a form this command does not edit; nothing was changed. {instead}",
            )
        array = doc["hooks"]
        for index in reversed(range(len(array))):
            if is_ours_for(array[index].get("command"), "kimi", agent):
                del array[index]
        expected = {**before, "hooks": kept} if kept else {k: v for k, v in before.items() if k != "hooks"}
        if not kept:
            del doc["hooks"]
        return checked_toml(path, doc.as_string(), expected, what, instead)

    return transform


def unregister(agent: str | None) -> list[str]:
    mcp, config = mcp_file(), config_file()
    return [
        removal_line("kimi", mcp, json_server_removal("kimi", mcp, agent), f"MCP server {SERVER_NAME}"),
        removal_line("kimi", config, hooks_removal(config, agent), "hooks"),
    ]
