"""Codex's registration: ``[mcp_servers.agent_bridge]`` in ~/.codex/config.toml (edited with
tomlkit: the user's comments and tables stay), hooks in hooks.json beside it, and
``[features] hooks = true`` (Codex runs no hooks without it; once written it is the user's)."""

import json
import os
from pathlib import Path

from dispatcher.clis import codex
from dispatcher.clis.config_files import (
    HOOK_TIMEOUT_SECONDS,
    SERVER_NAME,
    Registration,
    Transform,
    appended,
    apply_edit,
    check_agent,
    checked_toml,
    conflict,
    edited_by_hand,
    home,
    hook_command,
    json_hooks_removal,
    json_hooks_transform,
    parse_toml,
    plain,
    read_text,
    removal_line,
    same,
    toml_table,
    toml_text,
)
from dispatcher.core.errors import BridgeError

HOOK_EVENTS = codex.CLI.hook_events
HEADER = f"mcp_servers.{SERVER_NAME}"


def config_file() -> Path:
    base = os.environ.get("CODEX_HOME")
    return (Path(base) if base else home() / ".codex") / "config.toml"


def hooks_file() -> Path:
    return config_file().with_name("hooks.json")


def files() -> list[Path]:
    return [config_file(), hooks_file()]


def _servers(path: Path, doc: dict) -> dict:
    servers = doc.get("mcp_servers", {})
    if not isinstance(servers, dict):
        raise BridgeError(
            "registration_file_invalid",
            f"{path}: 'mcp_servers' is not a table; fix it, then rerun. Nothing was changed.",
        )
    return servers


def server_transform(reg: Registration, path: Path, force: bool) -> Transform:
    wanted = {**reg.stdio(), "required": True}
    table = toml_table(wanted)

    def transform(text: str | None) -> str | None:
        doc = parse_toml(path, text or "")
        before = plain(doc)
        servers = _servers(path, before)
        existing = servers.get(SERVER_NAME)
        if same(existing, wanted, ("command", "args", "env", "required")):
            return None
        if existing is not None and not force:
            raise conflict("codex", path, f"[{HEADER}]", existing, wanted)
        table_text = toml_text(table, "mcp_servers", SERVER_NAME)
        instead = "Remove that definition by hand, or add this table yourself:\n" + table_text
        what = f"mcp_servers or {SERVER_NAME} (inline or dotted keys)"
        if "mcp_servers" in doc and (
            edited_by_hand(doc, "mcp_servers") or edited_by_hand(doc["mcp_servers"], SERVER_NAME)
        ):
            raise BridgeError(
                "registration_file_invalid",
                f"{path} defines {what} in a form this command does not edit; nothing was changed. {instead}",
            )
        if existing is not None:  # --force: our old table (and its sub-tables) out, the rest as it was
            del doc["mcp_servers"][SERVER_NAME]
        expected = {**before, "mcp_servers": {**servers, SERVER_NAME: wanted}}
        return checked_toml(path, appended(doc.as_string(), table_text), expected, what, instead)

    return transform


def _spaced(text: str) -> str:
    """tomlkit's text, with a blank line before a table header that follows a line directly."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    for line in lines:
        if line.startswith("[") and out and out[-1].strip() and not out[-1].lstrip().startswith("#"):
            out.append("\n")
        out.append(line)
    return "".join(out)


def register(reg: Registration, dry_run: bool, force: bool) -> list[str]:
    path = config_file()
    outcome = apply_edit(path, server_transform(reg, path, force), dry_run)
    return [outcome.line("codex", f"MCP server {SERVER_NAME} (agent {reg.agent})", dry_run)]


def features_transform(path: Path) -> Transform:
    """``[features] hooks = true`` in config.toml (hooks are off without it); an explicit
    ``hooks = false`` is the user's choice and is refused."""

    def transform(text: str | None) -> str | None:
        doc = parse_toml(path, text or "")
        before = plain(doc)
        features = before.get("features", {})
        if isinstance(features, dict) and features.get("hooks") is True:
            return None
        if not isinstance(features, dict) or "hooks" in features:
            raise BridgeError(
                "registration_conflict",
                f"{path} sets features.hooks to {json.dumps(features.get('hooks') if isinstance(features, dict) else features)}; "
                "Codex runs no hooks without `hooks = true` under [features]. Change it yourself, then rerun.",
            )
        if "features" in doc and edited_by_hand(doc, "features"):
            raise BridgeError(
                "registration_file_invalid",
                f"{path} defines [features] in a form this command does not edit; nothing was changed. "
                "Add `hooks = true` under [features] yourself, then rerun.",
            )
        if "features" in doc:
            doc["features"].add("hooks", True)
        else:
            doc.append("features", toml_table({"hooks": True}))
        expected = {**before, "features": {**features, "hooks": True}}
        return checked_toml(
            path,
            _spaced(doc.as_string()),
            expected,
            "[features]",
            "Add `hooks = true` under [features] yourself, then rerun.",
        )

    return transform


def register_hooks(agent: str, dry_run: bool, force: bool) -> list[str]:
    config, hooks_path = config_file(), hooks_file()
    features = features_transform(config)
    wanted = {
        event: {"type": "command", "command": hook_command("codex", event, agent), "timeout": HOOK_TIMEOUT_SECONDS}
        for event in HOOK_EVENTS
    }
    hooks = json_hooks_transform("codex", hooks_path, force, wanted)
    features(read_text(Path(os.path.realpath(config))))  # refuse before writing either file
    return [
        apply_edit(hooks_path, hooks, dry_run).line(
            "codex", f"hooks {', '.join(HOOK_EVENTS)} (agent {agent})", dry_run
        ),
        apply_edit(config, features, dry_run).line("codex", "[features] hooks = true", dry_run),
        "codex: Codex runs a new or changed hook only after you trust it: review it once in the Codex TUI "
        "(/hooks); `codex exec` runs untrusted hooks only with --dangerously-bypass-hook-trust.",
    ]


def server_removal(path: Path, agent: str | None) -> Transform:
    """Take the ``[mcp_servers.agent_bridge]`` table (and its sub-tables) out of config.toml."""

    def transform(text: str | None) -> str | None:
        doc = parse_toml(path, text or "")
        before = plain(doc)
        servers = before.get("mcp_servers")
        if not isinstance(servers, dict) or SERVER_NAME not in servers:
            return None
        check_agent("codex", path, servers[SERVER_NAME], agent)
        what, instead = f"[{HEADER}] (inline or dotted keys)", "Remove it by hand."
        if edited_by_hand(doc, "mcp_servers") or edited_by_hand(doc["mcp_servers"], SERVER_NAME):
            raise BridgeError(
                "registration_file_invalid",
                f"{path} defines {what} in a form this command does not edit; nothing was changed. {instead}",
            )
        del doc["mcp_servers"][SERVER_NAME]
        expected = {**before, "mcp_servers": {k: v for k, v in servers.items() if k != SERVER_NAME}}
        if not expected["mcp_servers"]:
            del expected["mcp_servers"]
            if not doc["mcp_servers"].unwrap():
                del doc["mcp_servers"]
        return checked_toml(path, doc.as_string(), expected, what, instead)

    return transform


def unregister(agent: str | None) -> list[str]:
    config, hooks = config_file(), hooks_file()
    return [
        removal_line("codex", config, server_removal(config, agent), f"MCP server {SERVER_NAME}"),
        removal_line("codex", hooks, json_hooks_removal("codex", hooks, agent), "hooks"),
    ]
