"""opencode 1.18.33 (npm ``opencode-ai``): its permission rules per level and the pieces of its
worker configuration (``launch.py`` builds the run from them; ``results.py`` reads its events).

What enforces each level (checked end to end in tests/agent_clis/test_opencode_permissions.py):

- opencode's own ``permission`` rules, given in ``OPENCODE_PERMISSION``, the configuration
  layer opencode applies last (nothing the workspace or the user's files say overrides it).
  ``"*": "deny"`` comes first and the last matching rule wins, so only what is named is
  allowed. A tool whose last rule is a deny of ``*`` is not even offered to the model.
- ``bridge``: the bridge's worker tools, by name (``agent_bridge_<tool>``); nothing else.
- ``read``: also ``read`` (``*.env`` files stay denied, as opencode's defaults have it), and
  ``glob``/``grep`` when ripgrep is on PATH (without it opencode downloads it from GitHub).
  ``external_directory`` is denied, so a path outside the workspace (and the ``extra_dirs``)
  is refused; opencode's check is by the path's text, links are not resolved.
- ``edit``: also ``edit`` (opencode's ``edit``, ``write`` and ``apply_patch``), except into a
  ``.git`` directory or a protected path inside the workspace (``core.protected``).
- ``shell``: **refused (exit 78)**. opencode has no OS sandbox: its ``bash`` rules pick which
  commands run, but an allowed command writes wherever the user can (``python3 -c`` wrote
  outside the run directory; see docs/opencode.md).
- ``project``: the workspace's own ``opencode.json`` and ``.opencode/`` load and decide, as
  when a person runs ``opencode`` there (its defaults allow every tool; an ``ask`` ends a
  headless run). Only the two bridge tools no worker may see stay denied.

Below ``project`` the workspace's configuration is not loaded at all
(``OPENCODE_DISABLE_PROJECT_CONFIG=1``). At every level opencode runs with a private ``HOME``
and XDG directories in the attempt directory (so the user's ``~/.opencode``, plugins and
session store stay out), ``--pure`` (no external plugins), its session store in memory, and
no models-catalogue fetch.
"""

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dispatcher.clis.base import Enforcement
from dispatcher.clis.launch import Unenforceable
from dispatcher.core.permissions import NON_WORKER_BRIDGE_TOOLS, WORKER_BRIDGE_TOOLS, PermissionProfile

CLI = "opencode"
VERSION = "1.18.33"
BIN_ENV = "OPENCODE_BIN"
HOME_DIR = "opencode-home"
TMP_DIR = "tmp"
BRIDGE_SERVER = "agent_bridge"
PROVIDER = "agent_bridge_endpoint"  # the provider a base URL given to the launcher becomes
TITLE = "agent-bridge-worker"  # given, so opencode makes no extra title request with the task text
READ_TOOLS = ("read",)
SEARCH_TOOLS = ("glob", "grep")  # need ripgrep
EDIT_TOOL = "edit"  # covers edit, write and apply_patch
# opencode offers these generic MCP-resource readers whenever ``read`` is allowed (they ask the
# ``read`` permission with patterns ``mcp:<server>:<uri>``); denied by pattern, they only reach the
# bridge, which serves no resources.
MCP_RESOURCE_TOOLS = ("list_mcp_resources", "list_mcp_resource_templates", "read_mcp_resource")
MCP_RESOURCE_RULES = {"mcp:*": "deny"}
# What opencode's default agent denies to read, kept at every level that reads.
ENV_FILE_RULES = {"*.env": "deny", "*.env.*": "deny", "*.env.example": "allow"}
# The plugin package opencode otherwise installs with npm into each config dir at every start.
PLUGIN_PACKAGE = "@opencode-ai/plugin"


def bridge_tool_names() -> list[str]:
    """The bridge's worker tools as opencode names them (``<server>_<tool>``)."""
    return [f"{BRIDGE_SERVER}_{tool}" for tool in WORKER_BRIDGE_TOOLS]


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _edit_rules(workspace: Path, protected: Sequence[str], worktree: Path, links_out: Sequence[str]) -> dict[str, str]:
    """``edit`` patterns (opencode matches the path relative to the git worktree root, ``*``
    spans ``/``): allowed, except a ``.git`` directory anywhere, protected paths inside the
    workspace (the others are outside it, where ``external_directory`` already refuses) and
    the links that lead out of it."""
    rules = {"*": "allow"}
    for git in (".git", ".git/*", "*/.git", "*/.git/*"):
        rules[git] = "deny"
    for raw in protected:
        path = Path(raw)
        if _inside(path, workspace) and path != workspace:
            rules.update(dict.fromkeys(_patterns(path, worktree), "deny"))
    rules.update(dict.fromkeys(_link_patterns(workspace, worktree, links_out), "deny"))
    return rules


def _patterns(path: Path, worktree: Path) -> list[str]:
    """A path and everything under it, as opencode's read and edit rules name them."""
    rel = os.path.relpath(path, worktree)
    return [rel, f"{rel}/*"]


def _link_patterns(workspace: Path, worktree: Path, links_out: Sequence[str]) -> list[str]:
    return [pattern for rel in links_out for pattern in _patterns(workspace / rel, worktree)]


def worktree_root(workspace: Path) -> Path:
    """What opencode takes as the project's worktree (its rules' paths are relative to it): the
    nearest directory up from the workspace that holds a ``.git``, else ``/``."""
    for directory in (workspace, *workspace.parents):
        if os.path.lexists(directory / ".git"):
            return directory
    return Path("/")


MAX_SCANNED = 200_000


def links_leading_out(workspace: Path, roots: Sequence[Path]) -> list[str]:
    """The symlinks in the workspace (``.git`` skipped) whose target, resolved, is outside every
    root: opencode checks paths by their text, so a file tool would follow them out. Raises
    ``Unenforceable`` past ``MAX_SCANNED`` entries."""
    real_roots = [Path(os.path.realpath(root)) for root in roots]
    found: list[str] = []
    seen = 0
    for directory, dirs, files in os.walk(workspace):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in [*dirs, *files]:
            seen += 1
            path = Path(directory) / name
            if path.is_symlink():
                target = Path(os.path.realpath(path))
                if not any(_inside(target, root) for root in real_roots):
                    found.append(path.relative_to(workspace).as_posix())
        if seen > MAX_SCANNED:
            raise Unenforceable(
                f"the workspace holds more than {MAX_SCANNED} entries, too many to find every link that leads "
                "out of it (opencode would follow one): use a smaller workspace"
            )
    return sorted(found)


def permission_rules(
    profile: PermissionProfile,
    workspace: Path,
    protected: Sequence[str] = (),
    ripgrep: bool = False,
    *,
    worktree: Path | None = None,
    links_out: Sequence[str] = (),
) -> dict[str, Any]:
    """``OPENCODE_PERMISSION`` for this level (pure); raises ``Unenforceable`` at ``shell``.
    ``links_out``: the workspace's links that lead out of it (``links_leading_out``), denied to
    the file tools; ``worktree``: what opencode's rule paths are relative to (``worktree_root``)."""
    worktree = worktree or Path("/")
    if profile.level == "shell":
        raise Unenforceable(f"{SHELL_REFUSAL}: use level edit (or another CLI for shell work)")
    hidden = {f"{BRIDGE_SERVER}_{tool}": "deny" for tool in NON_WORKER_BRIDGE_TOOLS}
    if profile.level == "project":
        return hidden
    rules: dict[str, Any] = {"*": "deny"}
    rules.update(dict.fromkeys(bridge_tool_names(), "allow"))
    if profile.level in ("read", "edit"):
        link_rules = dict.fromkeys(_link_patterns(workspace, worktree, links_out), "deny")
        rules["read"] = {"*": "allow", **ENV_FILE_RULES, **MCP_RESOURCE_RULES, **link_rules}
        if ripgrep:
            rules.update(dict.fromkeys(SEARCH_TOOLS, "allow"))
        extra = {f"{directory.rstrip('/')}/*": "allow" for directory in profile.resolved().extra_dirs}
        rules["external_directory"] = {"*": "deny", **extra} if extra else "deny"
    if profile.level == "edit":
        rules[EDIT_TOOL] = _edit_rules(workspace, protected, worktree, links_out)
    rules.update(hidden)
    return rules


def mcp_entry(server: Mapping[str, Any], home: str | None) -> dict[str, Any]:
    """The bridge as opencode's local MCP server (``worker_mcp.bridge_server``'s entry). It gets
    opencode's whole environment; ``HOME`` is given back the user's (opencode's is private)."""
    environment = dict(server["env"])
    if home:
        environment["HOME"] = home
    return {
        "type": "local",
        "command": [server["command"], *server["args"]],
        "environment": environment,
        "enabled": True,
        "timeout": 120_000,  # ms: the start wait and each tool call's timeout
    }


def provider_block(base_url: str, model: str, key_env: str | None, price: str | None) -> dict[str, Any]:
    """An OpenAI-compatible provider for a base URL given to the launcher (pure). ``price``:
    ``"<input>,<output>"`` USD per million tokens, so opencode reports a cost."""
    entry: dict[str, Any] = {"name": model, "tool_call": True}
    if price:
        try:
            cost_in, cost_out = (float(part) for part in price.split(","))
        except ValueError as exc:
            raise ValueError(
                f"AGENT_BRIDGE_OPENCODE_PRICE must be '<input>,<output>' USD per million tokens, got {price!r}"
            ) from exc
        entry["cost"] = {"input": cost_in, "output": cost_out}
    options: dict[str, Any] = {"baseURL": base_url}
    options["apiKey"] = "{env:" + key_env + "}" if key_env else ""
    return {
        PROVIDER: {
            "npm": "@ai-sdk/openai-compatible",
            "name": "Agent Bridge endpoint",
            "options": options,
            "models": {model: entry},
        }
    }


def user_model_settings(user_config: Any) -> dict[str, Any]:
    """The keys of the user's own global opencode config the worker keeps: which model and the
    providers (nothing else: not their MCP servers, permissions, plugins or instructions)."""
    if not isinstance(user_config, dict):
        return {}
    return {key: user_config[key] for key in ("model", "small_model", "provider") if key in user_config}


def config_document(
    profile: PermissionProfile, mcp: Mapping[str, Any], model_settings: Mapping[str, Any]
) -> dict[str, Any]:
    """The worker's ``opencode.json`` (its private global config)."""
    document: dict[str, Any] = {
        "$schema": "https://opencode.ai/config.json",
        **model_settings,
        "mcp": {BRIDGE_SERVER: dict(mcp)},
        "share": "disabled",
        "autoupdate": False,
        "snapshot": False,
    }
    if profile.level == "project":  # the workspace's own files may add to it; the rest is ours
        return document
    document["instructions"] = []
    return document


SHELL_REFUSAL = "opencode 1.18.33 has no OS sandbox, so level shell cannot keep an allowed command inside the workspace"


def enforcement(profile: PermissionProfile, which: Callable[[str], str | None]) -> Enforcement | None:
    """Doctor's view: ``shell`` never (no OS sandbox); ``project`` runs what the workspace's
    configuration allows, unconfined."""
    if profile.level == "shell":
        return Enforcement(
            "refused",
            why="it has no OS sandbox to keep an allowed command inside the workspace",
            fix="give opencode level edit (or project) in config.json, or use another CLI for shell work",
        )
    return Enforcement("unconfined") if profile.level == "project" else None
