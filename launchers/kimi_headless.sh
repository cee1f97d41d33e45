#!/usr/bin/env bash
# Agent Bridge worker launcher: Kimi Code, one non-interactive run (prompt mode).
#
# Checked against Kimi Code 2.1.0 (npm @moonshot-ai/kimi-code; `kimi --version` -> "2.1.0"):
# every flag below appears in `kimi --help` of that version.
#
# Kimi automation is OFF by default in config.json ("kimi": {"auto": false}). In prompt
# mode (-p) Kimi Code 2.1.0 runs under its automatic permission policy: every tool the
# agent can see is approved without asking, and -p cannot be combined with
# --yolo/--auto/--plan. Turning it on is a deliberate local decision; see docs/launchers.md.
#
# Contract (fixed by the dispatcher):  kimi_headless.sh REQUEST_FILE
#   cwd = workspace, stdin = /dev/null, stdout/stderr = private per-attempt log.
#   Kimi takes its prompt only from argv, so argv carries a FIXED instruction naming the
#   message id and the request file path; the task text itself never reaches argv/env.
# Environment: AGENT_ID, AGENT_BRIDGE_MESSAGE_ID, AGENT_BRIDGE_DB, AGENT_BRIDGE_CONFIG,
#   AGENT_BRIDGE_PROJECT, AGENT_BRIDGE_PYTHON, AGENT_BRIDGE_ATTEMPT_DIR (required);
#   AGENT_BRIDGE_DIAGNOSTICS_FILE (optional: payload-free outcome JSON is written there);
#   KIMI_BIN (optional, default `kimi` on PATH);
#   KIMI_NODE (optional: a Node >= 22.19 binary used to run KIMI_BIN, for npm installs
#     whose `kimi` script would otherwise pick up an older `node` from PATH);
#   KIMI_CODE_HOME (optional: the user's real Kimi home, default ~/.kimi-code; the
#     worker itself gets a private home, see below);
#   AGENT_BRIDGE_MAX_TURNS (optional positive integer -> KIMI_LOOP_MAX_STEPS_PER_TURN,
#     unless that is already set; Kimi counts steps, not turns, so this is approximate).
# Exit code: Kimi's own exit code; 2 for a bad invocation; 127 if the CLI is missing.
set -euo pipefail
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
#   config.toml   symlink to the user's file: providers, default model, [[permission.rules]].
#   credentials/  symlink to the user's directory: `kimi login` OAuth tokens. A symlink,
#                 not a copy, so a token refreshed by the worker is saved for the user too.
#   device_id, region   symlinks (device identity; the mainland-cn/global login region).
# Deliberately NOT linked: sessions and logs (they hold the task and the model's text and
# stay private to this attempt), plugins, skills, AGENTS.md, the user's mcp.json, and the
# trust records (so the workspace counts as untrusted and its project MCP files are ignored).
user_home=${KIMI_CODE_HOME:-${HOME:-}/.kimi-code}
worker_home=$attempt_dir/kimi-code-home
mkdir -p -- "$worker_home"
for item in config.toml credentials device_id region; do
    if [[ -e $user_home/$item && ! -e $worker_home/$item ]]; then
        ln -s -- "$user_home/$item" "$worker_home/$item"
    fi
done
if [[ ! -e $worker_home/config.toml ]]; then
    printf '%s: note: no %s; relying on KIMI_MODEL_* environment variables\n' \
        "$prog" "$user_home/config.toml" >&2
fi

# Agent profile: the worker sees only the bridge's MCP tools plus the read-only Read
# tool (needed to read REQUEST_FILE). Kimi matches MCP entries in `tools` as globs and
# built-in tools by exact name, so Bash, Write, Edit, FetchURL, Agent, Skill ... are not
# offered to the model at all. ${base_prompt} keeps Kimi's default system prompt.
agent_file=$attempt_dir/kimi-agent-bridge-worker.md
cat >"$agent_file" <<'MD'
---
name: agent-bridge-worker
description: One-shot Agent Bridge worker limited to the agent_bridge MCP tools and Read.
tools:
  - Read
  - "mcp__agent_bridge__*"
---
${base_prompt}

You are running as a one-shot, non-interactive Agent Bridge worker. Your only tools are
the agent_bridge MCP tools and Read. Nobody is watching this session: do not ask
questions; report results and problems through the agent_bridge tools.
MD

"$AGENT_BRIDGE_PYTHON" - "$worker_home/mcp.json" <<'PY'
import json, os, sys

env = os.environ
config = {
    "mcpServers": {
        "agent_bridge": {
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
# The raw stream contains model text: keep it in the private attempt dir only.
stream_out=$attempt_dir/kimi-stream.jsonl
rc=0
"${kimi_cmd[@]}" --agent-file "$agent_file" --output-format stream-json -p "$instruction" \
    </dev/null >"$stream_out" || rc=$?

# Diagnostics come from two machine-readable sources, both private to the attempt:
# the stream-json output (counts only) and the session's wire.jsonl event log in the
# private home (the final turn.ended reason and error code/name, all enums).
if [[ -n ${AGENT_BRIDGE_DIAGNOSTICS_FILE:-} ]]; then
    "$AGENT_BRIDGE_PYTHON" - "$stream_out" "$AGENT_BRIDGE_DIAGNOSTICS_FILE" "$rc" "$worker_home" <<'PY' \
        || printf '%s: warning: could not write diagnostics\n' "$prog" >&2
import glob, json, os, re, sys

src, dst, rc, home = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
ENUM = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")


def enum(v):
    return v if isinstance(v, str) and ENUM.match(v) else None


diag = {
    "stream_json": "missing",
    "exit_code": rc,
    "cli_version": None,
    "assistant_messages": 0,
    "tool_calls": 0,
    "bridge_tool_calls": 0,
    "tool_results": 0,
    "retries": 0,
    "last_retry_error_name": None,
    "last_retry_status_code": None,
    "completed_with_resume_hint": False,
    "unparsed_lines": 0,
    "turn_reason": None,
    "turn_error_code": None,
    "turn_error_name": None,
}
try:
    with open(src, encoding="utf-8", errors="replace") as fh:
        lines = fh.read().splitlines()
except OSError:
    lines = []
for line in lines:
    if not line.strip():
        continue
    try:
        obj = json.loads(line)
    except ValueError:
        diag["unparsed_lines"] += 1
        continue
    if not isinstance(obj, dict):
        diag["unparsed_lines"] += 1
        continue
    role, kind = obj.get("role"), obj.get("type")
    if role == "meta" and kind == "system.version":
        diag["cli_version"] = enum(obj.get("version"))
    elif role == "meta" and kind == "turn.step.retrying":
        diag["retries"] += 1
        diag["last_retry_error_name"] = enum(obj.get("error_name"))
        code = obj.get("status_code")
        diag["last_retry_status_code"] = code if isinstance(code, int) and not isinstance(code, bool) else None
    elif role == "meta" and kind == "session.resume_hint":
        diag["completed_with_resume_hint"] = True
    elif role == "assistant":
        diag["assistant_messages"] += 1
        for call in obj.get("tool_calls") or []:
            diag["tool_calls"] += 1
            name = ((call or {}).get("function") or {}).get("name")
            if isinstance(name, str) and name.startswith("mcp__agent_bridge__"):
                diag["bridge_tool_calls"] += 1
    elif role == "tool":
        diag["tool_results"] += 1
wires = sorted(glob.glob(os.path.join(home, "sessions", "*", "*", "agents", "main", "wire.jsonl")),
               key=os.path.getmtime)
if wires:
    with open(wires[-1], encoding="utf-8", errors="replace") as fh:
        for line in fh:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict) and event.get("type") == "turn.ended":
                error = event.get("error") if isinstance(event.get("error"), dict) else {}
                diag["turn_reason"] = enum(event.get("reason"))
                diag["turn_error_code"] = enum(error.get("code"))
                diag["turn_error_name"] = enum(error.get("name"))
if lines:
    parsed = len([l for l in lines if l.strip()]) - diag["unparsed_lines"]
    diag["stream_json"] = "ok" if parsed > 0 else "invalid"
tmp = "%s.tmp.%d" % (dst, os.getpid())
fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
with os.fdopen(fd, "w", encoding="utf-8") as fh:
    json.dump(diag, fh, sort_keys=True)
    fh.write("\n")
os.replace(tmp, dst)
PY
fi

exit "$rc"
