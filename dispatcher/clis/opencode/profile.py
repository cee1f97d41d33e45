"""opencode 1.18.33 (npm ``opencode-ai``) as a worker: its launch plan and its permission rules per
level (``launchers/opencode_headless.sh`` runs ``main``; ``results.py`` reads its events).

The launch plan is computed here, as pure functions of the profile and the attempt, and
``main`` carries it out: it writes the worker's private files into the attempt directory and
``exec``s opencode with the request file as stdin and the event stream into the attempt
directory, so the worker's process-group leader is opencode itself.

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

import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dispatcher.core.permissions import NON_WORKER_BRIDGE_TOOLS, WORKER_BRIDGE_TOOLS, PermissionProfile

CLI = "opencode"
VERSION = "1.18.33"
BIN_ENV = "OPENCODE_BIN"
OUTPUT = "opencode-events.jsonl"  # the CLI object's OUTPUT_FILE
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


class Unenforceable(ValueError):
    """A profile opencode cannot enforce (the launcher exits 78 with this message)."""


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
        raise Unenforceable(
            "opencode 1.18.33 has no OS sandbox, so level shell cannot keep an allowed command inside the "
            "workspace: use level edit (or another CLI for shell work)"
        )
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


@dataclass(frozen=True)
class LaunchPlan:
    argv: list[str]
    env: dict[str, str]  # set on top of the launcher's environment
    unset: tuple[str, ...]  # removed from it
    files: dict[str, str] = field(default_factory=dict)  # attempt-relative path -> content


def instruction(agent: str, message_id: str) -> str:
    """The fixed argv text; opencode appends stdin (the request file, with the task) after it."""
    return (
        f"You are the Agent Bridge worker for agent '{agent}', working on message {message_id}. "
        "The text below is your task: carry it out exactly as it says, using the agent_bridge tools."
    )


def launch_plan(
    binary: str,
    profile: PermissionProfile,
    env: Mapping[str, str],
    attempt_dir: Path,
    workspace: Path,
    server: Mapping[str, Any],
    *,
    user_config: Any = None,
    protected: Sequence[str] = (),
    ripgrep: bool = False,
    links_out: Sequence[str] = (),
) -> LaunchPlan:
    """argv, environment and files of one worker run (pure; raises ``Unenforceable``/``ValueError``).
    ``server``: the bridge's stdio server entry (``command``, ``args``, ``env``) as every launcher
    writes it (``write_bridge_mcp_config``, from ``dispatch/worker_mcp.py``)."""
    rules = permission_rules(
        profile, workspace, protected, ripgrep, worktree=worktree_root(workspace), links_out=links_out
    )
    model = env.get("AGENT_BRIDGE_OPENCODE_MODEL") or ""
    base_url = env.get("AGENT_BRIDGE_OPENCODE_BASE_URL")
    if base_url:
        if not model or "/" in model:
            raise ValueError("AGENT_BRIDGE_OPENCODE_BASE_URL needs AGENT_BRIDGE_OPENCODE_MODEL, the model id it serves")
        settings: dict[str, Any] = {
            "provider": provider_block(
                base_url, model, env.get("AGENT_BRIDGE_OPENCODE_ENV_KEY"), env.get("AGENT_BRIDGE_OPENCODE_PRICE")
            ),
            "model": f"{PROVIDER}/{model}",
            "small_model": f"{PROVIDER}/{model}",
        }
        model = f"{PROVIDER}/{model}"
    else:
        settings = user_model_settings(user_config)
    home = attempt_dir / HOME_DIR
    mcp = mcp_entry(server, env.get("HOME"))
    config = config_document(profile, mcp, settings)
    plugin_dir = f"{HOME_DIR}/.config/opencode"
    files = {
        f"{plugin_dir}/opencode.json": json.dumps(config, indent=2) + "\n",
        # Pre-seeded, so opencode does not npm-install its plugin package at start.
        f"{plugin_dir}/package.json": json.dumps({"dependencies": {PLUGIN_PACKAGE: "*"}}) + "\n",
        f"{plugin_dir}/package-lock.json": json.dumps(
            {"lockfileVersion": 3, "packages": {"": {"dependencies": {PLUGIN_PACKAGE: "*"}}}}
        )
        + "\n",
    }
    run_env = {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local/share"),
        "XDG_STATE_HOME": str(home / ".local/state"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "TMPDIR": str(attempt_dir / TMP_DIR),
        "OPENCODE_PERMISSION": json.dumps(rules),
        "OPENCODE_DB": ":memory:",
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_CLAUDE_CODE": "1",
    }
    unset = ["OPENCODE_CONFIG", "OPENCODE_CONFIG_CONTENT", "OPENCODE_CONFIG_DIR", "OPENCODE_AUTH_CONTENT"]
    if profile.level == "project":
        unset.append("OPENCODE_DISABLE_PROJECT_CONFIG")
    else:
        run_env["OPENCODE_DISABLE_PROJECT_CONFIG"] = "1"
    argv = [binary, "run", "--pure", "--format", "json", "--title", TITLE]
    if model:
        argv += ["--model", model]
    argv.append(instruction(env["AGENT_ID"], env["AGENT_BRIDGE_MESSAGE_ID"]))
    return LaunchPlan(argv=argv, env=run_env, unset=tuple(unset), files=files)


# --- Carrying out the plan (the launcher's exec) ------------------------------------------------


def _user_config(env: Mapping[str, str]) -> Any:
    """The user's own global opencode config (plain JSON), or None."""
    base = env.get("XDG_CONFIG_HOME") or os.path.join(env.get("HOME") or "/nonexistent", ".config")  # noqa: PTH118
    for name in ("opencode.json", "config.json"):
        try:
            with open(os.path.join(base, "opencode", name), encoding="utf-8") as fh:  # noqa: PTH118, PTH123
                return json.load(fh)
        except (OSError, ValueError):
            continue
    return None


def _link_credentials(env: Mapping[str, str], data_dir: Path) -> None:
    """The user's saved provider credentials (``opencode auth login``), linked, never copied."""
    base = env.get("XDG_DATA_HOME") or os.path.join(env.get("HOME") or "/nonexistent", ".local/share")  # noqa: PTH118
    auth = Path(base) / "opencode" / "auth.json"
    if auth.is_file():
        (data_dir / "opencode").mkdir(mode=0o700, parents=True, exist_ok=True)
        (data_dir / "opencode" / "auth.json").symlink_to(auth)


def main(argv: Sequence[str]) -> int:
    """``opencode_headless.sh REQUEST_FILE``'s body: plan, write the files, exec opencode.
    ``argv``: the request file, the bridge's MCP config file, the binary, ``1`` if ripgrep is on PATH."""
    from dispatcher.core.permissions import ProfileError, profile_from_env
    from dispatcher.core.private_files import create_private_file
    from dispatcher.core.protected import git_environment, protected_from_env

    prog = "opencode_headless.sh"
    request_file, mcp_config, binary, ripgrep = argv[0], argv[1], argv[2], argv[3] == "1"
    env = dict(os.environ)
    attempt_dir = Path(env["AGENT_BRIDGE_ATTEMPT_DIR"])
    workspace = Path(env.get("AGENT_BRIDGE_WORKSPACE") or Path.cwd()).resolve()
    try:
        with open(mcp_config, encoding="utf-8") as fh:  # noqa: PTH123 - the launcher's own file
            server = json.load(fh)["mcpServers"][BRIDGE_SERVER]
        profile = profile_from_env(env).resolved()
        plan = launch_plan(
            binary,
            profile,
            env,
            attempt_dir,
            workspace,
            server,
            user_config=_user_config(env),
            protected=protected_from_env(env),
            ripgrep=ripgrep,
            links_out=links_leading_out(workspace, [workspace, *map(Path, profile.extra_dirs)])
            if profile.level in ("read", "edit")
            else (),
        )
    except Unenforceable as exc:
        print(f"{prog}: permissions unenforceable: {exc}", file=sys.stderr)  # noqa: T201 - the launcher's line
        return 78
    except (ProfileError, ValueError) as exc:
        print(f"{prog}: {' '.join(str(exc).split())}", file=sys.stderr)  # noqa: T201
        return 2
    home = attempt_dir / HOME_DIR
    home.mkdir(mode=0o700)  # must be new: an existing name (a planted link) fails the launch
    (attempt_dir / TMP_DIR).mkdir(mode=0o700)  # new too: never a planted link
    for relative, content in plan.files.items():
        (attempt_dir / relative).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        create_private_file(attempt_dir / relative, content)
    (attempt_dir / HOME_DIR / ".config/opencode/node_modules").mkdir(mode=0o700)
    _link_credentials(env, Path(plan.env["XDG_DATA_HOME"]))
    run_env = {k: v for k, v in env.items() if k not in plan.unset}
    run_env.update(plan.env)
    run_env.update(git_environment())  # every git opencode or its tools run
    stdin = os.open(request_file, os.O_RDONLY | os.O_NOFOLLOW)
    stdout = os.open(attempt_dir / OUTPUT, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    os.dup2(stdin, 0)
    os.dup2(stdout, 1)
    os.close(stdin)
    os.close(stdout)
    os.execve(binary, plan.argv, run_env)  # noqa: S606 - the CLI itself, by the path the launcher resolved
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
