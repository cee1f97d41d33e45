#!/usr/bin/env bash
# Agent Bridge worker launcher: Claude Code, one non-interactive run.
#
# Checked against Claude Code 2.1.332 (`claude --version` -> "2.1.332 (Claude Code)"):
# every flag below appears in `claude --help` of that version, except --max-turns,
# which 2.1.332 hides from --help but accepts (see docs/launchers.md).
# Run end to end with that binary, the listener and a scripted model: tests/agent_clis/test_claude.py.
#
# Contract (fixed by the dispatcher):  claude_headless.sh REQUEST_FILE
#   cwd = workspace, stdin = /dev/null, stdout/stderr = private per-attempt log.
#   REQUEST_FILE is a 0600 file with the complete worker prompt. Its content is
#   handed to Claude on stdin only: never in argv, never in the environment.
# Environment: AGENT_ID, AGENT_BRIDGE_MESSAGE_ID, AGENT_BRIDGE_DB, AGENT_BRIDGE_CONFIG,
#   AGENT_BRIDGE_PROJECT, AGENT_BRIDGE_PYTHON, AGENT_BRIDGE_ATTEMPT_DIR (required);
#   AGENT_BRIDGE_RUNTIME_DIR, AGENT_BRIDGE_MAX_BODY_BYTES, AGENT_BRIDGE_LOG_LEVEL,
#   AGENT_BRIDGE_WORKER_TOKEN (optional: passed on to the worker's bridge server);
#   CLAUDE_BIN (optional, default `claude` on PATH);
#   AGENT_BRIDGE_MAX_TURNS (optional positive integer -> --max-turns);
#   AGENT_BRIDGE_MAX_COST_USD (optional number > 0 -> --max-budget-usd: the agent's
#   per-task budget, set by the supervisor from config.json; Claude checks it between
#   turns, so a run can end somewhat above it).
#   CLAUDE_CONFIG_DIR is left as it is: the user's login lives there. The run keeps no
#   session transcript in it (--no-session-persistence).
#   AGENT_BRIDGE_PERMISSIONS (the agent's permission profile as JSON, set by the supervisor;
#   level bridge when unset) -> the tool lists, rules, settings sources and sandbox below.
# The launcher ends by exec-ing Claude: its output goes to claude-result.json in the
# attempt dir, and the supervisor derives the diagnostics from it afterwards.
# Exit code: Claude's own exit code; 2 for a bad invocation (an invalid profile included);
# 127 if the CLI is missing; 78 if the profile cannot be enforced here (no working sandbox).
set -euo pipefail
set -o noclobber  # a `>` redirect never reuses an existing name (a planted file or link)
umask 077

prog=claude_headless.sh
# shellcheck source=SCRIPTDIR/_common.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/_common.sh"

take_request_file "$@"

require_bridge_env

read_max_turns

max_cost_usd=${AGENT_BRIDGE_MAX_COST_USD:-}
if [[ -n $max_cost_usd ]] && { [[ ! $max_cost_usd =~ ^[0-9]*\.?[0-9]+$ ]] || [[ $max_cost_usd =~ ^[0.]*$ ]]; }; then
    fail 2 "AGENT_BRIDGE_MAX_COST_USD must be a number greater than 0, got: $max_cost_usd"
fi

claude_bin=${CLAUDE_BIN:-claude}
require_command "$claude_bin" "Claude Code CLI" "install it, or set CLAUDE_BIN to its path"

# The bridge as the only MCP server, in the private attempt directory.
mcp_config=$attempt_dir/claude-mcp-config.json
write_bridge_mcp_config "$mcp_config" stdio

# The permission flags of the agent's profile (AGENT_BRIDGE_PERMISSIONS; level bridge when
# unset), from dispatcher/clis/claude/profile.py: written NUL-separated into the
# attempt dir (a new private name), with the level's --settings file beside it. It exits
# 2 for an invalid profile and 78 when the level cannot be enforced here (level shell
# without bwrap/socat, or a bubblewrap that cannot make its namespaces), one line each.
"$AGENT_BRIDGE_PYTHON" - "$attempt_dir" <<'PY' || exit $?
import os, sys

sys.path.insert(0, os.environ["AGENT_BRIDGE_PROJECT"])
from dispatcher.clis.claude.profile import launcher_main

sys.exit(launcher_main(os.environ, sys.argv[1]))
PY
mapfile -d '' -t profile_args <"$attempt_dir/claude-profile-args"

# Why each flag (Claude Code 2.1.332):
#   -p                          non-interactive; the prompt is read from stdin (no positional).
#   --output-format stream-json one JSON event a line as the run goes (--verbose is required
#                               with -p): each assistant message's usage, which the supervisor
#                               follows for max_tokens_per_task, then the result object at the
#                               end (is_error, subtype, permission_denials[].tool_name ->
#                               denied_tools, ...).
#   --mcp-config FILE           load the bridge server from the generated file ...
#   --strict-mcp-config         ... and ignore every other MCP configuration.
#   --no-session-persistence    no transcript (task text included) under
#                               $CLAUDE_CONFIG_DIR/projects/, next to the user's sessions.
# The profile's flags (profile_args; docs/launchers.md has the table per level):
#   --tools LIST                the built-in tools offered: "" (none) at bridge; Read,Grep,
#                               Glob,Edit,Write at read and edit; + Bash at shell; absent
#                               (the CLI's default set) at project.
#   --allowedTools LIST         pre-approve only the worker's bridge tools, by name, never
#                               `mcp__agent_bridge__*` (which would include `listener`).
#   --disallowedTools LIST      remove start_conversation and listener from the tools the
#                               model is offered (the server offers them; --allowedTools
#                               only decides approval, not what is offered).
#   --setting-sources user      (all levels but project) the workspace's .claude/settings.json
#                               and settings.local.json are not loaded: a task author's
#                               allow rules, hooks or sandbox switches do not apply.
#   --add-dir DIR               each of the profile's extra_dirs (readable; writable at edit
#                               and above through an Edit(//DIR/**) rule).
#   --settings FILE             the level's rules (read: deny Edit(//**); edit: allow
#                               Edit(./**); shell: + Bash(<words>:*) per allowed command) and,
#                               at shell, the OS sandbox (bwrap; failIfUnavailable, no way
#                               out of it, no auto-approval of sandboxed commands).
#   --permission-mode dontAsk   anything not pre-approved is denied instead of asked.
#   --permission-prompts none   nobody answers prompts in -p: a would-be prompt is a denial.
# Not used: acceptEdits (it let a Bash call run that no rule allowed), bypassPermissions /
# --dangerously-skip-permissions (Claude Code refuses them as root, and they would lift
# the policy above).
# Variadic flags (--mcp-config, --tools, --allowedTools, --disallowedTools, --add-dir) swallow
# following words that do not start with '-'; each one is followed by another option here,
# and there is no positional prompt for them to swallow: the prompt goes on stdin.
args=(
    -p
    --output-format stream-json
    --verbose
    --mcp-config "$mcp_config"
    --strict-mcp-config
    --no-session-persistence
    "${profile_args[@]}"
)
if [[ -n $max_turns ]]; then
    args+=(--max-turns "$max_turns")
fi
if [[ -n $max_cost_usd ]]; then
    args+=(--max-budget-usd "$max_cost_usd")
fi

# ENABLE_TOOL_SEARCH=false: 2.1.332 otherwise hides MCP tools behind ToolSearch.
# CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1: no telemetry, feature-flag or preflight calls.
export ENABLE_TOOL_SEARCH=false
export CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1

# exec: the CLI replaces this shell, so the worker's process-group leader is the CLI
# itself and no launcher process is left to outlive it or to be killed in its place.
# The raw result JSON holds model text: it goes to the private attempt dir only, under
# a fixed name from which the supervisor takes the payload-free diagnostics once the
# worker is gone (dispatcher/dispatch/cli_results.py). noclobber: never an existing name.
exec "$claude_bin" "${args[@]}" <"$request_file" >"$attempt_dir/claude-result.json"
