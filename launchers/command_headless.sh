#!/usr/bin/env bash
# Agent Bridge worker launcher: run any user-given command as the worker.
#
# For agents without a dedicated launcher (Codex, Gemini, a local script ...).
# No agent CLI is invoked here directly; the Codex and Gemini examples below cite
# flags as documented for codex-cli 0.171.0 and Gemini CLI 0.61.0 in the project's
# CLIs' own --help (summarised in docs/agent-clis.md). They were not re-run for this launcher.
#
# Contract (fixed by the dispatcher):  command_headless.sh REQUEST_FILE
#   cwd = workspace, stdin = /dev/null, stdout/stderr = private per-attempt log.
# AGENT_BRIDGE_WORKER_COMMAND (required) is a shell command string. It is run as
#     bash -c '<AGENT_BRIDGE_WORKER_COMMAND> "$@"' agent-bridge-worker REQUEST_FILE
# i.e. the request file PATH is appended as the command's first argument (so a plain
# `/path/to/worker.sh` receives it as $1). The full environment is passed through
# (AGENT_ID, AGENT_BRIDGE_MESSAGE_ID, AGENT_BRIDGE_DB, AGENT_BRIDGE_CONFIG,
# AGENT_BRIDGE_PROJECT, AGENT_BRIDGE_PYTHON, AGENT_BRIDGE_ATTEMPT_DIR,
# AGENT_BRIDGE_DIAGNOSTICS_FILE, AGENT_BRIDGE_ROLE, AGENT_BRIDGE_RUNTIME_DIR ...), plus
# AGENT_BRIDGE_REQUEST_FILE = the same path. Give the worker's bridge server at least
# AGENT_BRIDGE_ROLE=worker (no `listener` tool) and the runtime directory, as below.
# A wrapper should end with `exec <cli>`: the worker's process-group leader is then the
# CLI itself (this launcher execs the command, and `bash -c` execs a single command).
# The command must keep the task text out of argv and the environment itself: read it
# from the file or feed it on stdin. For anything beyond one word, point the variable
# at a small wrapper script, as in the examples below.
# Exit code: the command's own exit code (127 if the shell cannot find it);
# 2 for a bad invocation (including AGENT_BRIDGE_WORKER_COMMAND unset).
#
# ---- Example: OpenAI Codex (`codex exec`), save as codex-worker.sh -------------------
#   #!/usr/bin/env bash
#   set -euo pipefail
#   # Prompt on stdin: `codex exec` reads stdin when the prompt argument is `-`.
#   # MCP server per run with -c (TOML values). MCP calls are rejected under the
#   # default approval policy `never` unless the server's default_tools_approval_mode
#   # is "approve". Default sandbox is read-only. --json gives JSONL events
#   # (turn.completed / turn.failed); keep them in the private attempt dir.
#   # Paths are embedded in TOML strings: keep them free of `"` and `\`.
#   exec codex exec --json --skip-git-repo-check \
#     -c "mcp_servers.agent_bridge.command=\"$AGENT_BRIDGE_PYTHON\"" \
#     -c "mcp_servers.agent_bridge.args=[\"$AGENT_BRIDGE_PROJECT/server.py\"]" \
#     -c "mcp_servers.agent_bridge.env={AGENT_ID=\"$AGENT_ID\",AGENT_BRIDGE_DB=\"$AGENT_BRIDGE_DB\",AGENT_BRIDGE_CONFIG=\"$AGENT_BRIDGE_CONFIG\",AGENT_BRIDGE_ROLE=\"worker\",AGENT_BRIDGE_RUNTIME_DIR=\"$AGENT_BRIDGE_RUNTIME_DIR\"}" \
#     -c 'mcp_servers.agent_bridge.default_tools_approval_mode="approve"' \
#     - <"$1" >"$AGENT_BRIDGE_ATTEMPT_DIR/codex-events.jsonl"
#   # Optional isolation: export CODEX_HOME to a per-attempt directory first (then it
#   # must also hold the user's Codex auth), or add --ignore-user-config.
#
# ---- Example: Gemini CLI headless, save as gemini-worker.sh --------------------------
#   #!/usr/bin/env bash
#   set -euo pipefail
#   # Private settings: GEMINI_CLI_HOME=X reads X/.gemini/settings.json. The bridge is
#   # the only MCP server; "trust": true lets headless Gemini offer its tools (without
#   # it, tools needing confirmation are not offered at all). Auth here is
#   # GEMINI_API_KEY from the environment (the private home has no OAuth login).
#   export GEMINI_CLI_HOME="$AGENT_BRIDGE_ATTEMPT_DIR/gemini-home"
#   mkdir -p "$GEMINI_CLI_HOME/.gemini"
#   "$AGENT_BRIDGE_PYTHON" - "$GEMINI_CLI_HOME/.gemini/settings.json" <<'PY'
#   import json, os, sys
#   e = os.environ
#   json.dump({
#       "mcpServers": {"agent_bridge": {
#           "command": e["AGENT_BRIDGE_PYTHON"],
#           "args": [os.path.join(e["AGENT_BRIDGE_PROJECT"], "server.py")],
#           "env": {"AGENT_BRIDGE_ROLE": "worker", **{k: e[k] for k in ("AGENT_ID", "AGENT_BRIDGE_DB",
#                   "AGENT_BRIDGE_CONFIG", "AGENT_BRIDGE_RUNTIME_DIR") if e.get(k)}},
#           "trust": True}},
#       "security": {"auth": {"selectedType": "gemini-api-key"}},
#       "privacy": {"usageStatisticsEnabled": False},
#       "telemetry": {"enabled": False},
#   }, open(sys.argv[1], "w"))
#   PY
#   # -p takes a FIXED instruction; the task arrives on stdin, which Gemini appends to
#   # the prompt. --skip-trust avoids exit 55 in an untrusted workspace (it also
#   # enables project-level settings there). -o json: result/error object.
#   exec gemini --skip-trust --allowed-mcp-server-names agent_bridge -o json \
#     -p "You are the Agent Bridge worker for message $AGENT_BRIDGE_MESSAGE_ID; your task follows." \
#     <"$1" >"$AGENT_BRIDGE_ATTEMPT_DIR/gemini-result.json"
#
# ---- Wiring ----------------------------------------------------------------------------
#   config.json: "launcher": "launchers/command_headless.sh", and export
#   AGENT_BRIDGE_WORKER_COMMAND=/abs/path/codex-worker.sh for the dispatcher process.
set -euo pipefail

prog=command_headless.sh
# shellcheck source=SCRIPTDIR/_common.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/_common.sh"

take_request_file "$@"

if [[ -z ${AGENT_BRIDGE_WORKER_COMMAND:-} ]]; then
    fail 2 "AGENT_BRIDGE_WORKER_COMMAND is not set: set it to the shell command that runs your worker (it receives the request file path as its first argument)"
fi

export AGENT_BRIDGE_REQUEST_FILE=$request_file
# The command string is trusted local configuration, run exactly as written.
exec bash -c "$AGENT_BRIDGE_WORKER_COMMAND"' "$@"' agent-bridge-worker "$request_file"
