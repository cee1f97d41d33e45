#!/usr/bin/env bash
# Agent Bridge worker launcher: Kimi Code, one non-interactive run (prompt mode).
#
# Checked against Kimi Code 2.1.0 (npm @moonshot-ai/kimi-code; `kimi --version` -> "2.1.0"):
# every flag below appears in `kimi --help` of that version, and tests/test_cli_kimi.py runs
# this launcher end to end (the real listener, the 2.1.0 binary on Node 22, the real bridge
# server, a scripted Anthropic-style model on 127.0.0.1).
#
# Kimi automation is OFF by default in config.json ("kimi": {"auto": false}). In prompt
# mode (-p) Kimi Code 2.1.0 runs under its automatic permission policy: every tool the
# agent can see is approved without asking, and -p cannot be combined with
# --yolo/--auto/--plan. [[permission.rules]] in config.toml are parsed but not applied in
# 2.1.0 (a deny rule for Read did not stop a Read): what the model can *see* is the only
# control. Turning it on is a deliberate local decision; see docs/launchers.md.
#
# Contract (fixed by the dispatcher):  kimi_headless.sh REQUEST_FILE
#   cwd = workspace, stdin = /dev/null, stdout/stderr = private per-attempt log.
#   Kimi takes its prompt only from argv, so argv carries a FIXED instruction naming the
#   message id and the request file path; the task text itself never reaches argv/env.
# Environment: AGENT_ID, AGENT_BRIDGE_MESSAGE_ID, AGENT_BRIDGE_DB, AGENT_BRIDGE_CONFIG,
#   AGENT_BRIDGE_PROJECT, AGENT_BRIDGE_PYTHON, AGENT_BRIDGE_ATTEMPT_DIR (required);
#   AGENT_BRIDGE_RUNTIME_DIR, AGENT_BRIDGE_MAX_BODY_BYTES, AGENT_BRIDGE_LOG_LEVEL,
#   AGENT_BRIDGE_WORKER_TOKEN (optional: passed on to the worker's bridge server);
#   KIMI_BIN (optional, default `kimi` on PATH);
#   KIMI_NODE (optional: a Node >= 22.19 binary used to run KIMI_BIN, for npm installs
#     whose `kimi` script would otherwise pick up an older `node` from PATH);
#   KIMI_CODE_HOME (optional: the user's real Kimi home, default ~/.kimi-code; the
#     worker itself gets a private home, see below);
#   AGENT_BRIDGE_MAX_TURNS (optional positive integer -> KIMI_LOOP_MAX_STEPS_PER_TURN,
#     unless that is already set; Kimi counts steps, not turns, so this is approximate).
# Exit code: Kimi's own exit code; 2 for a bad invocation; 127 if the CLI is missing.
set -euo pipefail
set -o noclobber  # a `>` redirect never reuses an existing name (a planted file or link)
umask 077

prog=kimi_headless.sh
# shellcheck source=SCRIPTDIR/_common.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/_common.sh"

take_request_file "$@"

require_bridge_env

read_max_turns

kimi_bin=${KIMI_BIN:-kimi}
command -v -- "$kimi_bin" >/dev/null 2>&1 \
    || fail 127 "Kimi Code CLI not found: '$kimi_bin' (install @moonshot-ai/kimi-code, or set KIMI_BIN to its path)"
kimi_cmd=("$kimi_bin")
if [[ -n ${KIMI_NODE:-} ]]; then
    command -v -- "$KIMI_NODE" >/dev/null 2>&1 || fail 127 "KIMI_NODE not found: '$KIMI_NODE'"
    kimi_cmd=("$KIMI_NODE" "$(command -v -- "$kimi_bin")")
fi

# --- Private KIMI_CODE_HOME --------------------------------------------------------
# Kimi 2.1.0 has no --mcp-config flag: MCP servers come from $KIMI_CODE_HOME/mcp.json
# (plus the project's .mcp.json and .kimi-code/mcp.json, which Kimi loads only for a
# workspace trusted in its home's trust records). The worker therefore gets its own
# home in the attempt dir, containing:
#   mcp.json      generated: only the agent_bridge server.
#   config.toml   symlink to the user's file: providers, default model, [loop_control].
#   credentials/  symlink to the user's directory: `kimi login` OAuth tokens. A symlink,
#                 not a copy, so a token refreshed by the worker is saved for the user too.
#   device_id, region   symlinks (device identity; the mainland-cn/global login region).
# Deliberately NOT linked: sessions and logs (they hold the task and the model's text and
# stay private to this attempt), plugins, skills, AGENTS.md, the user's mcp.json, and the
# trust records (so the workspace counts as untrusted and its project MCP files are ignored).
user_home=${KIMI_CODE_HOME:-${HOME:-}/.kimi-code}
worker_home=$attempt_dir/kimi-code-home
mkdir -m 700 -- "$worker_home"  # must be new: an existing name (say, a planted link) fails the launch
for item in config.toml credentials device_id region; do
    if [[ -e $user_home/$item && ! -e $worker_home/$item ]]; then
        ln -s -- "$user_home/$item" "$worker_home/$item"
    fi
done
if [[ ! -e $worker_home/config.toml ]]; then
    printf '%s: note: no %s; relying on KIMI_MODEL_* environment variables\n' \
        "$prog" "$user_home/config.toml" >&2
fi

# Agent profile: the worker sees only the worker's bridge tools, listed by name (never
# the `mcp__agent_bridge__*` glob, which would include `listener`), plus the read-only
# Read tool (needed to read REQUEST_FILE). Kimi matches built-in tools by exact name, so
# Bash, Write, Edit, FetchURL, Agent, Skill ... are not offered to the model at all (every
# model request of the real runs offered exactly these eight tools). Read is not limited to
# REQUEST_FILE: it opens any file the user can read whose name Kimi does not treat as a
# secret (.env*, id_rsa*, credentials* ...); the token files inside credentials/ pass.
# ${base_prompt} keeps Kimi's default system prompt.
agent_file=$attempt_dir/kimi-agent-bridge-worker.md
{
    printf '%s\n' --- "name: agent-bridge-worker" \
        "description: One-shot Agent Bridge worker limited to the agent_bridge MCP tools and Read." \
        "tools:" "  - Read"
    printf '  - mcp__agent_bridge__%s\n' "${worker_tools[@]}"
    cat <<'MD'
---
${base_prompt}

You are running as a one-shot, non-interactive Agent Bridge worker. Your only tools are
the agent_bridge MCP tools and Read. Nobody is watching this session: do not ask
questions; report results and problems through the agent_bridge tools.
MD
} >"$agent_file"

write_bridge_mcp_config "$worker_home/mcp.json"

# The fixed instruction: message id and file path only, never the task text.
instruction="You are the Agent Bridge worker for agent '$AGENT_ID', working on message $AGENT_BRIDGE_MESSAGE_ID. \
Read your task from the file $request_file with the Read tool and carry it out exactly as it says, \
using the agent_bridge tools."

export KIMI_CODE_HOME=$worker_home
export KIMI_DISABLE_TELEMETRY=1     # no telemetry events
export KIMI_CODE_NO_AUTO_UPDATE=1   # no update check/download from a worker
if [[ -n $max_turns && -z ${KIMI_LOOP_MAX_STEPS_PER_TURN:-} ]]; then
    export KIMI_LOOP_MAX_STEPS_PER_TURN=$max_turns
fi

# Why each flag (Kimi Code 2.1.0):
#   --agent-file FILE             the restricted profile above (tools: Read + bridge only).
#   --output-format stream-json   one JSON object per line; used for the diagnostics.
#   -p INSTRUCTION                prompt mode: run one prompt and exit. Last, so that
#                                 nothing can be mistaken for its value.
# Not used: --yolo / --auto / --plan (rejected together with -p in 2.1.0).
# exec: Kimi replaces this shell, so the worker's process-group leader is the CLI itself.
# The raw stream holds model text: it goes to the private attempt dir only, under a fixed
# name. Once the worker is gone the supervisor takes the payload-free diagnostics from it
# and from the session's wire.jsonl in the private home (dispatcher/dispatch/cli_results.py).
exec "${kimi_cmd[@]}" --agent-file "$agent_file" --output-format stream-json -p "$instruction" \
    </dev/null >"$attempt_dir/kimi-stream.jsonl"
