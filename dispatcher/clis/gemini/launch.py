"""Gemini CLI's launch plan (0.61.0): ``gemini --skip-trust --allowed-mcp-server-names agent_bridge
... -o json -p INSTRUCTION`` with the task on stdin (Gemini appends stdin to the prompt) and a
private GEMINI_CLI_HOME in the attempt directory.

The private home's settings.json: the bridge as the only MCP server (trusted, the worker tools by
name), skills, telemetry, usage statistics, auto-update and checkpointing off, one attempt per
request, the user's auth type and model name, the turn cap (AGENT_BRIDGE_MAX_TURNS), and the
level's tool, sandbox and hook settings (profile.py). The user's OAuth credentials, accounts and
.env are linked, never copied. At ``shell`` bubblewrap must work here (``check``).
Environment: GEMINI_CLI_HOME, TMPDIR (the attempt's tmp), GEMINI_CLI_NO_RELAUNCH=true (no second
Node just to raise the heap), GEMINI_CLI_TRUST_WORKSPACE=true only at ``project``.

Read from the listener's environment (the worker launcher's contract, launchers/agent_headless.sh):
GEMINI_BIN (default ``gemini`` on PATH); GEMINI_CLI_HOME (where the user's own .gemini lives,
default $HOME); AGENT_BRIDGE_GEMINI_AUTH_TYPE (Gemini's security.auth.selectedType for the worker:
gemini-api-key, oauth-personal, vertex-ai ...; docs/launchers.md); AGENT_BRIDGE_MAX_TURNS (a
positive integer: model.maxSessionTurns). Its ``-o json`` output goes to gemini-result.json in the
attempt dir (on an error 0.61.0 writes its JSON to stderr instead, into the attempt's worker.log).
Exit: Gemini's own; 2 for a bad invocation (an invalid profile included); 127 when the CLI is
missing; 78 when the profile cannot be enforced here (level shell without a working bubblewrap).
End to end with the real binary against a scripted model: tests/agent_clis/test_gemini.py.
"""

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dispatcher.clis import gemini
from dispatcher.clis.gemini import profile as profiles
from dispatcher.clis.launch import Attempt, Dir, File, LaunchPlan, Link, Step
from dispatcher.core.permissions import WORKER_BRIDGE_TOOLS
from dispatcher.core.protected import protected_from_env

HOME = "gemini-home"
MCP_CONFIG = "gemini-mcp-config.json"
LINKED = ("oauth_creds.json", "google_accounts.json", ".env")


def _user_setting(text: str | None, section: str, *keys: str) -> str | None:
    """A string from the user's own settings.json, or None (missing, unreadable, JSONC)."""
    try:
        value: Any = json.loads(text or "").get(section)
        for key in keys:
            value = value.get(key)
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, str) and value else None


def settings(attempt: Attempt, user_text: str | None, tmp: Path) -> dict[str, Any]:
    """The worker's settings.json (pure)."""
    env, profile = attempt.env, attempt.profile.resolved()
    server = {**attempt.server, "trust": True, "includeTools": list(WORKER_BRIDGE_TOOLS), "timeout": 60000}
    auth = env.get("AGENT_BRIDGE_GEMINI_AUTH_TYPE") or _user_setting(user_text, "security", "auth", "selectedType")
    if auth is None and env.get("GEMINI_API_KEY"):
        auth = "gemini-api-key"
    doc: dict[str, Any] = {
        "mcpServers": {"agent_bridge": server},
        "mcp": {"allowed": ["agent_bridge"]},
        "skills": {"enabled": False},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False, "logPrompts": False},
        "general": {
            "maxAttempts": 1,
            "enableAutoUpdate": False,
            "enableAutoUpdateNotification": False,
            "checkpointing": {"enabled": False},
        },
        "model": {"skipNextSpeakerCheck": True},
    }
    if auth:
        doc["security"] = {"auth": {"selectedType": auth}}
    model_name = _user_setting(user_text, "model", "name")  # the user's choice; GEMINI_MODEL still wins
    if model_name:
        doc["model"]["name"] = model_name
    if attempt.max_turns is not None:
        doc["model"]["maxSessionTurns"] = attempt.max_turns
    for section, keys in profiles.settings_keys(profile, tmp).items():
        doc.setdefault(section, {}).update(keys)
    hook = profiles.hook_command(env["AGENT_BRIDGE_PYTHON"], env["AGENT_BRIDGE_PROJECT"], protected_from_env(env))
    if hooks := profiles.hooks_keys(profile, hook):
        doc["hooks"] = hooks
    return doc


def plan(attempt: Attempt) -> LaunchPlan:
    """The run (pure but for reading the user's settings.json): this argv, env and these files."""
    env, attempt_dir = attempt.env, attempt.attempt_dir
    profile = attempt.profile.resolved()
    flags = profiles.cli_args(profile)  # Unenforceable: 78
    user_dir = Path(env.get("GEMINI_CLI_HOME") or env.get("HOME", "")) / ".gemini"
    home, tmp = attempt_dir / HOME, attempt_dir / "tmp"
    steps: list[Step] = [Dir(home), Dir(home / ".gemini")]
    steps += [Link(home / ".gemini" / item, user_dir / item) for item in LINKED if attempt.exists(user_dir / item)]
    doc = settings(attempt, attempt.read(user_dir / "settings.json"), tmp)
    steps += [
        File(
            attempt_dir / MCP_CONFIG,
            json.dumps({"mcpServers": {"agent_bridge": dict(attempt.server)}}, indent=2) + "\n",
        ),
        Dir(tmp),
        File(home / ".gemini" / "settings.json", json.dumps(doc, indent=2) + "\n"),
    ]
    instruction = (
        f"You are the Agent Bridge worker for agent '{env['AGENT_ID']}', working on message "
        f"{env['AGENT_BRIDGE_MESSAGE_ID']}. The text above is your task: carry it out exactly as it says, "
        "using the agent_bridge tools."
    )
    run_env = {"GEMINI_CLI_HOME": str(home), "TMPDIR": str(tmp), "GEMINI_CLI_NO_RELAUNCH": "true"}
    unset: tuple[str, ...] = ("GEMINI_CLI_TRUST_WORKSPACE",)
    if profile.level == "project":
        run_env["GEMINI_CLI_TRUST_WORKSPACE"] = "true"
        unset = ()
    argv = (attempt.binary, "--skip-trust", "--allowed-mcp-server-names", "agent_bridge", *flags, "-o", "json")
    return LaunchPlan(
        argv=(*argv, "-p", instruction),
        env=run_env,
        unset=unset,
        steps=tuple(steps),
        stdin=attempt.request_file,
        stdout=attempt_dir / gemini.OUTPUT_FILE,
    )


def _bwrap_works(bwrap: str) -> bool:
    argv = [bwrap, "--unshare-all", "--new-session", "--die-with-parent", "--ro-bind", "/", "/"]
    argv += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--", "true"]  # noqa: S108 - inside the sandbox
    try:
        return subprocess.run(argv, capture_output=True, timeout=30, stdin=subprocess.DEVNULL).returncode == 0  # noqa: S603
    except (OSError, subprocess.TimeoutExpired):
        return False


def check(attempt: Attempt, plan: LaunchPlan, which: Callable[[str], str | None] | None = None) -> str | None:
    """At ``shell``: Gemini's tool sandbox (bubblewrap) must be there and work."""
    import shutil

    if attempt.profile.level != "shell":
        return None
    bwrap = (which or shutil.which)("bwrap")
    if bwrap is None:
        return (
            "level shell needs bubblewrap (bwrap) on PATH for Gemini CLI's tool sandbox: install it "
            "(Debian: apt-get install bubblewrap), or use level edit"
        )
    if not _bwrap_works(bwrap):
        return (
            "level shell needs a working bubblewrap sandbox for Gemini CLI, and 'bwrap --unshare-all' fails "
            "here (are unprivileged user namespaces disabled?): enable them, or use level edit"
        )
    return None
