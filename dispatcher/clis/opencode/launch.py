"""opencode's launch plan (1.18.33): ``opencode run --pure --format json --title agent-bridge-worker
[--model M] INSTRUCTION`` with the task on stdin (opencode appends stdin after the argv text),
its events into ``opencode-events.jsonl``, and a private ``HOME`` with XDG directories in the
attempt directory.

The private home's ``.config/opencode/opencode.json``: the bridge as a ``local`` MCP server,
sharing, auto-update and snapshots off, no instructions, and the model: an endpoint of the
worker's own (``AGENT_BRIDGE_OPENCODE_BASE_URL``) or the ``model``/``small_model``/``provider``
keys of the user's global config. The plugin package is pre-seeded there so opencode does not
npm-install it. The user's saved credentials (``auth.json``) are linked, never copied. The
level's rules go in ``OPENCODE_PERMISSION`` (profile.py). Pure but for reading the user's config
and walking the workspace for links that lead out of it (at ``read`` and ``edit``).

Read from the listener's environment (the worker launcher's contract, launchers/agent_headless.sh):
OPENCODE_BIN (default ``opencode`` on PATH); AGENT_BRIDGE_OPENCODE_BASE_URL (an OpenAI-compatible
base URL such as http://127.0.0.1:8080/v1: the run uses a provider of its own with that URL, and
AGENT_BRIDGE_OPENCODE_MODEL names the model id it serves); AGENT_BRIDGE_OPENCODE_ENV_KEY (with the
base URL: the NAME of the variable holding that endpoint's API key; without it no key is sent);
AGENT_BRIDGE_OPENCODE_PRICE (with the base URL: "<input>,<output>" USD per million tokens, so
opencode reports a cost); AGENT_BRIDGE_OPENCODE_MODEL (without a base URL: ``provider/model`` ->
``--model``; otherwise the user's own global opencode.json decides).
Exit: opencode's own (0, or 1 for a failed session); 2 for a bad invocation (an invalid profile
included); 127 when the CLI is missing; 78 when the profile cannot be enforced (level shell:
opencode has no OS sandbox). End to end with 1.18.33 against a scripted OpenAI-compatible model:
tests/agent_clis/test_opencode.py.
"""

import json
from pathlib import Path
from typing import Any

from dispatcher.clis import opencode
from dispatcher.clis.launch import Attempt, Dir, File, LaunchPlan, Link, Step
from dispatcher.clis.opencode import profile as profiles
from dispatcher.clis.opencode.user_files import user_config, user_dirs
from dispatcher.core.protected import protected_from_env

UNSET = ("OPENCODE_CONFIG", "OPENCODE_CONFIG_CONTENT", "OPENCODE_CONFIG_DIR", "OPENCODE_AUTH_CONTENT")


def instruction(agent: str, message_id: str) -> str:
    """The fixed argv text; opencode appends stdin (the request file, with the task) after it."""
    return (
        f"You are the Agent Bridge worker for agent '{agent}', working on message {message_id}. "
        "The text below is your task: carry it out exactly as it says, using the agent_bridge tools."
    )


def model_settings(attempt: Attempt, config_dir: Path) -> tuple[dict[str, Any], str]:
    """The config's model keys and the ``--model`` value ("" for none); ValueError on a bad setting."""
    env = attempt.env
    model = env.get("AGENT_BRIDGE_OPENCODE_MODEL") or ""
    base_url = env.get("AGENT_BRIDGE_OPENCODE_BASE_URL")
    if not base_url:
        return profiles.user_model_settings(user_config(attempt.read, config_dir)), model
    if not model or "/" in model:
        raise ValueError("AGENT_BRIDGE_OPENCODE_BASE_URL needs AGENT_BRIDGE_OPENCODE_MODEL, the model id it serves")
    provider = profiles.provider_block(
        base_url, model, env.get("AGENT_BRIDGE_OPENCODE_ENV_KEY"), env.get("AGENT_BRIDGE_OPENCODE_PRICE")
    )
    chosen = f"{profiles.PROVIDER}/{model}"
    return {"provider": provider, "model": chosen, "small_model": chosen}, chosen


def ripgrep_on_path(attempt: Attempt) -> bool:
    """glob and grep need ``rg``; without it on PATH opencode downloads it, so they are not offered."""
    return any(attempt.exists(Path(d or ".") / "rg") for d in (attempt.env.get("PATH") or "").split(":"))


def plan(attempt: Attempt) -> LaunchPlan:
    env, attempt_dir = attempt.env, attempt.attempt_dir
    profile = attempt.profile.resolved()
    workspace = Path(attempt.cwd).resolve()
    links_out: list[str] = []
    if profile.level in ("read", "edit"):
        links_out = profiles.links_leading_out(workspace, [workspace, *map(Path, profile.extra_dirs)])
    rules = profiles.permission_rules(  # Unenforceable: 78
        profile,
        workspace,
        protected_from_env(env),
        ripgrep_on_path(attempt),
        worktree=profiles.worktree_root(workspace),
        links_out=links_out,
    )
    user_config_dir, user_data_dir = user_dirs(env)
    settings, model = model_settings(attempt, user_config_dir)
    home = attempt_dir / profiles.HOME_DIR
    config_dir = home / ".config" / "opencode"
    data_dir = home / ".local" / "share"
    document = profiles.config_document(profile, profiles.mcp_entry(attempt.server, env.get("HOME")), settings)
    plugin = {"dependencies": {profiles.PLUGIN_PACKAGE: "*"}}
    steps: list[Step] = [
        Dir(home),
        Dir(home / ".config"),
        Dir(config_dir),
        File(config_dir / "opencode.json", json.dumps(document, indent=2) + "\n"),
        # Pre-seeded, so opencode does not npm-install its plugin package at start.
        File(config_dir / "package.json", json.dumps(plugin) + "\n"),
        File(config_dir / "package-lock.json", json.dumps({"lockfileVersion": 3, "packages": {"": plugin}}) + "\n"),
        Dir(config_dir / "node_modules"),
        Dir(home / ".local"),
        Dir(data_dir),
        Dir(attempt_dir / profiles.TMP_DIR),
    ]
    if attempt.exists(user_data_dir / "auth.json"):  # `opencode auth login`: linked, never copied
        steps += [Dir(data_dir / "opencode"), Link(data_dir / "opencode" / "auth.json", user_data_dir / "auth.json")]
    run_env = {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(data_dir),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "TMPDIR": str(attempt_dir / profiles.TMP_DIR),
        "OPENCODE_PERMISSION": json.dumps(rules),
        "OPENCODE_DB": ":memory:",
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_CLAUDE_CODE": "1",
    }
    unset: tuple[str, ...] = UNSET
    if profile.level == "project":
        unset += ("OPENCODE_DISABLE_PROJECT_CONFIG",)
    else:
        run_env["OPENCODE_DISABLE_PROJECT_CONFIG"] = "1"
    argv: tuple[str, ...] = (attempt.binary, "run", "--pure", "--format", "json", "--title", profiles.TITLE)
    if model:
        argv += ("--model", model)
    return LaunchPlan(
        argv=(*argv, instruction(env["AGENT_ID"], env["AGENT_BRIDGE_MESSAGE_ID"])),
        env=run_env,
        unset=unset,
        steps=tuple(steps),
        stdin=attempt.request_file,
        stdout=attempt_dir / opencode.OUTPUT_FILE,
    )


def check(attempt: Attempt, plan: LaunchPlan) -> str | None:
    """Nothing to probe: opencode has no sandbox (level shell is refused by the plan itself)."""
    return None
