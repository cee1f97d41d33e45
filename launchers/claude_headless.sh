#!/usr/bin/env bash
# Agent Bridge worker launcher: Claude Code, one non-interactive run.
#
# Checked against Claude Code 2.1.332 (`claude --version` -> "2.1.332 (Claude Code)"):
# every flag below appears in `claude --help` of that version, except --max-turns,
# which 2.1.332 hides from --help but accepts (see docs/launchers.md).
#
# Contract (fixed by the dispatcher):  claude_headless.sh REQUEST_FILE
#   cwd = workspace, stdin = /dev/null, stdout/stderr = private per-attempt log.
#   REQUEST_FILE is a 0600 file with the complete worker prompt. Its content is
#   handed to Claude on stdin only: never in argv, never in the environment.
# Environment: AGENT_ID, AGENT_BRIDGE_MESSAGE_ID, AGENT_BRIDGE_DB, AGENT_BRIDGE_CONFIG,
#   AGENT_BRIDGE_PROJECT, AGENT_BRIDGE_PYTHON, AGENT_BRIDGE_ATTEMPT_DIR (required);
#   AGENT_BRIDGE_DIAGNOSTICS_FILE (optional: payload-free outcome JSON is written there);
#   CLAUDE_BIN (optional, default `claude` on PATH);
#   AGENT_BRIDGE_MAX_TURNS (optional positive integer -> --max-turns).
# Exit code: Claude's own exit code; 2 for a bad invocation; 127 if the CLI is missing.
set -euo pipefail
umask 077

prog=claude_headless.sh
# shellcheck source=SCRIPTDIR/_common.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/_common.sh"

take_request_file "$@"

require_bridge_env

read_max_turns

claude_bin=${CLAUDE_BIN:-claude}
command -v -- "$claude_bin" >/dev/null 2>&1 \
    || fail 127 "Claude Code CLI not found: '$claude_bin' (install it, or set CLAUDE_BIN to its path)"

# MCP config with exactly one server, agent_bridge. Written by Python so that paths
# are JSON-escaped correctly; lives in the private attempt directory (0600 via umask).
mcp_config=$attempt_dir/claude-mcp-config.json
"$AGENT_BRIDGE_PYTHON" - "$mcp_config" <<'PY'
import json, os, sys

env = os.environ
config = {
    "mcpServers": {
        "agent_bridge": {
            "type": "stdio",
            "command": env["AGENT_BRIDGE_PYTHON"],
            "args": [os.path.join(env["AGENT_BRIDGE_PROJECT"], "server.py")],
            "env": {
                "AGENT_ID": env["AGENT_ID"],
                "AGENT_BRIDGE_DB": env["AGENT_BRIDGE_DB"],
                "AGENT_BRIDGE_CONFIG": env["AGENT_BRIDGE_CONFIG"],
            },
        }
    }
}
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
with os.fdopen(fd, "w", encoding="utf-8") as fh:
    json.dump(config, fh, indent=2)
    fh.write("\n")
PY

# Why each flag (Claude Code 2.1.332):
#   -p                          non-interactive; the prompt is read from stdin (no positional).
#   --output-format json        one result object at the end (is_error, subtype, ...).
#   --mcp-config FILE           load the bridge server from the generated file ...
#   --strict-mcp-config         ... and ignore every other MCP configuration.
#   --tools ""                  no built-in tools at all (no Bash, Edit, Read, WebFetch ...).
#   --allowedTools PATTERN      pre-approve only the bridge's tools.
#   --permission-mode dontAsk   anything not pre-approved is denied instead of asked.
#   --permission-prompts none   nobody answers prompts in -p: a would-be prompt is a denial.
# Not used: bypassPermissions / --dangerously-skip-permissions (Claude Code refuses
# them as root, and they would lift the policy above).
# Variadic flags (--mcp-config, --tools, --allowedTools) swallow following words that
# do not start with '-'; each one is followed by another option here, and there is no
# positional prompt for them to swallow: the prompt goes on stdin.
args=(
    -p
    --output-format json
    --mcp-config "$mcp_config"
    --strict-mcp-config
    --tools ""
    --allowedTools "mcp__agent_bridge__*"
    --permission-mode dontAsk
    --permission-prompts none
)
if [[ -n $max_turns ]]; then
    args+=(--max-turns "$max_turns")
fi

# ENABLE_TOOL_SEARCH=false: 2.1.332 otherwise hides MCP tools behind ToolSearch.
# CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1: no telemetry, feature-flag or preflight calls.
export ENABLE_TOOL_SEARCH=false
export CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1

# The raw result JSON contains model text: keep it in the private attempt dir only.
result_json=$attempt_dir/claude-result.json
rc=0
"$claude_bin" "${args[@]}" <"$request_file" >"$result_json" || rc=$?

if [[ -n ${AGENT_BRIDGE_DIAGNOSTICS_FILE:-} ]]; then
    "$AGENT_BRIDGE_PYTHON" - "$result_json" "$AGENT_BRIDGE_DIAGNOSTICS_FILE" <<'PY' \
        || printf '%s: warning: could not write diagnostics\n' "$prog" >&2
import json, os, re, sys

src, dst = sys.argv[1], sys.argv[2]
ENUM = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")


def load_result(path):
    """Return (status, result-object). Only the final type=result object counts."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return "missing", None
    if not text.strip():
        return "missing", None
    candidates = []
    try:
        candidates.append(json.loads(text))
    except ValueError:
        for line in reversed(text.splitlines()):
            try:
                candidates.append(json.loads(line))
            except ValueError:
                continue
    for obj in candidates:
        if isinstance(obj, dict) and obj.get("type") == "result":
            return "ok", obj
    return "invalid", None


def enum(v):
    return v if isinstance(v, str) and ENUM.match(v) else None


def number(v):
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def integer(v):
    return v if isinstance(v, int) and not isinstance(v, bool) else None


status, res = load_result(src)
res = res or {}
denials = res.get("permission_denials")
diag = {
    "result_json": status,
    "is_error": res.get("is_error") if isinstance(res.get("is_error"), bool) else None,
    "subtype": enum(res.get("subtype")),
    "terminal_reason": enum(res.get("terminal_reason")),
    "num_turns": integer(res.get("num_turns")),
    "total_cost_usd": number(res.get("total_cost_usd")),
    "duration_ms": number(res.get("duration_ms")),
    "api_error_status": integer(res.get("api_error_status")),
    "permission_denials_count": len(denials) if isinstance(denials, list) else None,
}
tmp = "%s.tmp.%d" % (dst, os.getpid())
fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
with os.fdopen(fd, "w", encoding="utf-8") as fh:
    json.dump(diag, fh, sort_keys=True)
    fh.write("\n")
os.replace(tmp, dst)
PY
fi

exit "$rc"
