"""Codex's launch plan (codex-cli 0.171.0): ``codex exec ... -`` with the task on stdin and a
private CODEX_HOME in the attempt directory.

The private home: auth.json linked from the user's (``codex login``; never copied), a generated
config.toml (the user's is not loaded: it may add MCP servers, tools, hooks, profiles): the
bridge as the only MCP server, required (Codex otherwise sends its first model request before a
slow server is up), its environment spelled out (Codex filters MCP servers' environment), only
the worker tools by name, pre-approved (``codex exec`` runs with approval ``never``); every
built-in tool off but the shell above ``bridge``; the level's tables (profile.py). Above
``bridge`` (but ``project``) the PreToolUse hook (hooks.json) and its policy file.

Why each flag: ``exec`` one turn, approval never; ``--json`` JSONL events on stdout;
``--ephemeral`` no session files; ``--skip-git-repo-check``; ``--ignore-rules`` (all but
``project``); ``--sandbox MODE`` (read: read-only; edit, shell: workspace-write, probed by
``check``); ``--dangerously-bypass-hook-trust`` (read, edit, shell: run the generated hook for
this run only); ``--add-dir DIR`` (edit, shell: each extra dir); ``-c key=value`` each line of
AGENT_BRIDGE_CODEX_OVERRIDES; ``-m MODEL`` (AGENT_BRIDGE_CODEX_MODEL); ``-`` the prompt on stdin.
Not used: --dangerously-bypass-approvals-and-sandbox, --trust, execpolicy allow rules.
AGENT_BRIDGE_CODEX_BASE_URL (+ _ENV_KEY, _MAX_RETRIES): a Responses API endpoint of one's own.
AGENT_BRIDGE_MAX_TURNS is not used: codex-cli 0.171.0 has no turn cap. With the bridge's tracing on
(an OTLP endpoint in the environment, docs/traces.md) the config also exports Codex's own spans
there (``otel_tables``); they continue the attempt's TRACEPARENT.

Read from the listener's environment (the worker launcher's contract, launchers/agent_headless.sh):
CODEX_BIN (default ``codex`` on PATH); CODEX_HOME (the user's real Codex home, default ~/.codex:
only its auth.json is used, the worker gets a private home); AGENT_BRIDGE_CODEX_MODEL (``-m``);
AGENT_BRIDGE_CODEX_BASE_URL (a Responses API base URL such as http://127.0.0.1:8080/v1: the run
then uses a provider of its own with that URL, plain HTTP(S) server-sent events, no WebSocket);
AGENT_BRIDGE_CODEX_ENV_KEY (with the base URL: the NAME of the variable holding that endpoint's
API key; without it no key is sent); AGENT_BRIDGE_CODEX_MAX_RETRIES (with the base URL: request and
stream retries, default 2; 0 ends a failing endpoint's run within seconds);
AGENT_BRIDGE_CODEX_OVERRIDES (newline-separated ``key=value`` lines, each one ``-c``, winning over
the generated config.toml, such as model_reasoning_effort="low": it can undo this plan's choices,
so treat it as local policy). Its ``--json`` events go to codex-events.jsonl in the attempt dir.
Exit: Codex's own; 2 for a bad invocation (an invalid profile included); 127 when the CLI is
missing; 78 when the profile's sandbox does not work here. Every flag appears in ``codex exec
--help`` of 0.171.0; end to end against a scripted Responses API: tests/agent_clis/test_codex.py.
"""

import json
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path

from dispatcher.clis import codex, command_gate
from dispatcher.clis.codex import profile as profiles
from dispatcher.clis.launch import Attempt, Dir, File, LaunchPlan, Link, Step
from dispatcher.core import trace_rules
from dispatcher.core.permissions import WORKER_BRIDGE_TOOLS
from dispatcher.core.protected import protected_from_env

HOME = "codex-home"
PROBE_FILE = "sandbox-probe"
OFF = (
    "shell_snapshot",
    "view_image",
    "goals",
    "memories",
    "apps",
    "plugins",
    "remote_plugin",
    "tool_suggest",
    "image_generation",
    "computer_use",
    "browser_use",
    "in_app_browser",
)
_OVERRIDE = re.compile(r"[A-Za-z0-9_.\"-]+=")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml(v) for v in value) + "]"
    return profiles.toml_string(str(value))


def settings(env: Mapping[str, str]) -> tuple[int, str | None]:
    """(max retries, the env key's name) from the launcher's environment; ValueError when malformed."""
    raw = env.get("AGENT_BRIDGE_CODEX_MAX_RETRIES") or "2"
    if not re.fullmatch(r"[0-9]{1,2}", raw):
        raise ValueError(f"AGENT_BRIDGE_CODEX_MAX_RETRIES must be a small non-negative integer, got: {raw}")
    key = env.get("AGENT_BRIDGE_CODEX_ENV_KEY") or None
    if key is not None and not _ENV_NAME.fullmatch(key):
        raise ValueError(f"AGENT_BRIDGE_CODEX_ENV_KEY must be an environment variable name, got: {key}")
    return int(raw), key


def config_toml(attempt: Attempt, retries: int, env_key: str | None) -> str:
    """The worker's config.toml (pure)."""
    profile, server = attempt.profile, attempt.server
    lines = [
        "# Generated by codex_headless.sh for one Agent Bridge worker run.",
        "check_for_update_on_startup = false",
        'web_search = "disabled"',
        "[analytics]",
        "enabled = false",
        "[history]",
        'persistence = "none"',
        "[features]",
        *(f"{name} = {toml(value)}" for name, value in profiles.features(profile).items()),
        *(f"{name} = false" for name in OFF),
        "[agents]",
        "enabled = false",
        "[tools.experimental_request_user_input]",
        "enabled = false",
        "[tools.update_plan]",
        "enabled = false",
        "[skills]",
        "include_instructions = false",
        "[skills.bundled]",
        "enabled = false",
    ]
    base_url = attempt.env.get("AGENT_BRIDGE_CODEX_BASE_URL")
    if base_url:
        provider: dict[str, object] = {
            "name": "agent-bridge-endpoint",
            "base_url": base_url,
            "wire_api": "responses",
            "supports_websockets": False,
            "request_max_retries": retries,
            "stream_max_retries": retries,
        }
        if env_key:
            provider["env_key"] = env_key
        lines[1:1] = ['model_provider = "agent_bridge_endpoint"']
        lines += ["[model_providers.agent_bridge_endpoint]", *(f"{k} = {toml(v)}" for k, v in provider.items())]
    lines += [
        "[mcp_servers.agent_bridge]",
        f"command = {toml(server['command'])}",
        f"args = {toml(list(server['args']))}",
        "required = true",
        "startup_timeout_sec = 60",
        "tool_timeout_sec = 120",
        f"enabled_tools = {toml(list(WORKER_BRIDGE_TOOLS))}",
        'default_tools_approval_mode = "approve"',
        "[mcp_servers.agent_bridge.env]",
        *(f"{k} = {toml(v)}" for k, v in server["env"].items()),
    ]
    lines += otel_tables(trace_rules.traces_endpoint(attempt.env))
    lines += profiles.config_tables(profile, attempt.workspace)
    return "\n".join(lines) + "\n"


def otel_tables(endpoint: str | None) -> list[str]:
    """With the bridge's tracing on (``endpoint``, trace_rules.traces_endpoint): Codex's own trace
    exporter to the same collector, so its spans nest under the attempt's (it continues the
    ``TRACEPARENT`` it is given). Never headers (the bridge withholds the collector's credentials
    from workers), no log-event exporter (log events are what can carry prompts and responses)
    and every content switch off. Nothing with tracing off: Codex's defaults export no traces."""
    if endpoint is None:
        return []
    return [
        "[otel]",
        'exporter = "none"',
        "log_user_prompt = false",
        "log_agent_responses = false",
        "log_sse_deltas = false",
        "log_guardian_assessments = false",
        '[otel.trace_exporter."otlp-http"]',
        f"endpoint = {toml(endpoint)}",
        'protocol = "binary"',
    ]


def plan(attempt: Attempt) -> LaunchPlan:
    """The run (pure): this argv, env and these files."""
    env, profile, attempt_dir = attempt.env, attempt.profile, attempt.attempt_dir
    retries, env_key = settings(env)
    user_home = Path(env.get("CODEX_HOME") or f"{env.get('HOME', '')}/.codex")
    home = attempt_dir / HOME
    steps: list[Step] = [Dir(home)]
    if attempt.exists(user_home / "auth.json"):
        steps.append(Link(home / "auth.json", user_home / "auth.json"))
    steps.append(File(home / "config.toml", config_toml(attempt, retries, env_key)))
    if profiles.uses_hook(profile):
        policy = attempt_dir / profiles.POLICY_FILE
        document = profiles.policy_document(
            profile, attempt.workspace, attempt_dir / profiles.TMP_DIR, protected_from_env(env), attempt.server["env"]
        )
        command = profiles.hook_command(env["AGENT_BRIDGE_PYTHON"], env["AGENT_BRIDGE_PROJECT"], policy, profile)
        hooks = profiles.hooks_json(command, command_gate.hook_timeout(profile))
        steps += [
            File(policy, json.dumps(document) + "\n"),
            File(home / "hooks.json", json.dumps(hooks, indent=2) + "\n"),
        ]
    run_env = {"CODEX_HOME": str(home)}
    if profile.level != "bridge":  # the shell runs: a private TMPDIR (a writable root of workspace-write)
        steps.append(Dir(attempt_dir / profiles.TMP_DIR))
        run_env["TMPDIR"] = str(attempt_dir / profiles.TMP_DIR)
    argv = [attempt.binary, "exec", *profiles.exec_flags(profile)]
    for override in (env.get("AGENT_BRIDGE_CODEX_OVERRIDES") or "").splitlines():
        if not override:
            continue
        if not _OVERRIDE.match(override):
            raise ValueError(f"AGENT_BRIDGE_CODEX_OVERRIDES: not a key=value line: {override}")
        argv += ["-c", override]
    if env.get("AGENT_BRIDGE_CODEX_MODEL"):
        argv += ["-m", env["AGENT_BRIDGE_CODEX_MODEL"]]
    argv.append("-")
    return LaunchPlan(
        argv=tuple(argv),
        env=run_env,
        steps=tuple(steps),
        stdin=attempt.request_file,
        stdout=attempt_dir / codex.OUTPUT_FILE,
    )


def check(attempt: Attempt, plan: LaunchPlan) -> str | None:
    """For a level with a sandbox: the same sandbox must start, and a write to the attempt dir (not
    a writable root) must fail. Otherwise the launch is refused (78): never run unconfined."""
    mode = profiles.sandbox_mode(attempt.profile)
    if mode is None:
        return None
    probe_file = attempt.attempt_dir / PROBE_FILE
    script = 'if (: >"$1") 2>/dev/null; then echo escaped; else echo confined; fi'
    try:
        done = subprocess.run(  # noqa: S603 - the CLI's own sandbox command, a fixed argv
            [
                attempt.binary,
                "sandbox",
                "-c",
                f'sandbox_mode="{mode}"',
                "--",
                "/bin/sh",
                "-c",
                script,
                "sh",
                str(probe_file),
            ],
            env={**attempt.env, **plan.env},
            cwd=attempt.cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
        )
        said = (done.stdout + done.stderr).strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        said = str(exc)
    if "confined" not in said or probe_file.exists():
        return (
            f"Codex's {mode} sandbox does not work here (probe said: {' '.join(said.split())}); install "
            "bubblewrap or allow unprivileged user namespaces, or lower this agent's permissions level"
        )
    return None
