#!/usr/bin/env bash
# Agent Bridge worker launcher: OpenAI Codex CLI, one non-interactive run (`codex exec`).
#
# Checked against codex-cli 0.171.0 (npm @openai/codex; `codex --version` -> "codex-cli 0.171.0"):
# every flag below appears in `codex exec --help` of that version, and the whole launcher
# was run end to end against a scripted Responses API server (tests/agent_clis/test_codex.py).
#
# Contract (fixed by the dispatcher):  codex_headless.sh REQUEST_FILE
#   cwd = workspace, stdin = /dev/null, stdout/stderr = private per-attempt log.
#   REQUEST_FILE is a 0600 file with the complete worker prompt. Its content is handed to
#   Codex on stdin only (`codex exec -`): never in argv, never in the environment.
# Environment: AGENT_ID, AGENT_BRIDGE_MESSAGE_ID, AGENT_BRIDGE_DB, AGENT_BRIDGE_CONFIG,
#   AGENT_BRIDGE_PROJECT, AGENT_BRIDGE_PYTHON, AGENT_BRIDGE_ATTEMPT_DIR (required);
#   AGENT_BRIDGE_RUNTIME_DIR, AGENT_BRIDGE_MAX_BODY_BYTES, AGENT_BRIDGE_LOG_LEVEL,
#   AGENT_BRIDGE_WORKER_TOKEN (optional: passed on to the worker's bridge server);
#   CODEX_BIN (optional, default `codex` on PATH);
#   CODEX_HOME (optional: the user's real Codex home, default ~/.codex; only its auth.json
#     is used, see below; the worker itself gets a private home);
#   AGENT_BRIDGE_CODEX_MODEL (optional -> `-m`);
#   AGENT_BRIDGE_CODEX_BASE_URL (optional: a Responses API base URL such as
#     http://127.0.0.1:8080/v1; the run then uses a provider of its own with that URL,
#     plain HTTP(S) server-sent events, no WebSocket);
#   AGENT_BRIDGE_CODEX_ENV_KEY (optional, with the base URL: the NAME of the environment
#     variable that holds that endpoint's API key; without it no key is sent);
#   AGENT_BRIDGE_CODEX_MAX_RETRIES (optional, with the base URL: request and stream retries,
#     default 2; 0 makes a failing endpoint end the run within seconds);
#   AGENT_BRIDGE_CODEX_OVERRIDES (optional: newline-separated `key=value` lines, each passed
#     as one `-c key=value`, which wins over the generated config.toml; for settings of your
#     own such as model_reasoning_effort="low". It can also undo this launcher's choices, so
#     treat it as local policy).
#   AGENT_BRIDGE_WORKSPACE (the workspace, also the cwd) and AGENT_BRIDGE_PERMISSIONS (the
#     agent's permission profile as JSON; absent: level `bridge`), see "Permission profile" below.
# AGENT_BRIDGE_MAX_TURNS is not used: codex-cli 0.171.0 has no turn cap (`exec` runs one turn
# until the model stops; the dispatcher's worker timeout bounds it).
# The launcher ends by exec-ing Codex: its --json event stream goes to codex-events.jsonl
# in the attempt dir, and the supervisor derives the diagnostics from it afterwards.
# Exit code: Codex's own exit code; 2 for a bad invocation (an invalid AGENT_BRIDGE_PERMISSIONS
# included); 127 if the CLI is missing; 78 if the profile's sandbox does not work here.
set -euo pipefail
set -o noclobber  # a `>` redirect never reuses an existing name (a planted file or link)
umask 077

prog=codex_headless.sh
# shellcheck source=SCRIPTDIR/_common.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/_common.sh"

take_request_file "$@"

require_bridge_env

codex_bin=${CODEX_BIN:-codex}
require_command "$codex_bin" "Codex CLI" "install @openai/codex, or set CODEX_BIN to its path"

max_retries=${AGENT_BRIDGE_CODEX_MAX_RETRIES:-2}
[[ $max_retries =~ ^[0-9]{1,2}$ ]] \
    || fail 2 "AGENT_BRIDGE_CODEX_MAX_RETRIES must be a small non-negative integer, got: $max_retries"
if [[ -n ${AGENT_BRIDGE_CODEX_ENV_KEY:-} && ! $AGENT_BRIDGE_CODEX_ENV_KEY =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]]; then
    fail 2 "AGENT_BRIDGE_CODEX_ENV_KEY must be an environment variable name, got: $AGENT_BRIDGE_CODEX_ENV_KEY"
fi

# --- Private CODEX_HOME --------------------------------------------------------------
# Codex keeps its state under $CODEX_HOME: sqlite databases (state, logs, goals, queue,
# memories), installed skills and, without --ephemeral, the session transcripts. The
# worker gets its own home in the attempt dir, so whatever Codex keeps of this run stays
# there and goes when the attempt dir is pruned. Its config.toml is generated below;
# the user's config.toml is NOT loaded (it may add MCP servers, tools, hooks, profiles).
#   auth.json  symlink to the user's file, when it exists: the `codex login` credentials
#              (ChatGPT tokens or an API key). A link, not a copy, so no second copy of
#              the credentials is made; API-key users may set CODEX_API_KEY instead.
user_home=${CODEX_HOME:-${HOME:-}/.codex}
worker_home=$attempt_dir/codex-home
mkdir -m 700 -- "$worker_home"  # must be new: an existing name (say, a planted link) fails the launch
if [[ -e $user_home/auth.json ]]; then
    ln -s -- "$user_home/auth.json" "$worker_home/auth.json"
fi

# config.toml: the bridge as the only MCP server, required (Codex otherwise sends its first
# model request before a slow server is up, without the bridge tools), with the worker
# environment spelled out (Codex hands MCP servers a filtered environment), only the
# worker tools by name, pre-approved (`codex exec` runs with approval `never`, which
# rejects every MCP call that is not approved). Built-in tools switched off: no shell,
# no image viewer, no sub-agents, no goals, no web search, no user questions, no plan, no
# apps/plugins/image generation (a ChatGPT login turns those on), no bundled skills.
# Written by Python so that every string is TOML-escaped; O_EXCL|O_NOFOLLOW, 0600.
#
# Permission profile (dispatcher/clis/codex/profile.py says what enforces each level):
# the same Python reads AGENT_BRIDGE_PERMISSIONS (invalid: exit 2), switches the shell tool
# on above `bridge`, adds the level's tables, and above `bridge` (except `project`) writes the
# PreToolUse hook (hooks.json) and the policy it reads (codex-permissions.json in the attempt
# dir). It prints, NUL-separated, the sandbox mode to probe (empty: none) and then the
# `codex exec` flags of the level.
profile_out=$attempt_dir/codex-profile.out
"$AGENT_BRIDGE_PYTHON" - "$worker_home" "${AGENT_BRIDGE_WORKSPACE:-$PWD}" >"$profile_out" <<'PY'
import json, os, sys
from pathlib import Path

sys.path.insert(0, os.environ["AGENT_BRIDGE_PROJECT"])
from dispatcher.clis.codex import profile as codex
from dispatcher.dispatch.worker_mcp import bridge_server
from dispatcher.core.permissions import WORKER_BRIDGE_TOOLS, ProfileError, profile_from_env
from dispatcher.core.private_files import create_private_file
from dispatcher.core.protected import protected_from_env

env = os.environ
home, workspace = Path(sys.argv[1]), Path(sys.argv[2])
attempt_dir = Path(env["AGENT_BRIDGE_ATTEMPT_DIR"])
try:
    profile = profile_from_env(env)
except ProfileError as exc:
    print(f"codex_headless.sh: {exc}", file=sys.stderr)
    sys.exit(2)


def toml(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml(v) for v in value) + "]"
    # A JSON string is a TOML basic string, once DEL (which JSON leaves raw) is escaped.
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


server = bridge_server(env)

lines = [
    "# Generated by codex_headless.sh for one Agent Bridge worker run.",
    "check_for_update_on_startup = false",
    'web_search = "disabled"',
    "[analytics]", "enabled = false",
    "[history]", 'persistence = "none"',
    "[features]",
    *(f"{feature} = {codex.toml_string(value) if isinstance(value, str) else str(value).lower()}"
      for feature, value in codex.features(profile).items()),
    *(f"{feature} = false" for feature in (
        "shell_snapshot", "view_image", "goals", "memories", "apps", "plugins", "remote_plugin",
        "tool_suggest", "image_generation", "computer_use", "browser_use", "in_app_browser")),
    "[agents]", "enabled = false",
    "[tools.experimental_request_user_input]", "enabled = false",
    "[tools.update_plan]", "enabled = false",
    "[skills]", "include_instructions = false",
    "[skills.bundled]", "enabled = false",
]
base_url = env.get("AGENT_BRIDGE_CODEX_BASE_URL")
if base_url:
    retries = int(env.get("AGENT_BRIDGE_CODEX_MAX_RETRIES") or 2)
    provider = {"name": "agent-bridge-endpoint", "base_url": base_url, "wire_api": "responses",
                "supports_websockets": False, "request_max_retries": retries, "stream_max_retries": retries}
    if env.get("AGENT_BRIDGE_CODEX_ENV_KEY"):
        provider["env_key"] = env["AGENT_BRIDGE_CODEX_ENV_KEY"]
    lines[1:1] = ['model_provider = "agent_bridge_endpoint"']
    lines += ["[model_providers.agent_bridge_endpoint]", *(f"{k} = {toml(v)}" for k, v in provider.items())]
lines += [
    "[mcp_servers.agent_bridge]",
    f"command = {toml(server['command'])}",
    f"args = {toml(server['args'])}",
    "required = true",
    "startup_timeout_sec = 60",
    "tool_timeout_sec = 120",
    f"enabled_tools = {toml(list(WORKER_BRIDGE_TOOLS))}",
    'default_tools_approval_mode = "approve"',
    "[mcp_servers.agent_bridge.env]",
    *(f"{k} = {toml(v)}" for k, v in server["env"].items()),
]
lines += codex.config_tables(profile, workspace)
create_private_file(home / "config.toml", "\n".join(lines) + "\n")
if codex.uses_hook(profile):
    policy = attempt_dir / codex.POLICY_FILE
    document = codex.policy_document(profile, workspace, attempt_dir / codex.TMP_DIR, protected_from_env(env))
    create_private_file(policy, json.dumps(document) + "\n")
    command = codex.hook_command(env["AGENT_BRIDGE_PYTHON"], env["AGENT_BRIDGE_PROJECT"], policy)
    create_private_file(home / "hooks.json", json.dumps(codex.hooks_json(command), indent=2) + "\n")
sys.stdout.write("\0".join([profile.level, codex.sandbox_mode(profile) or "", *codex.exec_flags(profile)]) + "\0")
PY
mapfile -d '' -t profile_words <"$profile_out"
level=${profile_words[0]}
probe_mode=${profile_words[1]}
level_flags=("${profile_words[@]:2}")

export CODEX_HOME=$worker_home

# Above `bridge` the shell runs: a private TMPDIR in the attempt dir (Codex keeps $TMPDIR a
# writable root in workspace-write, and refuses to set up its sandbox helper when CODEX_HOME
# lies under $TMPDIR, as an attempt dir under /tmp does with TMPDIR unset). Then, for a level
# with a sandbox, a probe: the same sandbox must start, and a write to the attempt dir (not a
# writable root) must fail. Otherwise refuse (78): never run unconfined.
if [[ $level != bridge ]]; then
    mkdir -m 700 -- "$attempt_dir/tmp"
    export TMPDIR=$attempt_dir/tmp
fi
if [[ -n $probe_mode ]]; then
    probe_file=$attempt_dir/sandbox-probe
    # shellcheck disable=SC2016  # $1 is the probe's own argument
    probe=$("$codex_bin" sandbox -c "sandbox_mode=\"$probe_mode\"" -- /bin/sh -c \
        'if (: >"$1") 2>/dev/null; then echo escaped; else echo confined; fi' sh "$probe_file" 2>&1) || true
    if [[ $probe != *confined* || -e $probe_file ]]; then
        fail 78 "Codex's $probe_mode sandbox does not work here (probe said: ${probe//$'\n'/ }); install bubblewrap or allow unprivileged user namespaces, or lower this agent's permissions level"
    fi
fi

# Why each flag (codex-cli 0.171.0):
#   exec                    non-interactive: one turn, then exit (approval `never`).
#   --json                  JSONL events on stdout (turn.completed usage, turn.failed ...).
#   --ephemeral             no session files (the transcript with the task text) on disk.
#   --skip-git-repo-check   the workspace need not be a git repository.
#   --ignore-rules          no user or project execpolicy .rules files (every level but
#                           `project`, where the workspace's .codex/rules decide).
#   --sandbox MODE          `read-only` at read, `workspace-write` at edit and shell (probed
#                           above); none at bridge (exec's default `read-only`, with the shell
#                           tool off it has nothing to run) and project (the workspace decides).
#   --dangerously-bypass-hook-trust   at read, edit and shell: run the generated PreToolUse
#                           hook, which nobody trusted in a TUI, for this run only. Codex then
#                           runs the enabled hooks: ours in the private home (a project's
#                           .codex/ layer is disabled while the workspace is untrusted).
#   --add-dir DIR           at edit and shell: each of extra_dirs, a writable root.
#   -c key=value            only the lines of AGENT_BRIDGE_CODEX_OVERRIDES.
#   -m MODEL                only when AGENT_BRIDGE_CODEX_MODEL is set.
#   -                       the prompt is read from stdin (the request file). Last.
# Not used: --dangerously-bypass-approvals-and-sandbox (the worker tools are approved by
# name in config.toml instead), --trust (it would persist trust for the workspace), execpolicy
# rules for allow_commands (an `allow` rule runs its command outside the sandbox, and no rule
# denies what is unmatched: the hook does that instead).
args=(exec "${level_flags[@]}")
if [[ -n ${AGENT_BRIDGE_CODEX_OVERRIDES:-} ]]; then
    while IFS= read -r override; do
        [[ -z $override ]] && continue
        [[ $override =~ ^[A-Za-z0-9_.\"-]+= ]] || fail 2 "AGENT_BRIDGE_CODEX_OVERRIDES: not a key=value line: $override"
        args+=(-c "$override")
    done <<<"$AGENT_BRIDGE_CODEX_OVERRIDES"
fi
if [[ -n ${AGENT_BRIDGE_CODEX_MODEL:-} ]]; then
    args+=(-m "$AGENT_BRIDGE_CODEX_MODEL")
fi
args+=(-)

# exec: the CLI replaces this shell, so the worker's process-group leader is the CLI
# itself. The event stream holds model text: it goes to the private attempt dir only,
# under a fixed name from which the supervisor takes the payload-free diagnostics once
# the worker is gone (dispatcher/dispatch/cli_results.py). noclobber: never an existing name.
exec "$codex_bin" "${args[@]}" <"$request_file" >"$attempt_dir/codex-events.jsonl"
